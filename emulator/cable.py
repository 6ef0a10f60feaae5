"""Cables: one veth pair per `Link`, created directly inside the two hosts' namespaces.

A cable never exists in the root namespace, not even for a moment: the netlink request that
creates the pair names both ends' namespaces (``net_ns_pid`` of each host's shell), so a
crash at any point leaves nothing outside our namespaces. Both ends get the cable MTU
(`contract.physics.DEFAULT_MTU` by default: RDMA clusters run jumbo frames) and the Ethernet
address made from its IP address (`Port.mac`, `addressing.cable_mac`), so the hosts'
permanent neighbour entries (`emulator.hostconfig`) name it without ARP. All cables go to
the kernel in one batch.

Each cable end is shaped on egress (`cable_shaping`): one HTB class at the cable's emulated
rate, ``link.gbps / reference_gbps * link_mbps`` (time dilation, ``docs/emulation.md``;
`contract.emulation.EmulatedRates.rate_bps`), and
netem with the dilated per-hop latency where the kernel has netem (`emulator.shaping`),
and under it the destination classes of a bandwidth allocation (`emulator.planes`).
"""

from __future__ import annotations

from collections.abc import Sequence

from contract.plan import Link

from . import nlbatch, shaping
from .addressing import Port, identity
from .host import EmulatedHost


def make_cables(
    links: Sequence[Link],
    ports: list[list[Port]],
    hosts: list[EmulatedHost],
    mtu: int,
    timeout_s: float = nlbatch.NETLINK_TIMEOUT_S,
) -> None:
    """Create every cable in one netlink batch (bounded by ``timeout_s``)."""
    from pyroute2 import IPBatch

    batch, what = IPBatch(), []
    for k, link in enumerate(links):
        a = next(p for p in ports[link.a] if p.link == k)
        b = next(p for p in ports[link.b] if p.link == k)
        batch.link(
            "add",
            ifname=a.ifname,
            kind="veth",
            mtu=mtu,
            address=a.mac,
            net_ns_pid=hosts[link.a].pid,
            peer={"ifname": b.ifname, "mtu": mtu, "address": b.mac, "net_ns_pid": hosts[link.b].pid},
        )
        what.append(f"veth {a.ifname} -- {b.ifname} (plan.links[{k}])")
    nlbatch.send(batch.batch, what, timeout_s=timeout_s)


def cable_shaping(
    ports: list[Port],
    rate_bps: list[int],
    delay_us: float,
    destination_bps: dict[str, dict[int, int]] | None = None,
) -> list[shaping.Shaping]:
    """What each of one host's cable ends must carry (``delay_us`` 0: no netem), with a class
    per destination where ``destination_bps[ifname]`` (``{node: bit/s}``) plans one."""
    planned = destination_bps or {}
    return [
        shaping.Shaping(
            p.ifname,
            rate_bps[p.link],
            delay_us,
            tuple(shaping.DestinationClass(d, identity(d), rate) for d, rate in planned.get(p.ifname, {}).items()),
        )
        for p in ports
    ]
