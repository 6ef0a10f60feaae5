"""Per-destination bandwidth allocation: max concurrent flow over restricted paths.

docs/algorithms.md section 4.1 (after the bandwidth allocation of the thesis on joint operator
fusion, device placement and bandwidth allocation: every server splits its egress among
destinations in proportion to demand and spreads a heavy destination over several links).

A traffic phase is a matrix ``D[s, t]`` of bytes; every ordered pair (s, t) may use the paths
``P(s, t)`` (below) at rates ``x_p`` (Gbit/s); every directed cable (u, v) has capacity
``c_uv`` (its cables' gbps, parallel cables added). The maximum concurrent flow

    maximize lambda
    subject to  sum_{p in P(s,t)} x_p = lambda * D[s, t]      for every pair with D > 0
                sum_{p : (u,v) in p}  x_p <= c_uv             for every directed cable
                x_p >= 0

finishes every pair at the same time ``T = 1 / lambda`` (8 D / 1e9 Gbit at rate lambda D), the
smallest completion time any rate split over these paths reaches. Among the optimal
solutions a second LP keeps ``lambda`` (to a relative 1e-7) and minimizes the cable load
``sum_p hops(p) x_p``, so no rate takes a detour it does not need. Both are solved by
``scipy.optimize.linprog`` (HiGHS).

Size. Path restriction (not column generation): ``P(s, t)`` is at most k paths (default 4):
the destination route (plane 0, so the LP is never worse than single-path routing), then
the shortest simple path through each other first hop (a breadth-first search in the graph
without s, networkx), shortest first; when s has fewer than k distinct neighbours, further
paths of Yen's enumeration (networkx ``shortest_simple_paths``) fill up. Symmetry
reduction: when the rotation ``i -> i + 1 (mod n)`` maps the cables (with their rates) and
the traffic onto themselves (a TopoOpt circulant C_n(strides) with a shift-invariant phase
such as a uniform all-to-all), averaging any optimum over the rotations gives an optimum that
is rotation invariant, so the LP is solved for server 0's pairs only, with one capacity row
per cable offset (a path loads each cable of offset m by its rate times its hops of offset m)
and the solution rotated to every server: 128 servers of degree 8 with a full all-to-all is
508 columns and solves in about a second (benchmarks/bandwidth_lp.py). Without the symmetry
the LP has ``k x pairs`` columns and as many rows as pairs: HiGHS takes about 15 s for 64
servers' all-to-all and minutes for 128.

Paths carrying less than 1% of their pair's rate are dropped and the pair's rate is spread
over the rest in proportion; if that pushes a cable over capacity, every rate is scaled down
by the same factor (the completion time grows by it), so the allocation always fits.

For comparison, ``single_path_seconds`` is the same phase on the destination routes (plane 0)
with the best rates for those fixed paths: ``max_uv load_uv / c_uv``.
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import networkx as nx
import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from contract.network import Network, PairAllocation, PathShare
from contract.plan import Plan

from ..model.workload_graph import workload_graph
from ..strategy.strategies import op_traffic, plan_workload, strategy_of

K_PATHS = 4  # paths per pair: a degree-4 TopoOpt server has 4 first hops
NEGLIGIBLE_SHARE = 0.01  # a path below this share of its pair's rate is not worth a plane
T_SLACK = 1e-7  # the second LP keeps T to this relative tolerance (solver accuracy)
LP_METHOD = "highs"
BITS_PER_BYTE = 8

Traffic = Mapping[tuple[int, int], float]  # (src, dst) -> bytes of one phase
Edge = tuple[int, int]


@dataclass(frozen=True)
class BandwidthAllocation:
    """The allocation of one traffic phase and its completion times (real network seconds)."""

    allocation: tuple[PairAllocation, ...]
    seconds: float  # the phase on the allocation (every pair at its allocated rate)
    single_path_seconds: float  # the phase on the destination routes, best fixed-path rates
    columns: int  # candidate paths the LP chose among
    solve_seconds: float  # path enumeration and both LPs

    @property
    def speedup(self) -> float:
        return self.single_path_seconds / self.seconds if self.seconds > 0 else 1.0


def cable_capacity(network: Network) -> dict[Edge, float]:
    """Gbit/s per directed cable (parallel cables add up)."""
    cap: dict[Edge, float] = defaultdict(float)
    for link in network.links:
        cap[(link.a, link.b)] += link.gbps
        cap[(link.b, link.a)] += link.gbps
    return dict(cap)


def candidate_paths(
    graph: nx.Graph, src: int, dsts: list[int], k: int, route: Callable[[int, int], list[int]]
) -> dict[int, list[tuple[int, ...]]]:
    """For every ``dst``, at most k simple paths from ``src``: its route, then distinct first
    hops, then Yen's enumeration (module docstring)."""
    without_src = nx.restricted_view(graph, [src], [])
    through = {nb: nx.single_source_shortest_path(without_src, nb) for nb in sorted(graph.neighbors(src))}
    out: dict[int, list[tuple[int, ...]]] = {}
    for dst in dsts:
        first = tuple(route(src, dst))
        others = sorted(
            ((src, *tail[dst]) for nb, tail in through.items() if dst in tail and nb != first[1]),
            key=lambda p: (len(p), p),
        )
        paths = [first, *others][:k]
        if len(paths) < k:
            for extra in nx.shortest_simple_paths(graph, src, dst):
                if len(paths) >= k:
                    break
                if tuple(extra) not in paths:
                    paths.append(tuple(extra))
        out[dst] = paths
    return out


def single_path_seconds(network: Network, traffic: Traffic) -> float:
    """The phase on the destination routes: ``max_uv load_uv / c_uv`` (module docstring)."""
    cap = cable_capacity(network)
    load: dict[Edge, float] = defaultdict(float)
    for (src, dst), nbytes in traffic.items():
        nodes = network.path(src, dst)
        for edge in zip(nodes, nodes[1:]):
            load[edge] += nbytes * BITS_PER_BYTE / 1e9
    return max((v / cap[e] for e, v in load.items()), default=0.0)


def _solve(cost: np.ndarray, a_eq, b_eq: np.ndarray, a_ub, b_ub: np.ndarray, bounds: list) -> np.ndarray:
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=bounds, method=LP_METHOD)
    if res.status != 0:
        raise RuntimeError(f"bandwidth LP failed: {res.message}")
    return np.asarray(res.x)


def max_concurrent_flow(
    gbit: np.ndarray, columns: list[tuple[int, list[tuple[int, int]]]], capacity: np.ndarray
) -> tuple[float, np.ndarray]:
    """The two LPs of the module docstring, in matrix form: pair ``i`` needs ``gbit[i]``;
    column ``j = (i, [(row, uses), ...])`` is one path of pair i crossing capacity row ``row``
    ``uses`` times. Returns T (seconds) and every column's rate (Gbit/s)."""
    unknowns = len(columns) + 1  # path shares y_p (sum 1 per pair), then T
    scale = gbit.max()  # demands in units of the largest pair: T stays O(1 / capacity)
    ub_rows, ub_cols, ub_vals = [], [], []
    for j, (i, crossings) in enumerate(columns):
        for row, uses in crossings:
            ub_rows.append(row), ub_cols.append(j), ub_vals.append(uses * gbit[i] / scale)
    ub_rows += list(range(len(capacity)))
    ub_cols += [unknowns - 1] * len(capacity)
    ub_vals += list(-capacity)
    pair_of = [i for i, _ in columns]
    a_eq = coo_matrix((np.ones(len(columns)), (pair_of, range(len(columns)))), shape=(len(gbit), unknowns)).tocsr()
    a_ub = coo_matrix((ub_vals, (ub_rows, ub_cols)), shape=(len(capacity), unknowns)).tocsr()
    b_eq, b_ub = np.ones(len(gbit)), np.zeros(len(capacity))

    objective = np.zeros(unknowns)
    objective[-1] = 1.0
    best = _solve(objective, a_eq, b_eq, a_ub, b_ub, [(0, None)] * unknowns)[-1]
    load = np.array([sum(u for _, u in crossings) * gbit[i] / scale for i, crossings in columns] + [0.0])
    y = _solve(load, a_eq, b_eq, a_ub, b_ub, [(0, None)] * (unknowns - 1) + [(0, best * (1 + T_SLACK))])
    seconds = y[-1] * scale
    return seconds, gbit[pair_of] * y[:-1] / seconds


def rotation_invariant(network: Network, cap: dict[Edge, float], demand: dict[tuple[int, int], float]) -> bool:
    """Whether the servers' rotation ``i -> i + 1 (mod n)`` maps the cables (with their
    capacities) and the traffic onto themselves (no switches)."""
    n = network.servers
    if network.switches or n < 2:
        return False
    rotate = lambda u, v: ((u + 1) % n, (v + 1) % n)  # noqa: E731
    return all(cap.get(rotate(*e)) == c for e, c in cap.items()) and all(
        demand.get(rotate(*pair)) == v for pair, v in demand.items()
    )


def _paths_by_pair(network, cap, demand, k) -> tuple[list[tuple[int, int]], dict, list, list[float], Callable]:
    """(pairs solved for, their candidate paths, the LP columns, the capacity rows, how a
    solved pair's paths expand to every pair) for the generic or the rotation-reduced LP."""
    graph = nx.Graph(list(cap))
    n = network.servers
    if rotation_invariant(network, cap, demand):
        pairs = sorted(pair for pair in demand if pair[0] == 0)
        paths_of = {(0, d): p for d, p in candidate_paths(graph, 0, [d for _, d in pairs], k, network.path).items()}
        offsets = sorted({(v - u) % n for u, v in cap})
        row_of = {(u, v): offsets.index((v - u) % n) for u, v in cap}
        capacity = [cap[(0, m)] for m in offsets]

        def expand(pair, path):  # every rotation of server 0's solution
            return [((pair[0] + r) % n, (pair[1] + r) % n, tuple((x + r) % n for x in path)) for r in range(n)]
    else:
        pairs = sorted(demand)
        by_src: dict[int, list[int]] = defaultdict(list)
        for src, dst in pairs:
            by_src[src].append(dst)
        paths_of = {
            (s, d): p for s, dsts in by_src.items() for d, p in candidate_paths(graph, s, dsts, k, network.path).items()
        }
        edges = sorted(cap)
        row_of = {e: i for i, e in enumerate(edges)}
        capacity = [cap[e] for e in edges]

        def expand(pair, path):
            return [(pair[0], pair[1], path)]

    columns = []
    for i, pair in enumerate(pairs):
        for path in paths_of[pair]:
            uses: dict[int, int] = defaultdict(int)
            for edge in zip(path, path[1:]):
                uses[row_of[edge]] += 1
            columns.append((i, sorted(uses.items())))
    return pairs, paths_of, columns, capacity, expand


def allocate_bandwidth(network: Network, traffic: Traffic, k: int = K_PATHS) -> BandwidthAllocation:
    """The max-concurrent-flow allocation of one traffic phase on ``network`` (module docstring)."""
    t0 = time.perf_counter()
    demand = {pair: float(v) for pair, v in traffic.items() if v > 0 and pair[0] != pair[1]}
    if not demand:
        return BandwidthAllocation((), 0.0, 0.0, 0, 0.0)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    cap = cable_capacity(network)
    pairs, paths_of, columns, capacity, expand = _paths_by_pair(network, cap, demand, k)
    gbit = np.array([demand[pair] * BITS_PER_BYTE / 1e9 for pair in pairs])
    _, rates = max_concurrent_flow(gbit, columns, np.array(capacity))
    shares: dict[tuple[int, int], list[tuple[tuple[int, ...], float]]] = defaultdict(list)
    j = 0
    for pair in pairs:
        for path in paths_of[pair]:
            for src, dst, rotated in expand(pair, path):
                shares[(src, dst)].append((rotated, float(rates[j])))
            j += 1
    allocation = _keep_significant(shares, cap)
    seconds = max(demand[(p.src, p.dst)] * BITS_PER_BYTE / 1e9 / p.gbps for p in allocation)
    return BandwidthAllocation(
        allocation, seconds, single_path_seconds(network, demand), len(columns), time.perf_counter() - t0
    )


def _keep_significant(
    shares: dict[tuple[int, int], list[tuple[tuple[int, ...], float]]], cap: dict[Edge, float]
) -> tuple[PairAllocation, ...]:
    """Drop paths under NEGLIGIBLE_SHARE of their pair's rate, renormalize, fit the capacities."""
    kept: dict[tuple[int, int], list[tuple[tuple[int, ...], float]]] = {}
    for pair, ps in shares.items():
        ps = [(p, max(r, 0.0)) for p, r in ps]
        total = sum(r for _, r in ps)
        big = [(p, r) for p, r in ps if r >= NEGLIGIBLE_SHARE * total]
        grow = total / sum(r for _, r in big)
        kept[pair] = [(p, r * grow) for p, r in sorted(big, key=lambda pr: -pr[1])]
    load: dict[Edge, float] = defaultdict(float)
    for ps in kept.values():
        for path, rate in ps:
            for edge in zip(path, path[1:]):
                load[edge] += rate
    fit = min(1.0, min(cap[e] / v for e, v in load.items() if v > 0))
    return tuple(
        PairAllocation(src, dst, tuple(PathShare(p, r * fit) for p, r in kept[(src, dst)])) for src, dst in sorted(kept)
    )


# ---- traffic phases of a plan --------------------------------------------------------------


def embedding_alltoall_traffic(plan: Plan) -> dict[tuple[int, int], float]:
    """The embedding all-to-all of a plan's forward pass (bytes per ordered pair): every placed
    table's shards send their lookups for the plan's batch to every other server
    (`planner.strategy.strategies.op_traffic`)."""
    job = plan_workload(plan)
    graph, strategy = strategy_of(workload_graph(job), plan.placement)
    out: dict[tuple[int, int], float] = defaultdict(float)
    for i, op in enumerate(graph.ops):
        if op.is_embedding and strategy[i].owner >= 0:
            flows = op_traffic(graph, strategy, i, plan.servers, job.batch_per_server, 1.0).fwd_out
            for s, d, v in zip(flows.src.tolist(), flows.dst.tolist(), flows.nbytes.tolist()):
                out[(s, d)] += v
    return dict(out)


def iteration_mp_traffic(plan: Plan) -> dict[tuple[int, int], float]:
    """A whole iteration's model-parallel bytes per ordered pair (``plan.demand.mp``)."""
    out: dict[tuple[int, int], float] = defaultdict(float)
    for flow in plan.demand.mp:
        out[(flow.src, flow.dst)] += flow.bytes
    return dict(out)


def allocate_for_plan(plan: Plan, traffic: Traffic, k: int = K_PATHS) -> BandwidthAllocation:
    """`allocate_bandwidth` on the plan's network; use it as
    ``dataclasses.replace(plan, allocation=allocate_for_plan(plan, traffic).allocation)``."""
    return allocate_bandwidth(plan.network, traffic, k)


def planned_routing(plan: Plan, k: int = K_PATHS) -> Plan:
    """``plan`` with the allocation of its iteration's model-parallel traffic (unchanged, with
    a note, when it has none)."""
    traffic = iteration_mp_traffic(plan)
    if not traffic:
        return dataclasses.replace(
            plan, notes=(*plan.notes, "routing 'planned': no model-parallel traffic to allocate; destination routes")
        )
    result = allocate_for_plan(plan, traffic, k)
    split = sum(len(pair.paths) > 1 for pair in result.allocation)
    note = (
        f"routing 'planned': {len(result.allocation)} model-parallel pairs allocated, {split} split over several "
        f"paths; phase {result.seconds * 1e3:.3f} ms vs {result.single_path_seconds * 1e3:.3f} ms on single paths"
    )
    return dataclasses.replace(plan, allocation=result.allocation, notes=(*plan.notes, note))
