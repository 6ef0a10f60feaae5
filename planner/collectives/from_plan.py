"""Adapter: the rings and AllReduce schedules of a `Plan`'s topology.

The ring choice is made here once (docs/algorithms.md section 7): the iteration schedule
the workers run, the collective adapter (`allreduce_for_plan`) and the search's cost model
(`planner.costmodel.network`) all call `allreduce_rings` / `group_rings`.
The generators take plain ints and lists; this module only reads a plan's ``servers``,
``switches``, ``rings`` (each ring's server order, forward direction), ``strides`` and
the strides of its AllReduce groups.
"""

from __future__ import annotations

from math import gcd
from typing import Any

from contract.schedule import Schedule

from .forest import forest_allreduce
from .hierarchical import PIPELINE_CHUNKS, hierarchical_allreduce, hierarchical_allreduce_for_plan
from .rings import coset_rings, multiring_allreduce, ring_allreduce, topoopt_rings
from .trees import DEFAULT_SEGMENT_BYTES, dbtree_allreduce, tree_allreduce

ALGORITHMS = ("ring", "topoopt", "tree", "dbtree", "hierarchical", "forest")


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


def allreduce_for_plan(plan: Any, algorithm: str, nbytes: int, segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> Schedule:
    """``ring``: one ring (the plan's first); ``topoopt``: all the plan's rings, both
    directions, concurrently; ``tree``: NCCL's binary tree; ``dbtree``: NCCL's double
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
    if algorithm == "forest":  # rate-proportional spanning trees (docs/algorithms.md section 2)
        return forest_allreduce(plan, nbytes, segment_bytes=segment_bytes)
    if algorithm == "ring":
        return ring_allreduce(n, nbytes, allreduce_rings(plan)[0])
    if algorithm == "topoopt":
        return multiring_allreduce(n, nbytes, allreduce_rings(plan))
    if algorithm == "tree":
        return tree_allreduce(n, nbytes, segment_bytes)
    if algorithm == "dbtree":
        return dbtree_allreduce(n, nbytes, segment_bytes)
    raise ValueError(f"unknown algorithm {algorithm!r} (expected one of {', '.join(ALGORITHMS)})")
