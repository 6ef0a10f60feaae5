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
and under it one class per destination: the planned rate of a bandwidth allocation
(`emulator.planes`), and for every other destination routed through the cable end an equal
share of what is left (`routed_destinations`, ``EmulationConfig.fair_queues``), so each
destination's traffic goes at its share at least instead of waiting in one FIFO queue for all.
With ``EmulationConfig.packets = "frames"`` the cables' TCP packets are one MTU
(``gso_max_size``, set as the pair is created) and the shares are per connection
(`routed_connections`, a class each): a cable end then interleaves connections frame by
frame, as a wire does and as the predictor's max-min sharing of connections assumes
(docs/emulation.md section 3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from contract.emulation import FRAMES_MAX_CLASSES, EmulationConfig
from contract.plan import Link

from . import nlbatch, shaping
from .addressing import Port, identity
from .host import EmulatedHost
from .planes import MIN_CLASS_RATE_BPS


def make_cables(
    links: Sequence[Link],
    ports: list[list[Port]],
    hosts: list[EmulatedHost],
    mtu: int,
    timeout_s: float = nlbatch.NETLINK_TIMEOUT_S,
    gso_max_size: int | None = None,
) -> None:
    """Create every cable in one netlink batch (bounded by ``timeout_s``); ``gso_max_size``:
    the largest packet TCP hands either end (None: the kernel's 64 KiB)."""
    from pyroute2 import IPBatch

    batch, what = IPBatch(), []
    gso = {} if gso_max_size is None else {"gso_max_size": gso_max_size}
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
            peer={"ifname": b.ifname, "mtu": mtu, "address": b.mac, "net_ns_pid": hosts[link.b].pid, **gso},
            **gso,
        )
        what.append(f"veth {a.ifname} -- {b.ifname} (plan.links[{k}])")
    nlbatch.send(batch.batch, what, timeout_s=timeout_s)


def routed_destinations(
    next_hop: np.ndarray, ports: Sequence[Sequence[Port]], servers: int
) -> dict[tuple[int, str], tuple[int, ...]]:
    """``{(node, ifname): servers}``: the servers each cable end carries traffic towards, by
    the network's routes (``next_hop[u][d]``, the neighbour ``u`` forwards to on the way to
    ``d``); parallel cables to one neighbour each carry all of its destinations, as their
    multipath route spreads the connections."""
    out: dict[tuple[int, str], tuple[int, ...]] = {}
    for u, node_ports in enumerate(ports):
        for p in node_ports:
            routed = tuple(int(d) for d in np.flatnonzero(next_hop[u, :servers] == p.peer) if d != u)
            if routed:
                out[u, p.ifname] = routed
    return out


def routed_connections(
    next_hop: np.ndarray, ports: Sequence[Sequence[Port]], servers: int
) -> dict[tuple[int, str], tuple[tuple[int, int], ...]]:
    """``{(node, ifname): ((src, dst), ...)}``: the connections between servers each cable end
    carries, by the network's routes (``next_hop[u][d]``), in order of (src, dst); parallel
    cables to one neighbour each carry all of them, as `routed_destinations`."""
    towards: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for src in range(servers):
        for dst in range(servers):
            u = src
            while u != dst:
                v = int(next_hop[u, dst])
                towards.setdefault((u, v), []).append((src, dst))
                u = v
    out: dict[tuple[int, str], tuple[tuple[int, int], ...]] = {}
    for u, node_ports in enumerate(ports):
        for p in node_ports:
            carried = towards.get((u, p.peer))
            if carried:
                out[u, p.ifname] = tuple(carried)
    return out


@dataclass(frozen=True)
class SharedClasses:
    """How a network's cable ends share their rate among what they carry (`shared_classes`):
    ``destinations`` (``{(node, ifname): servers}``) or ``connections`` (``{(node, ifname):
    ((src, dst), ...)}``) each get a class; with ``borrow`` the classes only borrow."""

    destinations: dict[tuple[int, str], tuple[int, ...]]
    connections: dict[tuple[int, str], tuple[tuple[int, int], ...]]
    borrow: bool

    def of(self, u: int) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[tuple[int, int], ...]]]:
        """Node ``u``'s: ``({ifname: servers}, {ifname: connections})``."""
        return (
            {ifname: d for (w, ifname), d in self.destinations.items() if w == u},
            {ifname: c for (w, ifname), c in self.connections.items() if w == u},
        )


def shared_classes(
    next_hop: np.ndarray,
    ports: Sequence[Sequence[Port]],
    servers: int,
    config: EmulationConfig,
    max_classes: int = FRAMES_MAX_CLASSES,
) -> SharedClasses:
    """The classes every cable end shares its rate among (``config.fair_queues``; none
    without): offload packets, a class per destination at an equal share; frames
    (``config.packets = "frames"``), a class per connection that only borrows, or, where that
    would make more than ``max_classes`` over all cable ends (`FRAMES_MAX_CLASSES`), a class
    per destination that only borrows."""
    if not config.fair_queues:
        return SharedClasses({}, {}, False)
    if config.frames:
        connections = routed_connections(next_hop, ports, servers)
        if sum(len(pairs) for pairs in connections.values()) <= max_classes:
            return SharedClasses({}, connections, True)
        return SharedClasses(routed_destinations(next_hop, ports, servers), {}, True)
    return SharedClasses(routed_destinations(next_hop, ports, servers), {}, False)


def cable_shaping(
    ports: list[Port],
    rate_bps: list[int],
    delay_us: float,
    destination_bps: Mapping[str, Mapping[int, int]] | None = None,
    shared_by: Mapping[str, Sequence[int]] | None = None,
    connections_by: Mapping[str, Sequence[tuple[int, int]]] | None = None,
    borrow: bool = False,
    frame_bytes: int = 0,
) -> list[shaping.Shaping]:
    """What each of one host's cable ends must carry (``delay_us`` 0: no netem), with a class
    per destination where ``destination_bps[ifname]`` (``{node: bit/s}``) plans one, one per
    other destination of ``shared_by[ifname]`` at an equal share of the rate the planned
    classes and the default class's floor (`shaping.DEFAULT_SHARE_FLOOR`) leave (with
    ``borrow``: that only borrows, rate `MIN_CLASS_RATE_BPS` and ceil the cable), and one per
    connection ``(src, dst)`` of ``connections_by[ifname]`` to another destination that only
    borrows.

    A class that sends at its own rate sends a packet as soon as its bucket is not empty and
    charges it after, so a cable end whose k classes wake together sends k packets at once,
    beyond its cable's rate; classes that only borrow wait for the cable's class, which sends
    one packet ahead at most, and take turns a packet each (HTB's round robin, quantum one
    frame: with frames, ``frame_bytes`` the largest, `shaping.Shaping.child_quantum`), but for
    one packet a minute each (`planes.MIN_CLASS_RATE_BPS`). With frames that is the wire's
    sharing: NCF on 32 servers (degree 8) 19.9% off with equal-share connection classes, 8.4%
    with borrowing ones (docs/emulation.md section 3)."""
    planned_of = destination_bps or {}
    shared_of = shared_by or {}
    connections_of = connections_by or {}
    out = []
    for p in ports:
        rate = rate_bps[p.link]
        planned = planned_of.get(p.ifname, {})
        rates = dict(planned)
        shared = [d for d in shared_of.get(p.ifname, ()) if d not in planned]
        connections = [(a, d) for a, d in connections_of.get(p.ifname, ()) if d not in planned]
        if shared:
            left = rate - sum(planned.values()) - round(rate * shaping.DEFAULT_SHARE_FLOOR)
            share = MIN_CLASS_RATE_BPS if borrow else max(MIN_CLASS_RATE_BPS, left // len(shared))
            rates.update((d, share) for d in shared)
        classes = tuple(shaping.DestinationClass(d, identity(d), r) for d, r in sorted(rates.items()))
        classes += tuple(  # borrow only: see the docstring
            shaping.DestinationClass(d, identity(d), MIN_CLASS_RATE_BPS, source=identity(a), slot=i)
            for i, (a, d) in enumerate(connections)
        )
        out.append(shaping.Shaping(p.ifname, rate, delay_us, classes, frame_bytes))
    return out
