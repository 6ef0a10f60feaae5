"""Packets followed hop by hop with scapy: captures in the hosts, probes, and what they show.

The emulated hosts forward for each other (IP forwarding and static routes, as the TopoOpt
prototype relayed with RDMA forwarding). This module shows it at the level of packets, on a
network that is up (`emulator.EmulatedNetwork`, this machine's hosts):

- `Capture` runs scapy's sniffer in chosen hosts (`emulator.packet_host`, one process per
  host started with ``net.popen``: inside its namespace, tracked and ended by PID with the
  network), on every interface of each, both directions, into one pcap file per interface
  (Wireshark opens them), bounded in time. `Capture.frames` reads them back with scapy:
  one `Frame` per packet, with the host, the interface, the direction (an outgoing packet
  carries the interface's own Ethernet address, `addressing.cable_mac`), the TTL and the
  kernel's timestamp. Every host shares this machine's clock, so timestamps compare across hosts.
- `send_probes` sends TCP segments built by scapy from a host, each from a given source
  address (a plane's, for multipath plans) and with the given ports: the 5-tuple of the
  workers' data connections (`probe_tuple`). `trace` sends one probe per (plane, repeat)
  while capturing on every node of the planned paths, and `follow` turns the sightings into
  the hops the probe took (`Hop`: host, interface in and out, TTL in and out, times).
- `tcp_stream` reassembles one direction of a TCP connection from captured segments and
  `zmtp_messages` splits it into ZeroMQ's messages (ZMTP 3), so a chunk the workers sent
  can be read off the wire where a host relays it.

Traffic stays inside the emulated namespaces: probes go between the hosts' own addresses
(198.18.0.0/15), and captures only read.

Over 300 lines: the captures, the probes, the walk over their sightings and the stream readers
all work on one `Frame`, as the host program (`emulator.packet_host`) writes it and scapy
reads it back.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.limits import limit_s

from .addressing import cable_mac, identity
from .errors import EmulationError

HOST_PROGRAM = Path(__file__).with_name("packet_host.py")
"""Run by path with ``python -P``: standard library and scapy only (`emulator.packet_host`)."""
CAPTURE_LIMIT_S = limit_s(120.0)
"""The longest a capture process runs if nobody stops it: it ends itself then."""
READY_TIMEOUT_S = limit_s(30.0)
"""How long every capture of one `Capture` may take to open its sockets (scapy's import
included, several hosts at once on a busy 2-core machine)."""
STOP_TIMEOUT_S = limit_s(20.0)
"""How long a capture may take to stop and close its pcap files once told."""
SEND_TIMEOUT_S = limit_s(20.0)
"""How long the probe sender may take (scapy's import included)."""
SETTLE_S = 0.3
"""How long the last probe gets to cross the network before the captures stop (a probe
crosses a dozen hops in well under a millisecond; the captures' queues drain too)."""
EPHEMERAL_PORTS = (32768, 60999)
"""Linux's default ``net.ipv4.ip_local_port_range``: the workers bind their data sockets to
port 0 and connect from port 0, so both ends of their connections get ports from it."""
DEFAULT_PROBE_PORTS = (EPHEMERAL_PORTS[0] + 1, EPHEMERAL_PORTS[0])
"""(source, destination) port of a probe unless told otherwise: two of the workers' ports."""
MARKER = b"topolab-trace "
"""How a probe's payload starts: the marker, the trace's token, the probe's number."""
ZMTP_GREETING_BYTES = 64
_ZMTP_MORE, _ZMTP_LONG, _ZMTP_COMMAND = 0x01, 0x02, 0x04
TCP = 6


@dataclass(frozen=True)
class Frame:
    """One captured IPv4 packet as one host's interface saw it."""

    node: int
    ifname: str
    outgoing: bool  # the host sent it on this interface (else it arrived there)
    time: float  # unix seconds, the kernel's timestamp
    src: str
    dst: str
    ttl: int
    ip_bytes: int  # the IP packet's length (header included)
    proto: int
    sport: int | None = None
    dport: int | None = None
    seq: int | None = None
    payload: bytes = b""  # TCP payload

    @property
    def flow(self) -> tuple[str, int | None, str, int | None]:
        return (self.src, self.sport, self.dst, self.dport)


@dataclass(frozen=True)
class ProbeTuple:
    """The 5-tuple a probe carries (protocol TCP) and the plane it stands for."""

    src: int
    dst: int
    plane: int
    src_address: str
    dst_address: str
    sport: int
    dport: int

    def __str__(self) -> str:
        return f"TCP {self.src_address}:{self.sport} -> {self.dst_address}:{self.dport}"


@dataclass(frozen=True)
class Hop:
    """Where a probe was seen in one host: the interface it came in on and went out of
    (None: it started or ended there, or was not seen), the TTL on each, and the times."""

    node: int
    in_ifname: str | None = None
    out_ifname: str | None = None
    ttl_in: int | None = None
    ttl_out: int | None = None
    time_in: float | None = None
    time_out: float | None = None
    seen: bool = True


@dataclass
class Trace:
    """One probe followed: the route it should take, the hops it took, when it was sent."""

    probe: ProbeTuple
    repeat: int
    expected: list[int]
    hops: list[Hop]
    sent_at: float

    @property
    def observed(self) -> list[int]:
        return [hop.node for hop in self.hops]

    @property
    def reached(self) -> bool:
        return bool(self.hops) and self.hops[-1].node == self.probe.dst and self.hops[-1].seen

    @property
    def ok(self) -> bool:
        return self.reached and self.observed == self.expected

    def first_difference(self, names: Sequence[str] | None = None) -> str:
        """One line naming the first hop where the probe left the plan ("" when it did not);
        ``names``: the nodes' host names (default: their numbers)."""
        if self.ok:
            return ""

        def name(node: int) -> str:
            return names[node] if names is not None else f"node {node}"

        observed = self.observed
        for i, want in enumerate(self.expected):
            if i >= len(observed):
                last = observed[-1] if observed else self.probe.src
                return f"hop {i}: the plan's is {name(want)}, the probe was not seen after {name(last)}"
            if observed[i] != want:
                return f"hop {i}: the probe reached {name(observed[i])}, the plan's is {name(want)}"
        if len(observed) > len(self.expected):
            return f"hop {len(self.expected)}: the probe went on to {name(observed[len(self.expected)])}"
        return f"hop {len(observed) - 1}: {name(observed[-1])} did not receive the probe"


def probe_tuple(
    net: Any, src: int, dst: int, plane: int = 0, ports: tuple[int, int] = DEFAULT_PROBE_PORTS
) -> ProbeTuple:
    """The 5-tuple of the workers' data connection from ``src`` to ``dst`` on ``plane``: TCP,
    from the source's address on that plane (its identity on plane 0, `net.plane_address`
    otherwise: what the worker binds its socket to) to the destination's identity, with
    ``ports`` (two of the ephemeral ports the workers' sockets get)."""
    source = net.plane_address(src, plane) if plane else net.host_address(src)
    return ProbeTuple(src, dst, plane, source, net.host_address(dst), ports[0], ports[1])


def python_argv(*args: str) -> list[str]:
    """The host program's command line (`HOST_PROGRAM`, run by path with ``-P``)."""
    return [sys.executable, "-P", str(HOST_PROGRAM), *args]


def _read_line(proc: subprocess.Popen, deadline: float) -> bytes:
    """One line of ``proc``'s unbuffered stdout, by ``deadline`` (b"" if it ended or is late)."""
    fd = proc.stdout.fileno()
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return b""
        chunk = os.read(fd, 1)
        if not chunk:
            return b""
        line += chunk
    return line


def _end(proc: subprocess.Popen, timeout_s: float) -> tuple[bytes, bytes]:
    """Close ``proc``'s input and take its output; past ``timeout_s`` end it by its PID."""
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:  # the network's teardown ends it, by PID, with the host
        return b"", f"pid {proc.pid} did not end after SIGKILL within {timeout_s:g} s".encode()


def _last_line(text: bytes) -> str:
    lines = [line for line in text.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


class Capture:
    """scapy's sniffer on every interface of ``nodes`` while the ``with`` block runs.

    ``folder`` receives ``<interface>.pcap`` per interface; ``contains``: keep only packets
    whose bytes contain it (None: every packet). Entering returns once every sniffer is
    ready (so nothing sent after it is missed); leaving stops them (bounded, then by PID).
    Afterwards `frames` reads what each node saw and `drops` is what the kernel lost."""

    def __init__(self, net: Any, nodes: Iterable[int], folder: str | Path, contains: bytes | None = None):
        self.net = net
        self.nodes = sorted(set(nodes))
        self.folder = Path(folder)
        self.contains = contains
        self.procs: dict[int, subprocess.Popen] = {}
        self.packets: dict[str, int] = {}
        self.drops = 0

    def _ifnames(self, node: int) -> list[str]:
        return [port.ifname for port in self.net.ports[node]]

    def __enter__(self) -> Capture:
        try:
            for node in self.nodes:
                if not self._ifnames(node):
                    continue
                args = ["capture", "--iface", ",".join(self._ifnames(node)), "--out", str(self.folder)]
                args += ["--seconds", f"{CAPTURE_LIMIT_S:g}"]
                if self.contains:
                    args += ["--contains", self.contains.hex()]
                self.procs[node] = self.net.popen(
                    node,
                    python_argv(*args),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    bufsize=0,
                )
            deadline = time.monotonic() + READY_TIMEOUT_S
            for node, proc in self.procs.items():
                if _read_line(proc, deadline).strip() != b"ready":
                    _out, err = _end(proc, STOP_TIMEOUT_S)
                    raise EmulationError(
                        f"packet capture in {self.net.host_name(node)} did not start (within "
                        f"{READY_TIMEOUT_S:g} s): {_last_line(err)}"
                    )
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        problems = self._stop()
        if problems and exc[0] is None:
            raise EmulationError("; ".join(problems))

    def _stop(self) -> list[str]:
        problems = []
        for node, proc in self.procs.items():
            if proc.returncode is not None and proc.stdout.closed:
                continue
            out, err = _end(proc, STOP_TIMEOUT_S)
            summary = out.decode(errors="replace").strip().splitlines()
            if proc.returncode != 0 or not summary or not summary[-1].startswith("{"):
                problems.append(f"packet capture in {self.net.host_name(node)} failed: {_last_line(err)}")
                continue
            facts = json.loads(summary[-1])
            self.packets.update(facts["packets"])
            self.drops += int(facts["drops"])
        return problems

    def frames(self, node: int) -> list[Frame]:
        """Every IPv4 packet ``node``'s interfaces captured, in time order."""
        out: list[Frame] = []
        for port in self.net.ports[node]:
            path = self.folder / f"{port.ifname}.pcap"
            if path.exists():
                out += read_frames(path, node, port.ifname, cable_mac(port.address))
        return sorted(out, key=lambda f: f.time)


def read_frames(path: str | Path, node: int, ifname: str, own_mac: str) -> list[Frame]:
    """The IPv4 packets of one interface's pcap file (scapy's reader), as `Frame` s; a packet
    whose Ethernet source is ``own_mac`` (the interface's own) is outgoing."""
    from scapy.layers.inet import IP
    from scapy.layers.inet import TCP as TCPLayer
    from scapy.layers.l2 import Ether
    from scapy.utils import PcapReader

    frames = []
    with PcapReader(str(path)) as reader:
        for pkt in reader:
            if IP not in pkt:
                continue
            ip = pkt[IP]
            tcp = pkt[TCPLayer] if TCPLayer in pkt else None
            # the TCP payload by the headers' lengths: never the Ethernet padding of a short frame
            length = 0 if tcp is None else int(ip.len) - 4 * int(ip.ihl) - 4 * int(tcp.dataofs)
            frames.append(
                Frame(
                    node=node,
                    ifname=ifname,
                    outgoing=Ether in pkt and pkt[Ether].src.lower() == own_mac,
                    time=float(pkt.time),
                    src=ip.src,
                    dst=ip.dst,
                    ttl=int(ip.ttl),
                    ip_bytes=int(ip.len),
                    proto=int(ip.proto),
                    sport=None if tcp is None else int(tcp.sport),
                    dport=None if tcp is None else int(tcp.dport),
                    seq=None if tcp is None else int(tcp.seq),
                    payload=b"" if tcp is None else bytes(tcp.payload)[: max(length, 0)],
                )
            )
    return frames


def send_probes(net: Any, node: int, probes: Sequence[tuple[ProbeTuple, bytes]], ttl: int = 64) -> list[float]:
    """Send each ``(tuple, payload)`` from ``node`` as one TCP segment built by scapy; the
    unix time of each send."""
    args = ["send", "--ttl", str(ttl)]
    for t, payload in probes:
        args += ["--probe", f"{t.src_address},{t.dst_address},{t.sport},{t.dport},{payload.hex()}"]
    proc = net.popen(node, python_argv(*args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = _end(proc, SEND_TIMEOUT_S)
    if proc.returncode != 0:
        raise EmulationError(f"sending probes from {net.host_name(node)} failed: {_last_line(err)}")
    return [float(t) for t in json.loads(out.decode().strip().splitlines()[-1])["sent"]]


@dataclass
class Sightings:
    """Where one probe was seen: per node, the frame arriving and the frame leaving."""

    arrived: dict[int, Frame] = field(default_factory=dict)
    left: dict[int, Frame] = field(default_factory=dict)

    def add(self, frame: Frame) -> None:
        where = self.left if frame.outgoing else self.arrived
        where.setdefault(frame.node, frame)  # the first copy (a retransmission would come later)


def follow(src: int, dst: int, seen: Sightings, ports: Sequence[Sequence[Any]], captured: set[int]) -> list[Hop]:
    """The hops of one probe from ``src``: at each node the interface it left by names the
    next node (that cable's other end); the walk ends at ``dst``, where it was not seen
    leaving, or at a node not ``captured`` (which ends the list unseen)."""
    hops: list[Hop] = []
    node = src
    while len(hops) <= len(ports):
        if node not in captured:
            hops.append(Hop(node, seen=False))
            break
        came, went = seen.arrived.get(node), seen.left.get(node)
        hops.append(
            Hop(
                node,
                in_ifname=came.ifname if came else None,
                out_ifname=went.ifname if went else None,
                ttl_in=came.ttl if came else None,
                ttl_out=went.ttl if went else None,
                time_in=came.time if came else None,
                time_out=went.time if went else None,
                seen=came is not None or went is not None,
            )
        )
        if node == dst or went is None:
            break
        node = next(port.peer for port in ports[node] if port.ifname == went.ifname)
    return hops


def trace(
    net: Any,
    probes: Sequence[ProbeTuple],
    expected: Sequence[Sequence[int]],
    folder: str | Path,
    repeats: int = 1,
) -> list[Trace]:
    """Send every probe ``repeats`` times from its source while scapy captures on every
    node of the ``expected`` routes (one per probe); each probe followed hop by hop."""
    token = secrets.token_hex(4).encode()
    tag = MARKER + token + b" "
    captured = {node for route in expected for node in route}
    sources = sorted({p.src for p in probes})
    payloads = {}
    with Capture(net, captured, folder, contains=tag) as capture:
        sent: dict[int, float] = {}
        for src in sources:
            batch = []
            for k, probe in enumerate(probes):
                if probe.src != src:
                    continue
                for r in range(repeats):
                    number = k * repeats + r
                    payloads[number] = tag + str(number).encode()
                    batch.append((number, probe))
            times = send_probes(net, src, [(p, payloads[n]) for n, p in batch])
            sent.update({n: t for (n, _p), t in zip(batch, times, strict=True)})
        time.sleep(SETTLE_S)
    by_number = {n: Sightings() for n in payloads}
    for node in captured:
        for frame in capture.frames(node):
            if frame.payload.startswith(tag):
                number = int(frame.payload[len(tag) :].split()[0])
                if number in by_number:
                    by_number[number].add(frame)
    traces = []
    for k, probe in enumerate(probes):
        for r in range(repeats):
            number = k * repeats + r
            hops = follow(probe.src, probe.dst, by_number[number], net.ports, captured)
            traces.append(Trace(probe, r, list(expected[k]), hops, sent[number]))
    return traces


def tcp_stream(frames: Iterable[Frame]) -> tuple[bytes, list[tuple[int, Frame]]]:
    """One direction of one TCP connection (``frames`` of one flow, e.g. as one interface
    saw them) as the bytes it carried, in order from its first segment, each byte once
    (a retransmission adds nothing); also each segment's offset in those bytes. Stops at the
    first gap (a segment the capture missed)."""
    segments = [(f.seq, f) for f in frames if f.payload and f.seq is not None]
    if not segments:
        return b"", []
    # sequence numbers wrap at 2**32 and a stream is far shorter than 2**31: it starts after
    # the widest (circular) gap between the numbers seen
    seqs = sorted({seq for seq, _f in segments})
    gaps = [(seqs[(i + 1) % len(seqs)] - seq) % (1 << 32) for i, seq in enumerate(seqs)]
    base = seqs[(gaps.index(max(gaps)) + 1) % len(seqs)]
    ordered = sorted((((seq - base) % (1 << 32), f) for seq, f in segments), key=lambda s: s[0])
    data = bytearray()
    placed = []
    for offset, frame in ordered:
        if offset > len(data):
            break  # a gap: nothing after it is contiguous
        end = offset + len(frame.payload)
        if end > len(data):
            data += frame.payload[len(data) - offset :]
        placed.append((offset, frame))
    return bytes(data), placed


@dataclass(frozen=True)
class ZmtpMessage:
    """One ZeroMQ message read off a TCP stream: each frame's offset in the stream and bytes."""

    frames: tuple[tuple[int, bytes], ...]


def zmtp_messages(stream: bytes) -> list[ZmtpMessage]:
    """ZeroMQ's messages (ZMTP 3: a 64-byte greeting, then frames of a flags byte, a 1- or
    8-byte length and the body; commands such as READY are skipped) in ``stream``, up to the
    last whole frame."""
    if len(stream) < ZMTP_GREETING_BYTES or stream[0] != 0xFF or stream[9] != 0x7F:
        return []
    messages: list[ZmtpMessage] = []
    parts: list[tuple[int, bytes]] = []
    i = ZMTP_GREETING_BYTES
    while i < len(stream):
        flags = stream[i]
        width = 8 if flags & _ZMTP_LONG else 1
        if i + 1 + width > len(stream):
            break
        size = int.from_bytes(stream[i + 1 : i + 1 + width], "big")
        body_at = i + 1 + width
        if body_at + size > len(stream):
            break
        if not flags & _ZMTP_COMMAND:
            parts.append((body_at, stream[body_at : body_at + size]))
            if not flags & _ZMTP_MORE:
                messages.append(ZmtpMessage(tuple(parts)))
                parts = []
        i = body_at + size
    return messages


def own_addresses(net: Any, node: int) -> set[str]:
    """Every address ``node`` holds: its identity, its cable ends, its plane addresses."""
    return {identity(node), *(port.address for port in net.ports[node]), *net.plane_addresses(node).values()}
