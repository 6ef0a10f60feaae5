"""Adapter: the AllReduce schedule of a named algorithm for a `Plan`'s topology.

The generators take plain ints and lists; this module only reads a plan's ``servers``,
``rings`` (each ring's server order, forward direction) and ``strides``.
"""

from __future__ import annotations

from typing import Any

from contract.schedule import Schedule

from .rings import multiring_allreduce, ring_allreduce, topoopt_rings
from .trees import DEFAULT_SEGMENT_BYTES, dbtree_allreduce, tree_allreduce

ALGORITHMS = ("ring", "topoopt", "tree", "dbtree")


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


def allreduce_for_plan(plan: Any, algorithm: str, nbytes: int, segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> Schedule:
    """``ring``: one ring (the plan's first); ``topoopt``: all the plan's rings, both
    directions, concurrently; ``tree``: NCCL's binary tree; ``dbtree``: NCCL's double
    binary tree. Tree edges are logical (relayed by the hosts where not cabled)."""
    n = int(plan.servers)
    if algorithm == "ring":
        rings = plan_rings(plan)
        return ring_allreduce(n, nbytes, rings[0])
    if algorithm == "topoopt":
        return multiring_allreduce(n, nbytes, plan_rings(plan))
    if algorithm == "tree":
        return tree_allreduce(n, nbytes, segment_bytes)
    if algorithm == "dbtree":
        return dbtree_allreduce(n, nbytes, segment_bytes)
    raise ValueError(f"unknown algorithm {algorithm!r} (expected one of {', '.join(ALGORITHMS)})")
