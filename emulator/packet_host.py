"""The packet program that runs inside one emulated host: capture its interfaces, or send probes.

Started by `emulator.packets` with ``net.popen`` (so inside the host's network namespace,
tracked and ended by PID with the network) as ``python -P emulator/packet_host.py ...``: run
by path with ``-P`` it imports the standard library and scapy only, never the ``emulator``
package (Mininet, pyroute2), and starts in a fraction of a second.

``capture --iface IF,... --out DIR --seconds S [--contains HEX]``
    scapy's `AsyncSniffer` on the host's interfaces, one packet socket each (both directions:
    a packet socket also sees what the host sends), writing every packet (or every one whose
    bytes contain ``HEX``) to ``DIR/<interface>.pcap`` with the kernel's nanosecond
    timestamps. Prints ``ready`` once every socket is open, then sniffs until its standard
    input ends (the caller's stop) or ``S`` seconds pass, whichever is first; then prints one
    JSON line ``{"packets": {interface: n}, "drops": n}`` (drops: the kernel's count of packets
    the sockets' buffers lost) and exits.
``send --probe SRC,DST,SPORT,DPORT,HEX [--probe ...] [--ttl T]``
    each probe as one TCP segment (PSH+ACK, DF, payload ``HEX``) built by scapy and sent by
    scapy's raw IPv4 socket bound to ``SRC`` (so the kernel routes it as it routes the
    workers' sockets bound to that address: policy rules by source included); prints one JSON
    line ``{"sent": [unix time of each send]}``.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import struct
import sys
import threading
import time

RECV_BYTES = 1 << 18
"""Read size of a capture socket: a segmentation-offloaded TCP packet on a veth is up to 64 KiB
plus its Ethernet header, past scapy's default read of 65535 bytes."""
SNAPLEN = RECV_BYTES
RCVBUF_BYTES = 32 << 20
"""Receive buffer of each capture socket (set with SO_RCVBUFFORCE, as root): seconds of a
shaped cable's traffic, so a burst never outruns the Python sniffer."""
READY_TIMEOUT_S = 20.0
"""How long the sniffer's sockets may take to open."""
DLT_EN10MB = 1  # pcap link type: Ethernet
SOL_PACKET = 263
PACKET_STATISTICS = 6
SO_RCVBUFFORCE = 33
TCP_PUSH_ACK = "PA"
DEFAULT_TTL = 64  # Linux's net.ipv4.ip_default_ttl, what the workers' sockets send with


def _socket_drops(sock: socket.socket) -> int:
    """Packets the kernel dropped for this packet socket since the last read (PACKET_STATISTICS)."""
    try:
        _packets, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    except OSError:
        return 0
    return drops


def capture(ifnames: list[str], out: str, seconds: float, contains: bytes | None) -> int:
    from scapy.arch.linux import L2ListenSocket
    from scapy.sendrecv import AsyncSniffer
    from scapy.utils import PcapWriter

    class WideListenSocket(L2ListenSocket):
        """scapy's listening packet socket, reading whole offloaded packets."""

        def recv(self, x: int = RECV_BYTES, **kwargs):  # type: ignore[override]
            return super().recv(x, **kwargs)

    sockets: dict = {}
    writers = {}
    counts = dict.fromkeys(ifnames, 0)
    try:
        for ifname in ifnames:
            sock = WideListenSocket(iface=ifname, promisc=False)
            sock.ins.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
            _socket_drops(sock.ins)  # start the count now
            sockets[sock] = ifname
            writers[ifname] = PcapWriter(
                os.path.join(out, f"{ifname}.pcap"), linktype=DLT_EN10MB, nano=True, snaplen=SNAPLEN, sync=False
            )

        def keep(pkt) -> bool:
            return contains is None or contains in bytes(pkt.original or b"")

        def write(pkt) -> None:
            writers[pkt.sniffed_on].write(pkt)
            counts[pkt.sniffed_on] += 1

        started = threading.Event()
        sniffer = AsyncSniffer(
            opened_socket=sockets, prn=write, lfilter=keep, store=False, started_callback=started.set
        )
        sniffer.start()
        if not started.wait(READY_TIMEOUT_S):
            print(f"packet_host: the sniffer did not start within {READY_TIMEOUT_S:g} s", file=sys.stderr)
            return 1
        print("ready", flush=True)
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([sys.stdin], [], [], left)
            if readable and not sys.stdin.readline():
                break  # end of input: the caller's stop
        if sniffer.running:
            sniffer.stop()
        drops = sum(_socket_drops(sock.ins) for sock in sockets)
    finally:
        for writer in writers.values():
            writer.close()
        for sock in sockets:
            sock.close()
    print(json.dumps({"packets": counts, "drops": drops}), flush=True)
    return 0


def send(probes: list[str], ttl: int) -> int:
    from scapy.layers.inet import IP, TCP
    from scapy.packet import Raw
    from scapy.supersocket import L3RawSocket

    sockets: dict[str, L3RawSocket] = {}
    sent = []
    try:
        for text in probes:
            src, dst, sport, dport, payload = text.split(",")
            if src not in sockets:
                sock = L3RawSocket()
                sock.ins.close()  # it only sends: no copy of the host's traffic
                sock.outs.bind((src, 0))
                sockets[src] = sock
            pkt = (
                IP(src=src, dst=dst, ttl=ttl, flags="DF")
                / TCP(sport=int(sport), dport=int(dport), flags=TCP_PUSH_ACK, seq=1, ack=1)
                / Raw(bytes.fromhex(payload))
            )
            if sockets[src].send(pkt) != len(pkt):
                print(f"packet_host: sending {src} -> {dst} failed", file=sys.stderr)
                return 1
            sent.append(float(pkt.sent_time))  # scapy's clock reading just before the send
    finally:
        for sock in sockets.values():
            sock.outs.close()
    print(json.dumps({"sent": sent}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="packet_host", description=__doc__.split("\n\n", 1)[0])
    sub = parser.add_subparsers(dest="action", required=True)
    cap = sub.add_parser("capture")
    cap.add_argument("--iface", required=True)
    cap.add_argument("--out", required=True)
    cap.add_argument("--seconds", type=float, required=True)
    cap.add_argument("--contains", default="")
    snd = sub.add_parser("send")
    snd.add_argument("--probe", action="append", required=True)
    snd.add_argument("--ttl", type=int, default=DEFAULT_TTL)
    args = parser.parse_args(argv)
    if args.action == "capture":
        contains = bytes.fromhex(args.contains) if args.contains else None
        return capture(args.iface.split(","), args.out, args.seconds, contains)
    return send(args.probe, args.ttl)


if __name__ == "__main__":
    sys.exit(main())
