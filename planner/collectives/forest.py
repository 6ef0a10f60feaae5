"""Forest AllReduce: an AllReduce split over spanning trees of a packing, and its schedule.

Topology-adaptive parameter synchronization [1]_: with cables of different rates the
fastest tree-based AllReduce splits the gradient of ``S`` bytes over the spanning trees of a
packing (planner.collectives.tree_packing) rooted at different servers; tree ``j`` reduces
its share towards its root and broadcasts it back, and gets

    S_j = S r_j / sum_i r_i      (r_j: the tree's packing rate)

of the buffer, so all trees finish together in about ``S / tau`` (``tau = sum_j r_j``).
`build_forest` packs shallow trees, keeps the fewest that reach ``(1 - MAX_TAU_LOSS) tau``
and roots each at its centre (the schedule's tail grows with the tree's height), spreading
the roots over the servers.

Trees span every node; switch nodes (``>= servers``) relay but never reduce, so they are
never roots and a server's tree parent is its nearest server ancestor, reached through the
switches of the plan's own route. (With switches the packing assumes in-network
aggregation the switches do not do, so ``S / tau`` is optimistic there.)

Schedule: per tree an ``up`` and a ``down`` stream (opposite cable directions, overlapped);
every tree is cut into the same number of segments, so trees advance in step on shared
cables, and a server sends a tree's segment ``k`` up only after its segment ``k - window``
came back down, which keeps the per-connection FIFO queues short and the trees interleaved
(eager sends without this credit queue whole shares and cost a third more time). A tree of
height ``h`` fills and drains its pipeline in about ``2 h`` segment times. docs/algorithms.md
section 10.

References
----------
.. [1] Z. Zhang, C. Wu, Z. Li, "Near-optimal topology-adaptive parameter synchronization in
   distributed DNN training", IEEE INFOCOM 2021.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx

from contract.emulation import EmulatedRates
from contract.network import cable_capacities
from contract.physics import DEFAULT_MTU
from contract.schedule import Check, Schedule, ScheduleBuilder, split_region

from .rings import weighted_split
from .tree_packing import Edge, TreePacking, normalize_capacities, select_trees, shallow_or_exact_packing

# Pipelining segment of the largest tree and the send credit, measured on TopoOpt-12 with
# 3 slow cables, 64 MiB (emulated 100 Mbit/s): 1 MiB / 4 ran 4.13 s, 384 KiB / 5 3.50 s,
# 256 KiB / 6 3.76 s (its 1393 ops per server cost more than the shorter tail saves; with
# the shallow trees 256 KiB, 2244 ops, again measured no faster than 384 KiB).
DEFAULT_SEGMENT_BYTES = 384 << 10
# Segments a server sends up before the first comes back down: with the 3-deep trees a
# window of 4 predicted 1-3% faster than 5 on 1..4 slow cables (a longer one queues more)
DEFAULT_WINDOW_SEGMENTS = 4
MAX_TREES_PER_SERVER = 2  # at most 2 n trees (op count per server grows with the trees)
ITEMSIZE = 4  # float32 gradients


@dataclass(frozen=True)
class ForestTree:
    """One tree of the forest: ``parent[v]`` of every node (-1 at the root), its rate and
    the buffer region ``[offset, offset + length)`` it AllReduces."""

    root: int
    parent: dict[int, int]
    rate: float
    offset: int
    length: int


def per_direction(capacities: Mapping[Edge, float]) -> dict[Edge, float]:
    """A network's directed capacities (`contract.network.cable_capacities`, an emulated
    network's ``capacities``) keyed as the packing takes them: each cable's rate per
    direction, keys ``(a, b)`` with ``a < b``."""
    return {(a, b): c for (a, b), c in capacities.items() if a < b}


def plan_capacities(plan: Any, link_bps: float | None = None, mtu: int = DEFAULT_MTU) -> dict[Edge, float]:
    """Cable goodput of ``plan`` in bytes/s per direction, parallel cables summed; with
    ``link_bps`` a cable of ``plan.link_gbps`` runs at ``link_bps`` (the emulated rate), as in
    `planner.cost.predict.plan_network`."""
    if link_bps is None:
        return per_direction(cable_capacities(plan.links, mtu))
    return per_direction(EmulatedRates(plan.link_gbps, link_bps / 1e6, mtu).capacities(plan.links))


def _choose_root(tree: nx.Graph, servers: int, root_bytes: dict[int, int]) -> int:
    """A root at the tree's centre (pipeline depth: the schedule's tail grows with the tree's
    height) with the least buffer already rooted at it, so roots spread over the servers."""
    ecc = nx.eccentricity(tree)
    candidates = [v for v in tree if v < servers]
    best = min(ecc[v] for v in candidates)
    return min((v for v in candidates if ecc[v] == best), key=lambda v: (root_bytes[v], ecc[v], v))


def build_forest(
    capacities: Mapping[Edge, float], servers: int, nbytes: int, max_trees: int | None = None
) -> tuple[list[ForestTree], TreePacking]:
    """Pack shallow trees where they reach the exact tau (`shallow_or_exact_packing`, to a
    proved `PACKING_GAP`), keep the fewest that reach `MAX_TAU_LOSS` (`select_trees`, at
    most ``max_trees``, default ``2 servers``), root them at their centres and give each a
    share of the ``nbytes`` buffer in proportion to its rate (float32-aligned)."""
    if nbytes <= 0 or nbytes % ITEMSIZE:
        raise ValueError(f"nbytes must be a positive multiple of {ITEMSIZE}, got {nbytes}")
    packing = select_trees(
        shallow_or_exact_packing(capacities, servers), capacities, max_trees or MAX_TREES_PER_SERVER * servers
    )
    order = sorted(range(len(packing.trees)), key=lambda j: -packing.rates[j])
    shares = weighted_split(0, nbytes, [packing.rates[j] for j in order], ITEMSIZE)
    root_bytes = dict.fromkeys(range(servers), 0)
    forest = []
    for j, (offset, length) in zip(order, shares):
        if not length:
            continue
        tree = nx.Graph(packing.trees[j])
        root = _choose_root(tree, servers, root_bytes)
        root_bytes[root] += length
        parent = {root: -1} | {child: up for up, child in nx.bfs_edges(tree, root)}
        forest.append(ForestTree(root, parent, packing.rates[j], offset, length))
    return forest, packing


def server_parents(tree: ForestTree, servers: int, path: Any = None) -> dict[int, int]:
    """Each server's parent among the servers: the nearest server ancestor (switches relay).

    With ``path`` (a plan's ``path(src, dst)``), the route between a server and its parent
    must be exactly the tree path (a direct cable, or only switches in between)."""
    parents = {}
    for v in tree.parent:
        if v >= servers:
            continue
        chain, up = [v], tree.parent[v]
        while up >= servers:
            chain.append(up)
            up = tree.parent[up]
        parents[v] = up
        if up >= 0 and path is not None:
            route = list(path(v, up))
            if route != chain + [up]:
                raise ValueError(f"tree edge {v}->{up} is not routed along the tree ({route} != {chain + [up]})")
    return parents


def add_forest_allreduce(
    b: ScheduleBuilder,
    forest: list[ForestTree],
    servers: int,
    buffer: str,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    window: int = DEFAULT_WINDOW_SEGMENTS,
    path: Any = None,
    stream_prefix: str = "t",
    offset: int = 0,
    after: Mapping[int, Sequence[int]] | None = None,
) -> dict[int, list[int]]:
    """Append every tree's pipelined reduce (stream ``{stream_prefix}{i}up``) and broadcast
    (``...down``) of its region moved by ``offset``; a server's first op of every tree waits
    for ``after[server]``. Returns each server's last op of every tree."""
    if segment_bytes < ITEMSIZE or window < 1:
        raise ValueError(f"segment_bytes ({segment_bytes}) and window ({window}) must be positive")
    nseg = max(1, -(-max(t.length for t in forest) // segment_bytes))
    after = after or {}
    last: dict[int, list[int]] = {}
    for i, tree in enumerate(forest):
        parents = server_parents(tree, servers, path)
        children: dict[int, list[int]] = {v: [] for v in parents}
        for v, p in parents.items():
            if p >= 0:
                children[p].append(v)
        segments = [s for s in split_region(offset + tree.offset, tree.length, nseg, ITEMSIZE) if s[1]]
        up_tag, down_tag = b.new_tag(), b.new_tag()
        up, down = f"{stream_prefix}{i}up", f"{stream_prefix}{i}down"
        for v, p in parents.items():
            came_down: list[int] = []  # this server's down-recv op of each segment
            first = list(after.get(v, ()))
            ends: list[int] = []
            for k, (so, sl) in enumerate(segments):
                reduced = None
                for child in children[v]:
                    reduced = b.recv(v, up, child, buffer, so, sl, up_tag, "reduce", after=first)
                    first = []
                if p >= 0:
                    credit = [came_down[k - window]] if k >= window else []
                    sent = b.send(v, up, p, buffer, so, sl, up_tag, after=credit + first)
                    first = []
                    came_down.append(b.recv(v, down, p, buffer, so, sl, down_tag, "copy", after=[sent]))
                    ends = [came_down[-1]]
                    deps = []
                else:
                    deps = [reduced] if reduced is not None else []
                for child in children[v]:
                    ends = [b.send(v, down, child, buffer, so, sl, down_tag, after=deps)]
                    deps = []
            last.setdefault(v, []).extend(ends)
    return last


def forest_allreduce(
    plan_or_capacities: Any,
    nbytes: int,
    *,
    servers: int | None = None,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    window: int = DEFAULT_WINDOW_SEGMENTS,
    max_trees: int | None = None,
    link_bps: float | None = None,
    mtu: int = DEFAULT_MTU,
) -> Schedule:
    """Forest AllReduce of ``nbytes`` float32 over all servers of a `Plan` (cable goodput
    from its links) or of ``capacities[(a, b)]`` (nodes ``>= servers`` are switches;
    default: every node is a server)."""
    if hasattr(plan_or_capacities, "links"):
        plan = plan_or_capacities
        capacities, n, path = plan_capacities(plan, link_bps, mtu), int(plan.servers), plan.path
    else:
        capacities = normalize_capacities(plan_or_capacities)
        n = servers if servers is not None else 1 + max(max(e) for e in capacities)
        path = None
    forest, packing = build_forest(capacities, n, nbytes, max_trees)
    return forest_schedule(forest, packing, n, nbytes, segment_bytes=segment_bytes, window=window, path=path)


def forest_schedule(
    forest: list[ForestTree],
    packing: TreePacking,
    servers: int,
    nbytes: int,
    *,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    window: int = DEFAULT_WINDOW_SEGMENTS,
    path: Any = None,
) -> Schedule:
    """The schedule of a forest built by `build_forest` (``path``: the plan's routes)."""
    b = ScheduleBuilder(servers, "forest")
    b.buffer("grad", nbytes)
    add_forest_allreduce(b, forest, servers, "grad", segment_bytes, window, path)
    b.check(Check("allreduce", "grad", 0, nbytes, groups=[list(range(servers))]))
    b.params.update(
        nbytes=nbytes,
        shape="trees",
        segment_bytes=segment_bytes,
        window=window,
        tau=packing.tau,
        trees=[
            {"root": t.root, "rate": t.rate, "offset": t.offset, "length": t.length, "parent": sorted(t.parent.items())}
            for t in forest
        ],
    )
    return b.build()
