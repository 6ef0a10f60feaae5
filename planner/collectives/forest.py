"""Forest AllReduce: spanning-tree packing on heterogeneous links.

Topology-adaptive parameter synchronization (INFOCOM 2021; docs/algorithms.md section 10):
with cables of different rates, the fastest tree-based AllReduce splits the gradient over
several spanning trees rooted at different servers; tree ``j`` reduces its share towards its
root and broadcasts it back, and gets the share ``S * r_j / sum(r)`` of the buffer so that
all trees finish together.

Packing (fractional spanning-tree packing of the capacitated cable multigraph):

    tau = max sum_T x_T   s.t.  sum_{T contains e} x_T <= c_e  for every cable pair e,  x >= 0

solved by column generation: the master LP over the trees found so far
(``scipy.optimize.linprog``, HiGHS) gives edge duals ``y_e``; the minimum spanning tree on
``y`` prices a new column; stop when its weight is ``>= 1 - eps`` (no tree has positive
reduced cost). By Nash-Williams and Tutte, ``tau = min_P c(edges crossing P) / (|P| - 1)``
over partitions ``P`` of the nodes. Cables are full duplex: a tree carries its share once
per direction of each of its edges (reduce towards the root, broadcast away from it), so the
capacity per direction is the cable rate and the AllReduce takes ``S / tau`` at best.
One algorithm, one module (over 300 lines): the packing, the forest built from it and the
schedule that runs it share the tree representation.

Trees span every node; switch nodes (``>= servers``) relay but never reduce, so they are
never roots and a server's tree parent is its nearest server ancestor, reached through the
switches of the plan's own route. (With switches the packing assumes in-network
aggregation the switches do not do, so ``S / tau`` is optimistic there.)

Shallow trees (`shallow_tree_packing`): a tree of height ``h`` fills and drains its
pipeline in about ``2 h`` segment times and the trees fill and drain together, so among the
many optimal packings the forest takes one of shallow trees: the same column generation over
trees grown from a server root with every node at most ``slack`` hops deeper than its BFS
distance (smallest slack within `PACKING_GAP` of the exact tau, else the exact packing). On
TopoOpt-12 with 3 slow cables every tree is 3 deep instead of 4-5 at the same tau.

Few trees (`select_trees`): the exact packing has about |E| trees, and every tree costs the
workers four ops per segment per server, which on the emulator costs more than the rate it
adds. The forest keeps the fewest of the fastest trees whose re-solved LP reaches
``1 - MAX_TAU_LOSS`` of tau, none under 1% of it (TopoOpt-12, 3 slow cables: 19 of 24).

Schedule: per tree an ``up`` and a ``down`` stream (opposite cable directions, overlapped);
every tree is cut into the same number of segments, so trees advance in step on shared
cables, and a server sends a tree's segment ``k`` up only after its segment ``k - window``
came back down, which keeps the per-connection FIFO queues short and the trees interleaved
(eager sends without this credit queue whole shares and cost a third more time).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from contract.emulation import EmulatedRates
from contract.network import cable_capacities
from contract.physics import DEFAULT_MTU
from contract.schedule import Check, Schedule, ScheduleBuilder, split_region

from .rings import weighted_split

Edge = tuple[int, int]
PRICING_EPS = 1e-9  # MST weight >= 1 - eps ends column generation (LP tolerance scale)
MAX_ITERATIONS = 30  # master LPs; small graphs converge in fewer, 128 servers gain <1% more
WARM_START_ROUNDS = 200  # multiplicative-weights trees seeding column generation
WARM_START_STEEPNESS = 8.0  # exp(8 x load share): a cable at its capacity costs e^8 more
# Pipelining segment of the largest tree and the send credit, measured on TopoOpt-12 with
# 3 slow cables, 64 MiB (emulated 100 Mbit/s): 1 MiB / 4 ran 4.13 s, 384 KiB / 5 3.50 s,
# 256 KiB / 6 3.76 s (its 1393 ops per server cost more than the shorter tail saves; with
# the shallow trees 256 KiB, 2244 ops, again measured no faster than 384 KiB).
DEFAULT_SEGMENT_BYTES = 384 << 10
# Segments a server sends up before the first comes back down: with the 3-deep trees a
# window of 4 predicted 1-3% faster than 5 on 1..4 slow cables (a longer one queues more)
DEFAULT_WINDOW_SEGMENTS = 4
# Shallow trees tried: depth <= the root's BFS depth + 0, 1. Slack 2 trees are no shallower
# than the exact packing's on TopoOpt-12 (mean height ~4.1 either way)
MAX_DEPTH_SLACK = 1
# TopoOpt-12 converges in <= 6 master LPs; where shallow trees cannot reach tau (128
# servers of diameter 16 stay under 80% of it) more rounds only delay the exact fallback
SHALLOW_MAX_ITERATIONS = 10
PRICING_ROOTS = 16  # shallow pricing: trees from 16 roots per master LP (128 servers: 8 rounds)
MAX_TREES_PER_SERVER = 2  # at most 2 n trees (op count per server grows with the trees)
MIN_TREE_SHARE = 0.01  # a tree under 1% of tau costs its ops for almost no bandwidth
# The trees kept may give up 0.5% of tau. Predicted on TopoOpt-12 with 3 slow cables
# (64 MiB, 384 KiB segments, window 4): 0.5% kept 19 trees, 1811 ops per server, 1.074x
# S / tau; 2% 14 trees, 1489 ops, 1.089x; measured under load both ran ~3.0 s (1.10x)
MAX_TAU_LOSS = 0.005
PACKING_GAP = 0.01  # the forest's packing stops within 1% of optimal (proved by tau_upper)
ITEMSIZE = 4  # float32 gradients


@dataclass(frozen=True)
class TreePacking:
    """Spanning trees (edge lists, ``a < b``) with rates; ``tau`` = sum of rates."""

    trees: tuple[tuple[Edge, ...], ...]
    rates: tuple[float, ...]
    tau: float
    iterations: int
    tau_upper: float  # no packing exceeds this (equals tau when solved to optimality)


@dataclass(frozen=True)
class ForestTree:
    """One tree of the forest: ``parent[v]`` of every node (-1 at the root), its rate and
    the buffer region ``[offset, offset + length)`` it AllReduces."""

    root: int
    parent: dict[int, int]
    rate: float
    offset: int
    length: int


@dataclass(frozen=True)
class Bounds:
    """Lower bounds on AllReduce time (seconds, capacities in bytes/s of goodput)."""

    # 2 (n-1) S / (n min_v D_v), D_v = server v's total cable goodput: binding for schemes in
    # which every server sends 2 (n-1) S / n (rings); a forest sends less through its leaves,
    # so only the total, 2 (n-1) S / sum_v D_v, binds it
    egress_s: float
    packing_s: float  # S / tau


def _normalize(capacities: Mapping[Edge, float]) -> dict[Edge, float]:
    """Undirected capacities, parallel cables summed, keys ``(a, b)`` with ``a < b``."""
    caps: dict[Edge, float] = {}
    for (a, b), c in capacities.items():
        if a == b or c <= 0:
            continue
        key = (min(a, b), max(a, b))
        caps[key] = caps.get(key, 0.0) + float(c)
    return caps


def per_direction(capacities: Mapping[Edge, float]) -> dict[Edge, float]:
    """A network's directed capacities (`contract.network.cable_capacities`, an emulated
    network's ``capacities``) keyed as the packing takes them: each cable's rate per
    direction, keys ``(a, b)`` with ``a < b``."""
    return {(a, b): c for (a, b), c in capacities.items() if a < b}


def plan_capacities(plan: Any, link_bps: float | None = None, mtu: int = DEFAULT_MTU) -> dict[Edge, float]:
    """Cable goodput of ``plan`` in bytes/s per direction, parallel cables summed; with
    ``link_bps`` a cable of ``plan.link_gbps`` runs at ``link_bps`` (the emulated rate), as in
    `planner.predict.plan_network`."""
    if link_bps is None:
        return per_direction(cable_capacities(plan.links, mtu))
    return per_direction(EmulatedRates(plan.link_gbps, link_bps / 1e6, mtu).capacities(plan.links))


def _incidence(trees: list[tuple[int, ...]], edges: int) -> sparse.csc_matrix:
    """Edge-by-tree 0/1 matrix of the master LP (sparse: a tree has |V| - 1 of |E| edges)."""
    cols = np.repeat(np.arange(len(trees)), [len(t) for t in trees])
    rows = np.fromiter((e for t in trees for e in t), dtype=np.int64, count=len(cols))
    return sparse.csc_matrix((np.ones(len(cols)), (rows, cols)), shape=(edges, len(trees)))


def _master_lp(trees: list[tuple[int, ...]], cap: np.ndarray, what: str) -> Any:
    """The master LP over ``trees``: max sum x_T s.t. the trees on each cable <= its
    capacity; its ``ineqlin.marginals`` are minus the cables' duals."""
    res = linprog(-np.ones(len(trees)), A_ub=_incidence(trees, len(cap)), b_ub=cap, method="highs")
    if res.status != 0:
        raise RuntimeError(f"{what} master LP failed: {res.message}")
    return res


def _kept_trees(
    res: Any, trees: list[tuple[int, ...]], edges: list[Edge], scale: float, eps: float
) -> tuple[tuple[tuple[Edge, ...], ...], tuple[float, ...]]:
    """The master LP's trees with a positive rate, as edge tuples, and their rates."""
    keep = [j for j, x in enumerate(res.x) if x > eps]
    return tuple(tuple(edges[i] for i in trees[j]) for j in keep), tuple(float(res.x[j]) * scale for j in keep)


def spanning_tree_packing(
    capacities: Mapping[Edge, float],
    eps: float = PRICING_EPS,
    max_iterations: int = MAX_ITERATIONS,
    gap: float = 0.0,
) -> TreePacking:
    """Maximum fractional packing of spanning trees of the cabled graph (column generation).

    ``capacities[(a, b)]`` is the rate of the cable(s) between nodes a and b (any unit; the
    rates come back in it). Every node of the graph must be connected. The first columns
    come from multiplicative weights (MSTs on ``exp(load / capacity)``); after
    ``max_iterations`` master LPs, or once ``tau >= (1 - gap) tau_upper``, column generation
    stops; ``tau_upper`` (the smaller of the Lagrangian bound ``tau / MST(y)`` of the duals
    ``y`` and ``c(E) / (|V| - 1)``, the partition into single nodes) says how far from
    optimal the packing can be (``gap = 0``: solved to optimality)."""
    caps = _normalize(capacities)
    graph = nx.Graph()
    graph.add_edges_from(caps)
    if graph.number_of_nodes() < 2 or not nx.is_connected(graph):
        raise ValueError("the cabled graph must have at least 2 nodes and be connected")
    edges = list(caps)
    index = {e: i for i, e in enumerate(edges)}
    scale = max(caps.values())
    cap = np.array([caps[e] / scale for e in edges])

    def tree_of(weights: np.ndarray) -> tuple[int, ...]:
        nx.set_edge_attributes(graph, {e: weights[i] for i, e in enumerate(edges)}, "w")
        return tuple(
            sorted(index[min(a, b), max(a, b)] for a, b in nx.minimum_spanning_edges(graph, weight="w", data=False))
        )

    columns: dict[tuple[int, ...], None] = {}
    load = np.zeros(len(edges))
    rounds = min(WARM_START_ROUNDS, 2 * len(edges))
    for _ in range(rounds):  # multiplicative weights: each tree avoids the loaded cables
        tree = tree_of(np.exp(WARM_START_STEEPNESS * load / cap))
        columns[tree] = None
        load[list(tree)] += 1.0 / rounds
    iterations, upper = 0, float(cap.sum()) / (graph.number_of_nodes() - 1)
    while True:
        iterations += 1
        trees = list(columns)
        res = _master_lp(trees, cap, "packing")
        duals = -res.ineqlin.marginals
        candidate = tree_of(duals)
        priced = float(duals[list(candidate)].sum())
        if priced > 0:
            upper = min(upper, -res.fun / priced)
        if priced >= 1.0 - eps or -res.fun >= (1.0 - gap) * upper or iterations >= max_iterations:
            break
        columns[candidate] = None
    packed, rates = _kept_trees(res, trees, edges, scale, eps)
    tau = sum(rates)
    return TreePacking(packed, rates, tau, iterations, max(tau, upper * scale))


def _shallow_tree(
    adjacency: Mapping[int, list[tuple[int, int]]],
    hops: Mapping[int, int],
    root: int,
    weights: np.ndarray,
    slack: int,
) -> tuple[int, ...]:
    """Edge indices of a light tree grown from ``root`` (Prim on ``weights``) in which every
    node ``v`` sits at most ``hops[v] + slack`` below the root (``hops``: BFS distances from
    it). It always spans: a node's BFS predecessor sits within its own limit, so the node can
    join below it within its limit, by induction on the BFS distance."""
    depth = {root: 0}
    heap = [(weights[e], e, root, v) for v, e in adjacency[root]]
    heapq.heapify(heap)
    tree = []
    while heap:
        _, e, u, v = heapq.heappop(heap)
        if v in depth or depth[u] + 1 > hops[v] + slack:
            continue
        depth[v] = depth[u] + 1
        tree.append(e)
        for x, f in adjacency[v]:
            if x not in depth:
                heapq.heappush(heap, (weights[f], f, v, x))
    return tuple(sorted(tree))


def shallow_tree_packing(
    capacities: Mapping[Edge, float],
    servers: int,
    slack: int = 0,
    eps: float = PRICING_EPS,
    max_iterations: int = SHALLOW_MAX_ITERATIONS,
) -> TreePacking:
    """Fractional packing of shallow spanning trees: each rooted at a server ``r`` with
    every node at most ``slack`` hops deeper than its distance from ``r``.

    Column generation as `spanning_tree_packing`, but both the multiplicative-weights warm
    start and the pricing grow the trees with `_shallow_tree` from every server; pricing
    shallow trees exactly is NP-hard (hop-constrained MST), so ``tau`` is what the columns
    found reach and ``tau_upper`` only the trivial bound: compare with the exact packing.
    Each round prices from `PRICING_ROOTS` of the servers in turn. The pipeline of a tree
    fills and drains in twice its depth in segment times, so at the same rates shallow
    trees finish sooner (docs/algorithms.md section 10)."""
    caps = _normalize(capacities)
    edges = list(caps)
    graph = nx.Graph(edges)
    if graph.number_of_nodes() < 2 or not nx.is_connected(graph):
        raise ValueError("the cabled graph must have at least 2 nodes and be connected")
    adjacency: dict[int, list[tuple[int, int]]] = {v: [] for v in graph}
    for i, (a, b) in enumerate(edges):
        adjacency[a].append((b, i))
        adjacency[b].append((a, i))
    roots = sorted(v for v in graph if v < servers)
    hops = {r: nx.single_source_shortest_path_length(graph, r) for r in roots}
    scale = max(caps.values())
    cap = np.array([caps[e] / scale for e in edges])
    columns: dict[tuple[int, ...], None] = {}
    load = np.zeros(len(edges))
    rounds = min(WARM_START_ROUNDS, 2 * len(edges))
    for k in range(rounds):  # multiplicative weights, the roots taking turns
        root = roots[k % len(roots)]
        tree = _shallow_tree(adjacency, hops[root], root, np.exp(WARM_START_STEEPNESS * load / cap), slack)
        columns[tree] = None
        load[list(tree)] += 1.0 / rounds
    iterations = idle = 0
    while True:
        iterations += 1
        trees = list(columns)
        res = _master_lp(trees, cap, "shallow packing")
        duals = -res.ineqlin.marginals
        turn = [roots[(iterations * PRICING_ROOTS + k) % len(roots)] for k in range(min(PRICING_ROOTS, len(roots)))]
        priced = [_shallow_tree(adjacency, hops[r], r, duals, slack) for r in turn]
        new = [t for t in priced if t not in columns and duals[list(t)].sum() < 1.0 - eps]
        idle = 0 if new else idle + len(turn)
        if idle >= len(roots) or iterations >= max_iterations:  # no root priced a column
            break
        columns.update(dict.fromkeys(new))
    packed, rates = _kept_trees(res, trees, edges, scale, eps)
    upper = float(cap.sum()) * scale / (graph.number_of_nodes() - 1)
    return TreePacking(packed, rates, sum(rates), iterations, upper)


def select_trees(
    packing: TreePacking,
    capacities: Mapping[Edge, float],
    max_trees: int,
    min_share: float = MIN_TREE_SHARE,
    max_loss: float = MAX_TAU_LOSS,
) -> TreePacking:
    """The fewest of the packing's fastest trees whose re-solved rates (the master LP on
    them alone) reach ``(1 - max_loss) tau``, at most ``max_trees``, none under
    ``min_share`` of tau (binary search: adding a tree never lowers the re-solved tau).

    Every tree costs the workers ops per segment on every server, so a packing of a few
    trees that gives up a few percent of tau runs faster than the exact one of ~|E| trees."""
    order = sorted(range(len(packing.trees)), key=lambda j: -packing.rates[j])
    order = [j for j in order if packing.rates[j] >= min_share * packing.tau] or order[:1]
    caps = _normalize(capacities)
    edges = list(caps)
    index = {e: i for i, e in enumerate(edges)}

    def resolve(k: int) -> TreePacking:
        trees = [packing.trees[j] for j in order[:k]]
        incidence = _incidence([tuple(index[e] for e in tree) for tree in trees], len(edges))
        res = linprog(-np.ones(k), A_ub=incidence, b_ub=[caps[e] for e in edges], method="highs")
        if res.status != 0:
            raise RuntimeError(f"restricted packing LP failed: {res.message}")
        kept = [(trees[j], float(x)) for j, x in enumerate(res.x) if x > 0]
        rates = tuple(r for _, r in kept)
        return TreePacking(tuple(t for t, _ in kept), rates, sum(rates), packing.iterations, packing.tau_upper)

    low, high = 1, min(max_trees, len(order))
    best = resolve(high)
    while low < high:  # the smallest k reaching the target (or high's packing)
        mid = (low + high) // 2
        candidate = resolve(mid)
        if candidate.tau >= (1.0 - max_loss) * packing.tau:
            best, high = candidate, mid
        else:
            low = mid + 1
    return best


def _choose_root(tree: nx.Graph, servers: int, root_bytes: dict[int, int]) -> int:
    """A root at the tree's centre (pipeline depth: the schedule's tail grows with the tree's
    height) with the least buffer already rooted at it, so roots spread over the servers."""
    ecc = nx.eccentricity(tree)
    candidates = [v for v in tree if v < servers]
    best = min(ecc[v] for v in candidates)
    return min((v for v in candidates if ecc[v] == best), key=lambda v: (root_bytes[v], ecc[v], v))


def shallow_or_exact_packing(capacities: Mapping[Edge, float], servers: int) -> TreePacking:
    """The shallowest packing (`shallow_tree_packing`, slack 0, 1, ... `MAX_DEPTH_SLACK`)
    within `PACKING_GAP` of the exact packing's tau, else the exact packing (to the gap);
    ``tau_upper`` is the exact packing's."""
    exact = spanning_tree_packing(capacities, gap=PACKING_GAP)
    for slack in range(MAX_DEPTH_SLACK + 1):
        shallow = shallow_tree_packing(capacities, servers, slack)
        if shallow.tau >= (1.0 - PACKING_GAP) * exact.tau:
            return dataclasses.replace(shallow, tau_upper=exact.tau_upper)
    return exact


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
        capacities = _normalize(plan_or_capacities)
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


def allreduce_bounds(capacities: Mapping[Edge, float], servers: int, nbytes: int) -> Bounds:
    """Both lower bounds for ``nbytes`` (capacities in bytes/s): the slowest server's
    egress bound ``2 (n-1) S / (n min_v D_v)`` and the packing bound ``S / tau``."""
    caps = _normalize(capacities)
    egress = [sum(c for e, c in caps.items() if v in e) for v in range(servers)]
    n = servers
    return Bounds(2 * (n - 1) * nbytes / (n * min(egress)), nbytes / spanning_tree_packing(caps).tau_upper)
