"""Planes: a network's per-destination multipath allocation as policy routing and HTB classes.

The allocation (`contract.network.Network.allocation`, docs/algorithms.md section 4) splits
the traffic of some ordered server pairs ``(s, d)`` over several paths with a planned rate
each. Plane 0 is the destination-based route every host already has; plane ``p >= 1`` of
``(s, d)`` is ``allocation_of(s, d).paths[p - 1]``. Linux source-based policy routing carries
each plane on its own path, the way the thesis' prototype used Open vSwitch flow rules
(``docs/emulation.md`` section 6):

- source ``s`` owns one address per plane it sends on, `addressing.plane_address` ``(s, p)``,
  a /32 on its loopback; a sender binds to it to put its bytes on plane ``p``;
- every node ``w`` on the path of ``(s, d, p)`` installs, in the routing table
  `table_of` ``(s, p)`` (one table per source and plane), a route to ``identity(d)`` via the
  path's next hop, and the rule ``from plane_address(s, p) lookup table_of(s, p)`` at
  `RULE_PRIORITY`. A destination with no route in that table falls through to the main table
  (plane 0), and so does a plane whose cable is down (the kernel drops the route);
- every node routes each sourcing node's /28 of plane addresses like its identity (main
  table), so replies and ICMP errors reach the sender;
- on every cable end a plane crosses, an HTB class per destination guarantees the planned
  rate of all planes towards that destination through that cable, dilated like the cable
  (`destination_rates`); parallel cables share a plane's rate evenly, as their multipath
  route shares its flows.

Everything here is pure (no root); `emulator.hostconfig` installs it, `emulator.shaping`
shapes it, `emulator.checks.check_plane_paths` traces it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from contract.network import Network

from .addressing import MAX_LINKS_WITH_PLANES, MAX_PLANE_NODES, MAX_PLANES, PLANE_BLOCK, Port, plane_address
from .errors import EmulationInputError

TABLE_BASE = 1000
"""Table of source ``s``, plane ``p``: ``TABLE_BASE + s * PLANE_BLOCK + p`` (1001..33767 with
2048 nodes): above the kernel's reserved 252..255 and below 2**31."""
RULE_PRIORITY = 100
"""Priority of every plane rule: after ``local`` (0), before ``main`` (32766). Rules of one
host never overlap (one source address each), so they share one priority."""
MIN_CLASS_RATE_BPS = 8
"""The least rate of a destination class: HTB counts in bytes per second, and tc refuses 0.
A class at this rate "only borrows", except that HTB forgives a class's debt beyond one minute
(``mbuffer``): once a minute such a class may send a packet without the cable's class
(docs/emulation.md section 3, NCF on 128 servers)."""
CAPACITY_SLACK = 1e-6
"""Relative rounding an allocation may exceed a cable's rate by (the LP's own tolerance)."""


def table_of(src: int, plane: int) -> int:
    """Routing table of ``src``'s traffic on ``plane`` (1..`MAX_PLANES`)."""
    return TABLE_BASE + src * PLANE_BLOCK + plane


@dataclass(frozen=True)
class PlaneHop:
    """One node's route of one plane: in ``table``, to node ``dst`` via neighbour ``next_hop``."""

    src: int
    plane: int
    dst: int
    next_hop: int

    @property
    def table(self) -> int:
        return table_of(self.src, self.plane)


@dataclass(frozen=True)
class NodePlanes:
    """What one node installs: its own plane addresses, its plane routes and rules, and the
    nodes whose plane addresses it routes in the main table."""

    planes: tuple[int, ...] = ()
    hops: tuple[PlaneHop, ...] = ()
    rules: tuple[tuple[str, int], ...] = ()  # (from address, table)
    sources: tuple[int, ...] = ()


def node_planes(network: Network) -> list[NodePlanes]:
    """Per node, what policy routing it needs (`NodePlanes`; empty without an allocation)."""
    nodes = network.nodes
    planes: list[set[int]] = [set() for _ in range(nodes)]
    hops: list[list[PlaneHop]] = [[] for _ in range(nodes)]
    tables: list[set[tuple[int, int]]] = [set() for _ in range(nodes)]
    for pair in network.allocation:
        planes[pair.src].update(range(1, len(pair.paths) + 1))
        for p, share in enumerate(pair.paths, start=1):
            for w, nxt in zip(share.path, share.path[1:]):
                hops[w].append(PlaneHop(pair.src, p, pair.dst, nxt))
                tables[w].add((pair.src, p))
    sources = sorted({pair.src for pair in network.allocation})
    return [
        NodePlanes(
            planes=tuple(sorted(planes[u])),
            hops=tuple(hops[u]),
            rules=tuple((plane_address(s, p), table_of(s, p)) for s, p in sorted(tables[u])),
            sources=tuple(s for s in sources if s != u),
        )
        for u in range(nodes)
    ]


def destination_rates(
    network: Network, ports: Sequence[Sequence[Port]], scale: float
) -> dict[tuple[int, str], dict[int, int]]:
    """``{(node, ifname): {destination: rate_bps}}``: the planned rate towards each destination
    of every plane leaving ``node`` through that cable end, ``gbps * scale`` bit/s (``scale``:
    the cable dilation, emulated bit/s per planned Gbit/s), summed over planes and sources."""
    out: dict[tuple[int, str], dict[int, float]] = {}
    for pair in network.allocation:
        for share in pair.paths:
            for w, nxt in zip(share.path, share.path[1:]):
                cables = [p for p in ports[w] if p.peer == nxt]
                for port in cables:
                    rates = out.setdefault((w, port.ifname), {})
                    rates[pair.dst] = rates.get(pair.dst, 0.0) + share.gbps * scale / len(cables)
    return {key: {d: max(MIN_CLASS_RATE_BPS, round(r)) for d, r in sorted(rates.items())} for key, rates in out.items()}


def validate_allocation(network: Network) -> None:
    """Raise `EmulationInputError` naming the field of the first allocation entry that cannot
    be emulated: a path that does not join its pair, leaves the cables or repeats a node, a
    rate that is not positive, more planes or nodes than the address plan holds, or a cable
    whose planned traffic exceeds its rate."""
    if not network.allocation:
        return
    nodes = network.nodes
    if nodes > MAX_PLANE_NODES:
        raise EmulationInputError(
            f"plan has {nodes} nodes and an allocation: plane addresses exist for at most {MAX_PLANE_NODES} nodes"
        )
    if len(network.links) > MAX_LINKS_WITH_PLANES:
        raise EmulationInputError(
            f"plan has {len(network.links)} links and an allocation: at most {MAX_LINKS_WITH_PLANES} fit beside the planes"
        )
    capacity: dict[tuple[int, int], float] = {}
    for link in network.links:
        for a, b in ((link.a, link.b), (link.b, link.a)):
            capacity[a, b] = capacity.get((a, b), 0.0) + link.gbps
    load: dict[tuple[int, int], float] = {}
    seen: set[tuple[int, int]] = set()
    for i, pair in enumerate(network.allocation):
        field = f"plan.network.allocation[{i}]"
        if not (0 <= pair.src < nodes and 0 <= pair.dst < nodes) or pair.src == pair.dst:
            raise EmulationInputError(
                f"{field}: pair ({pair.src}, {pair.dst}) is not two distinct nodes of 0..{nodes - 1}"
            )
        if (pair.src, pair.dst) in seen:
            raise EmulationInputError(f"{field}: pair ({pair.src}, {pair.dst}) allocated twice")
        seen.add((pair.src, pair.dst))
        if not 1 <= len(pair.paths) <= MAX_PLANES:
            raise EmulationInputError(f"{field}.paths: {len(pair.paths)} paths, the emulator holds 1..{MAX_PLANES}")
        for p, share in enumerate(pair.paths):
            where = f"{field}.paths[{p}]"
            path = tuple(share.path)
            if len(path) < 2 or path[0] != pair.src or path[-1] != pair.dst:
                raise EmulationInputError(f"{where}.path = {path}: must run from {pair.src} to {pair.dst}")
            if len(set(path)) != len(path):
                raise EmulationInputError(f"{where}.path = {path}: visits a node twice")
            if not (share.gbps > 0 and math.isfinite(share.gbps)):
                raise EmulationInputError(f"{where}.gbps = {share.gbps!r}: must be a positive rate")
            for a, b in zip(path, path[1:]):
                if (a, b) not in capacity:
                    raise EmulationInputError(f"{where}.path = {path}: no cable joins {a} and {b}")
                load[a, b] = load.get((a, b), 0.0) + share.gbps
    for (a, b), gbps in sorted(load.items()):
        if gbps > capacity[a, b] * (1 + CAPACITY_SLACK):
            raise EmulationInputError(
                f"plan.network.allocation: {gbps:g} Gbit/s planned from {a} to {b}, "
                f"but the cables there carry {capacity[a, b]:g} Gbit/s"
            )
