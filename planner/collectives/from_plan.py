"""Adapter: the rings and AllReduce schedules of a `Plan`'s topology.

The ring choice is made here once (docs/algorithms.md section 7): the iteration schedule
the workers run, the collective adapter (`allreduce_for_plan`) and the search's cost model
(`planner.costmodel.network`) all call `allreduce_rings` / `group_rings`.
The generators take plain ints and lists; this module only reads a plan's ``servers``,
``switches``, ``rings`` (each ring's server order, forward direction), ``strides``, the
strides of its AllReduce groups, and its cables' rates and routes (``links``, ``path``).

With cables of different rates the rings are not equal: a ring runs at the rate of its
slowest hop, so the buffer is split across the rings in proportion to those bottleneck
rates (`ring_weights`, docs/algorithms.md section 10) and every ring finishes at once;
on uniform cables the weights are equal and the split is TopoOpt's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from math import gcd
from typing import Any

from contract.physics import DEFAULT_MTU, cable_goodput
from contract.schedule import Schedule

from .forest import DEFAULT_SEGMENT_BYTES as FOREST_SEGMENT_BYTES
from .forest import ForestTree, TreePacking, build_forest, forest_schedule, plan_capacities
from .hierarchical import PIPELINE_CHUNKS, hierarchical_allreduce, hierarchical_allreduce_for_plan
from .rings import coset_rings, multiring_allreduce, ring_allreduce, topoopt_rings
from .trees import DEFAULT_SEGMENT_BYTES, dbtree_allreduce, tree_allreduce

ALGORITHMS = ("ring", "topoopt", "tree", "dbtree", "hierarchical", "forest")
# The shallow trees' pipelined schedule takes up to this multiple of its bound S / tau
# (TopoOpt-12, 64 MiB, 1-6 slow cables: 1.07-1.23x predicted, 1.065x measured with 3; rings
# have no pipeline to fill), so the rate-weighted rings run unless the trees' tau beats
# their rate by more.
TREE_SCHEDULE_OVERHEAD = 1.25


def plan_rings(plan: Any) -> list[list[int]]:
    """Every ring of the plan in both directions (ring p and its reverse n-p), the rings
    TopoOpt's multi-ring AllReduce runs at once so each cable carries traffic both ways."""
    n = int(plan.servers)
    rings = [list(r) for r in getattr(plan, "rings", ()) if len(r) == n]
    if not rings and getattr(plan, "strides", ()):
        return topoopt_rings(n, list(plan.strides))
    if not rings:
        rings = [list(range(n))]
    both = []
    for r in rings:
        both.append(r)
        both.append([r[0]] + r[:0:-1])
    return both


def allreduce_rings(plan: Any) -> list[list[int]]:
    """Rings the full-group AllReduce uses: `plan_rings` (every TopoOpt stride p and n - p;
    elsewhere the plan's ring order, whose logical edges are relayed where servers are not
    cabled); through a switch one ring, since both directions of a ring would share the
    same ports."""
    rings = plan_rings(plan)
    return rings[:1] if plan.switches else rings


def group_rings(plan: Any, group_size: int) -> list[list[list[int]]]:
    """Rings of the coset AllReduce groups of ``group_size`` members ({s, s + n/g, ...}):
    per coset, both directions of every stride (n/g) k the plan's groups of that size were
    given (TopoOpt's sub-group rings), else of k = 1."""
    n = int(plan.servers)
    if group_size == n:
        return [allreduce_rings(plan)]
    strides = sorted({p for grp in plan.demand.allreduce if len(grp.members) == group_size for p in grp.rings})
    ks = [p // (n // group_size) for p in strides if p % (n // group_size) == 0]
    ks = [k for k in ks if gcd(k, group_size) == 1] or [1]
    return coset_rings(n, group_size, ks)


def ring_weights(plan: Any, rings: Sequence[Sequence[int]]) -> list[float]:
    """Each ring's bottleneck rate (Gbit/s): the slowest directed cable on the routes of its
    hops, a cable's rate shared equally by the rings crossing it in that direction (parallel
    cables add up). Weights for `planner.collectives.rings.weighted_split`."""
    capacity: Counter[tuple[int, int]] = Counter()
    for link in plan.links:
        capacity[(link.a, link.b)] += link.gbps
        capacity[(link.b, link.a)] += link.gbps
    hops = []
    for ring in rings:
        nodes = [ring[(i + j) % len(ring)] for i in range(len(ring)) for j in (0, 1)]
        route = [list(plan.path(a, b)) for a, b in zip(nodes[::2], nodes[1::2])]
        hops.append({(u, v) for path in route for u, v in zip(path, path[1:])})
    users = Counter(hop for ring_hops in hops for hop in ring_hops)
    return [min(capacity[h] / users[h] for h in ring_hops) if ring_hops else 1.0 for ring_hops in hops]


def heterogeneous(plan: Any) -> bool:
    """Do the plan's cables have different rates?"""
    return len({link.gbps for link in plan.links}) > 1


def multiring_weights(plan: Any, rings: Sequence[Sequence[int]]) -> list[float] | None:
    """`ring_weights` when the cables are heterogeneous; None (the equal split) otherwise."""
    return ring_weights(plan, rings) if heterogeneous(plan) else None


@dataclass(frozen=True)
class ForestChoice:
    """What the forest AllReduce of a plan runs: its ``trees`` (shares of ``nbytes``), or,
    when ``trees`` is None, the ``rings`` split by ``weights``; ``why`` says which and why."""

    trees: list[ForestTree] | None
    packing: TreePacking
    rings: list[list[int]]
    weights: list[float]
    why: str


def choose_forest(plan: Any, nbytes: int) -> ForestChoice:
    """The forest AllReduce of a plan (docs/algorithms.md section 10): the packed trees, or
    the rate-weighted multi-ring when the trees would not be faster.

    The weighted rings take ``2 (n-1) S / (n sum_r b_r)`` (``b_r``: `ring_weights`), the
    kept trees about ``TREE_SCHEDULE_OVERHEAD x S / tau``; on uniform cables the rings
    reach the packing bound with no pipeline to fill, so they are the better choice there."""
    n = int(plan.servers)
    # bytes/s of goodput at the plan's rates; only the trees' rate against the rings' matters,
    # so any MTU would do
    capacities = plan_capacities(plan, mtu=DEFAULT_MTU)
    forest, packing = build_forest(capacities, n, nbytes)
    rings = allreduce_rings(plan)
    weights = ring_weights(plan, rings)
    bytes_per_gbit = cable_goodput(1e9, DEFAULT_MTU)  # plan_capacities' unit
    ring_rate = n * sum(weights) * bytes_per_gbit / (2 * (n - 1))  # S / time, as tau
    if ring_rate * TREE_SCHEDULE_OVERHEAD >= packing.tau:
        why = (
            f"rate-weighted rings: {ring_rate / packing.tau:.3f}x the packing rate of the {len(forest)} "
            f"kept trees, whose schedule runs at about 1/{TREE_SCHEDULE_OVERHEAD:g} of it"
        )
        return ForestChoice(None, packing, rings, weights, why)
    why = f"{len(forest)} packed trees: {packing.tau / ring_rate:.3f}x the rate of the rate-weighted rings"
    return ForestChoice(forest, packing, rings, weights, why)


def forest_for_plan(plan: Any, nbytes: int, segment_bytes: int | None = None) -> Schedule:
    """`choose_forest`'s schedule; ``params["shape"]`` (trees or rings) and ``params["why"]``."""
    n = int(plan.servers)
    choice = choose_forest(plan, nbytes)
    if choice.trees is None:
        sched = multiring_allreduce(n, nbytes, choice.rings, algorithm="forest", weights=choice.weights)
        sched.params.update(shape="rings", tau=choice.packing.tau)
    else:
        segment = segment_bytes or FOREST_SEGMENT_BYTES
        sched = forest_schedule(choice.trees, choice.packing, n, nbytes, segment_bytes=segment, path=plan.path)
    sched.params.update(why=choice.why)
    return sched


def allreduce_for_plan(plan: Any, algorithm: str, nbytes: int, segment_bytes: int | None = None) -> Schedule:
    """``ring``: one ring (the plan's first); ``topoopt``: all the plan's rings, both
    directions, concurrently, the buffer split by `multiring_weights`; ``tree``: NCCL's binary tree; ``dbtree``: NCCL's double
    binary tree; ``hierarchical``: reduce-scatter and all-gather dimension by dimension,
    pipelined or one dimension after the other as the plan's ``extra["schedule"]`` says; any
    other plan is one dimension of n servers, where it is the bidirectional ring AllReduce
    over servers 0 .. n-1 (pipelined). Tree and 1-D ring edges are logical (relayed by the
    hosts where not cabled)."""
    n = int(plan.servers)
    if algorithm == "hierarchical":
        chunks = 1 if plan.extra.get("schedule") == "sequential" else PIPELINE_CHUNKS
        if plan.topology != "hierarchical":
            return hierarchical_allreduce([n], ["ring"], nbytes, chunks)
        return hierarchical_allreduce_for_plan(plan, nbytes, chunks)
    if algorithm == "forest":  # rate-proportional spanning trees (docs/algorithms.md section 10)
        return forest_for_plan(plan, nbytes, segment_bytes)
    if algorithm == "ring":
        return ring_allreduce(n, nbytes, allreduce_rings(plan)[0])
    if algorithm == "topoopt":
        rings = allreduce_rings(plan)
        return multiring_allreduce(n, nbytes, rings, weights=multiring_weights(plan, rings))
    if algorithm == "tree":
        return tree_allreduce(n, nbytes, segment_bytes or DEFAULT_SEGMENT_BYTES)
    if algorithm == "dbtree":
        return dbtree_allreduce(n, nbytes, segment_bytes or DEFAULT_SEGMENT_BYTES)
    raise ValueError(f"unknown algorithm {algorithm!r} (expected one of {', '.join(ALGORITHMS)})")
