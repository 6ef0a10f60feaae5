"""The VXLAN underlay admits only the listed machines (emulator/cluster/net.py): a VXLAN frame
sent to a machine from an underlay address that is not one of the run's machines is dropped
(and counted) before any tunnel sees it, no forwarding entry is ever learned, traffic between
the listed machines still flows, and the filter goes with the run."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from contract.network import circulant_network
from emulator.cluster import ClusterNetwork
from emulator.cluster.net import VNI_BASE, VXLAN_PORT
from emulator.cluster.state import DROP_COUNTER, filter_table
from emulator.nsutil import in_netns_of
from tests.fixtures.standins import StandIns

pytestmark = pytest.mark.root

NET = circulant_network(3, (1,))  # a ring of 3 cables, one host per machine: every cable is a tunnel
PLACEMENT = [0, 1, 2]
STRANGER = "192.0.2.250"  # on the underlay's bridge, not a listed machine (stand-ins are .201-.203)
STRANGER_MAC = "02:00:00:00:be:ef"  # the inner frames' source: a tunnel that learned would keep it
PROBE_PORT = 9999
HOSTILE_FRAMES = 3
WAIT_S = 10.0  # deadline for an event that is due at once (a loaded host may take a while)

# runs in the emulated host: prints each datagram to PROBE_PORT until the control one
LISTENER = f"""
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", {PROBE_PORT}))
print("ready", flush=True)
while True:
    data = s.recv(2048)
    print("got", data.decode(errors="replace"), flush=True)
    if data == b"control":
        break
"""


@pytest.fixture
def standins() -> Iterator[StandIns]:
    with StandIns(3) as machines:
        yield machines
    assert machines.leftovers() == []


@pytest.fixture
def stranger(standins: StandIns) -> Iterator[int]:
    """A namespace of ours on the underlay's bridge at ``STRANGER``: the PID holding it. Its
    end of the cable goes with the namespace when the holder ends."""
    holder = subprocess.Popen(["unshare", "--net", "--", "sleep", "infinity"])
    try:
        mine = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + WAIT_S
        while os.readlink(f"/proc/{holder.pid}/ns/net") == mine:
            assert time.monotonic() < deadline, "the stranger's namespace did not start"
            time.sleep(0.02)
        subprocess.run(
            standins.in_underlay("ip", "-batch", "-"),
            input=f"link add tlst0 type veth peer name eth0 netns {holder.pid}\nlink set tlst0 master tlbr0 up\n",
            text=True,
            check=True,
        )
        subprocess.run(
            ["nsenter", f"--net=/proc/{holder.pid}/ns/net", "ip", "-batch", "-"],
            input=f"link set lo up\naddr add {STRANGER}/24 dev eth0\nlink set eth0 up\n",
            text=True,
            check=True,
        )
        yield holder.pid
    finally:
        holder.kill()
        holder.wait(5)


def _checksum(header: bytes) -> int:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _ipv4(src: str, dst: str, payload: bytes) -> bytes:
    """An IPv4 header (protocol UDP, checksum filled in) and ``payload``."""
    header = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0, 0x4000, 64, socket.IPPROTO_UDP, 0,
        socket.inet_aton(src), socket.inet_aton(dst),
    )  # fmt: skip
    return header[:10] + struct.pack("!H", _checksum(header)) + header[12:] + payload


def _udp(sport: int, dport: int, payload: bytes) -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload  # checksum 0: none (IPv4)


def _vxlan(vni: int, dst_mac: str, src_ip: str, dst_ip: str, payload: bytes) -> bytes:
    """A VXLAN payload (RFC 7348 header, VNI valid flag) carrying an Ethernet frame from
    ``STRANGER_MAC`` to ``dst_mac`` with a UDP datagram ``src_ip`` -> ``dst_ip``:``PROBE_PORT``."""
    ethernet = bytes.fromhex(dst_mac.replace(":", "")) + bytes.fromhex(STRANGER_MAC.replace(":", ""))
    ethernet += struct.pack("!H", 0x0800) + _ipv4(src_ip, dst_ip, _udp(40000, PROBE_PORT, payload))
    return struct.pack("!B3xI", 0x08, vni << 8) + ethernet


def _dropped(standins: StandIns, machine: int, run_id: str) -> int:
    assert standins.ssh is not None
    out = standins.ssh.run(
        standins.machines[machine], f"nft -j list counter inet {filter_table(run_id)} {DROP_COUNTER}\n", 5, "counter"
    )
    counters = [item["counter"] for item in json.loads(out)["nftables"] if "counter" in item]
    return int(counters[0]["packets"])


def _leftovers(standins: StandIns, machine: int) -> str:
    """What a run could leave in a stand-in's root namespace: nftables tables, VXLAN devices."""
    assert standins.ssh is not None
    return standins.ssh.run(standins.machines[machine], "nft list tables; ip -d link show type vxlan\n", 5, "probe")


def test_vxlan_frame_from_unlisted_address_reaches_no_host(standins: StandIns, stranger: int) -> None:
    before = [_leftovers(standins, i) for i in range(3)]
    assert all("topolab_" not in text and "vxlan" not in text for text in before)
    with ClusterNetwork(NET, PLACEMENT, standins.machines, standins.ssh) as net:
        # cable 0 joins h0 (m0) and h1 (m1): aim at h1's end of it, on m1, as if from m0
        k = 0
        target = next(p for p in net.ports[NET.links[k].b] if p.link == k)
        machine = PLACEMENT[target.node]
        peer_machine = PLACEMENT[target.peer]
        table = filter_table(net.run_id)
        # each machine admits exactly the two others
        for m in range(3):
            out = standins.ssh.run(standins.machines[m], f"nft -j list set inet {table} machines\n", 5, "set")
            elements = next(item["set"] for item in json.loads(out)["nftables"] if "set" in item)["elem"]
            assert sorted(elements) == sorted(a for i, a in enumerate(net.underlay) if i != m)
        host = net.hosts[target.node]
        detail = host.cmd(f"ip -d link show {target.ifname}")
        assert f"vxlan id {VNI_BASE + k}" in detail and "nolearning" in detail, detail
        # its only forwarding entry is the static default to the peer machine
        fdb = host.cmd(f"bridge fdb show dev {target.ifname}").split("\n")
        assert [line.split() for line in fdb if line.strip()] == [
            ["00:00:00:00:00:00", "dst", net.underlay[peer_machine], "link-netnsid", "0", "self", "permanent"]
        ]
        listener = net.popen(target.node, [sys.executable, "-c", LISTENER], stdout=subprocess.PIPE, text=True)
        try:
            assert listener.stdout is not None
            assert listener.stdout.readline().strip() == "ready"
            assert _dropped(standins, machine, net.run_id) == 0
            hostile = _vxlan(VNI_BASE + k, target.mac, target.peer_address, target.address, b"hostile")
            with in_netns_of(stranger):
                sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                spoofer = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
            with sender, spoofer:
                sender.bind((STRANGER, 0))
                for _ in range(HOSTILE_FRAMES):
                    sender.sendto(hostile, (net.underlay[machine], VXLAN_PORT))
                deadline = time.monotonic() + WAIT_S
                while _dropped(standins, machine, net.run_id) < HOSTILE_FRAMES:
                    assert time.monotonic() < deadline, "the filter never saw the stranger's frames"
                    time.sleep(0.05)
                # the same frame with a listed machine's address as its source passes: the
                # frames above were well formed, and only their source stopped them (a
                # spoofed source is what the filter cannot stop: docs/cluster.md section 7)
                control = _vxlan(VNI_BASE + k, target.mac, target.peer_address, target.address, b"control")
                datagram = _ipv4(net.underlay[peer_machine], net.underlay[machine], _udp(40001, VXLAN_PORT, control))
                spoofer.sendto(datagram, (net.underlay[machine], 0))
            out, _ = listener.communicate(timeout=WAIT_S)
        finally:
            listener.kill()
        # the host's socket saw the control frame only: the stranger's never reached it
        assert [line.strip() for line in out.splitlines() if line.strip()] == ["got control"]
        # nothing was learned from either frame
        assert STRANGER_MAC not in host.cmd(f"bridge fdb show dev {target.ifname}")
        # the listed machines' own traffic still flows, and not one of their datagrams was dropped
        for u in range(NET.nodes):
            targets = " ".join(net.host_address(v) for v in range(NET.nodes) if v != u)
            out = net.hosts[u].cmd(f"for t in {targets}; do ping -c1 -W2 -q $t >/dev/null && echo ok $t; done")
            assert out.count("ok ") == NET.nodes - 1, f"h{u}: {out}"
        assert [_dropped(standins, m, net.run_id) for m in range(3)] == [
            HOSTILE_FRAMES if m == machine else 0 for m in range(3)
        ]
    # no filter and no tunnel left on any machine
    assert [_leftovers(standins, i) for i in range(3)] == before
