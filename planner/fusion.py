"""Operator fusion before the parallelization search (docs/algorithms.md section 9).

The search assigns one parallel configuration per operator; fewer, larger operators make
its state space smaller and every cost evaluation cheaper, so the graph is shrunk first:

1. Chain merging: an edge (u, v) with out_deg(u) + in_deg(v) = 2 is merged, as in the
   thesis. Adaptation: the search gives a merged group ONE configuration (the thesis only
   places groups), so a chain edge is merged only when u and v would want the same kind of
   configuration: same family (embedding tables are never merged: each is a placement
   unit) and communication intensities (gradient-sync seconds per compute second) within a
   factor `intensity_ratio` of each other.
2. Cheap operators: an edge touching an operator cheaper than ``alpha`` is merged whatever
   the chain structure (both ends non-embedding). ``alpha`` comes from the operator cost
   distribution: its 25th percentile, capped at 0.2% of the total cost (a model of 24
   identical encoder layers would otherwise call three quarters of itself "cheap").
3. Co-location along the critical path: in this planner every dense group runs SPMD on all
   servers, so operators on the critical path are co-located by construction; what is left
   of this step is attaching every remaining group cheaper than ``beta`` (0.5% of the
   total cost, `FusionConfig.beta_fraction`) to the neighbour it exchanges the largest
   tensor with.

Operator cost = forward + backward compute (3 x forward FLOPs x batch at the device rate)
+ the ring AllReduce time of its gradients at the server's total bandwidth. Merged
operators add parameters and FLOPs; their output is the output of the group's sink.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contract.physics import compute_seconds

from .opgraph import Operator, OpGraph
from .zoo import DEFAULT_DEVICE_TFLOPS

BACKWARD_PLUS_FORWARD = 3.0  # backward costs 2x the forward FLOPs


@dataclass(frozen=True)
class FusionConfig:
    batch: int = 128
    device_tflops: float = DEFAULT_DEVICE_TFLOPS
    server_gbps: float = 800.0  # d x B: what the gradient sync of one operator can use
    alpha_quantile: float = 0.25  # alpha = this quantile of operator costs ...
    alpha_cap: float = 0.002  # ... but at most this share of the total cost
    beta_fraction: float = 0.005  # beta = this share of the total cost
    intensity_ratio: float = 8.0


def operator_cost(op: Operator, cfg: FusionConfig) -> float:
    """Seconds: 3 x forward compute + 2 S / (d B) for its gradient AllReduce."""
    return _compute(op, cfg) + _sync(op, cfg)


def _compute(op: Operator, cfg: FusionConfig) -> float:
    """Forward + backward (2x) compute seconds of ``op``."""
    return BACKWARD_PLUS_FORWARD * compute_seconds(op.flops, cfg.batch, cfg.device_tflops)


def _sync(op: Operator, cfg: FusionConfig) -> float:
    """Ring AllReduce of ``op``'s gradients at the server's total bandwidth (2 S / (d B))."""
    return 2.0 * op.param_bytes / (cfg.server_gbps * 1e9 / 8)


def _intensity(op: Operator, cfg: FusionConfig) -> float:
    return (_sync(op, cfg) + 1e-12) / (_compute(op, cfg) + 1e-12)


class _Groups:
    """Union of operators into groups, with the group DAG kept up to date."""

    def __init__(self, graph: OpGraph):
        self.graph = graph
        self.parent = list(range(len(graph)))
        self.members: dict[int, list[int]] = {i: [i] for i in range(len(graph))}

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def edges(self) -> dict[tuple[int, int], int]:
        """Group edges (u, v) -> activation bytes per sample flowing u -> v."""
        out: dict[tuple[int, int], int] = {}
        for v, ps in enumerate(self.graph.preds):
            for p in ps:
                a, b = self.find(p), self.find(v)
                if a != b:
                    out[(a, b)] = out.get((a, b), 0) + self.graph.ops[p].out_bytes
        return out

    def creates_cycle(self, a: int, b: int) -> bool:
        """Would merging groups a and b (edge a -> b) create a cycle? (another a ~> b path)"""
        edges = self.edges()
        succ: dict[int, list[int]] = {}
        for u, v in edges:
            succ.setdefault(u, []).append(v)
        stack = [v for v in succ.get(a, []) if v != b]
        seen = set(stack)
        while stack:
            u = stack.pop()
            if u == b:
                return True
            for w in succ.get(u, []):
                if w not in seen:
                    seen.add(w)
                    stack.append(w)
        return False

    def union(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a == b:
            return
        keep, gone = min(a, b), max(a, b)
        self.parent[gone] = keep
        self.members[keep] += self.members.pop(gone)

    def op(self, root: int) -> Operator:
        ops = [self.graph.ops[i] for i in sorted(self.members[root])]
        name = ops[0].name if len(ops) == 1 else f"{ops[0].name}+{len(ops) - 1}"
        return Operator(
            name,
            ops[0].kind if len(ops) == 1 else _kind(ops),
            sum(o.params for o in ops),
            sum(o.flops for o in ops),
            0,
            (),
            tuple(m for o in ops for m in o.members),
        )


def _kind(ops: list[Operator]) -> str:
    return max(ops, key=lambda o: (o.params, o.flops)).kind


def fuse(graph: OpGraph, cfg: FusionConfig | None = None) -> OpGraph:
    """The fused operator DAG of ``graph`` (steps 1-3 of the module docstring)."""
    cfg = cfg or FusionConfig()
    groups = _Groups(graph)
    costs = np.array([operator_cost(op, cfg) for op in graph.ops])
    total = float(costs.sum())
    alpha = min(float(np.quantile(costs, cfg.alpha_quantile)), cfg.alpha_cap * total) if len(costs) else 0.0

    def group_op(root: int) -> Operator:
        return groups.op(root)

    def mergeable(a: int, b: int) -> bool:
        return not (group_op(a).is_embedding or group_op(b).is_embedding)

    changed = True
    while changed:  # steps 1 and 2 to a fixed point
        changed = False
        edges = groups.edges()
        out_deg: dict[int, int] = {}
        in_deg: dict[int, int] = {}
        for u, v in edges:
            out_deg[u] = out_deg.get(u, 0) + 1
            in_deg[v] = in_deg.get(v, 0) + 1
        for u, v in sorted(edges):
            if not mergeable(u, v):
                continue
            ou, ov = group_op(u), group_op(v)
            chain = out_deg[u] + in_deg[v] == 2
            ratio = _intensity(ou, cfg) / _intensity(ov, cfg)
            similar = max(ratio, 1 / ratio) <= cfg.intensity_ratio
            cheap = min(operator_cost(ou, cfg), operator_cost(ov, cfg)) < alpha
            if (chain and similar) or (cheap and not groups.creates_cycle(u, v)):
                groups.union(u, v)
                changed = True
                break

    # Step 3: attach cheap leftovers to the neighbour they exchange the most bytes with.
    changed = True
    while changed:
        changed = False
        roots = sorted(groups.members)
        beta = cfg.beta_fraction * total
        edges = groups.edges()
        for r in roots:
            op = group_op(r)
            if op.is_embedding or operator_cost(op, cfg) >= beta:
                continue
            nbrs = [(b, v if u == r else u) for (u, v), b in edges.items() if r in (u, v)]
            nbrs = [(b, o) for b, o in nbrs if not group_op(o).is_embedding]
            for _, other in sorted(nbrs, key=lambda t: (-t[0], t[1])):
                a, b = (r, other) if (r, other) in edges else (other, r)
                if not groups.creates_cycle(a, b):
                    groups.union(r, other)
                    changed = True
                    break
            if changed:
                break
    return _rebuild(graph, groups)


def _rebuild(graph: OpGraph, groups: _Groups) -> OpGraph:
    """Fused operators in a topological order, with inputs and sink outputs."""
    roots = sorted(groups.members)
    name = {r: groups.op(r).name for r in roots}
    edges = groups.edges()
    succ_bytes: dict[int, int] = {}
    for (u, _), b in edges.items():
        succ_bytes[u] = max(succ_bytes.get(u, 0), b)
    ops: dict[int, Operator] = {}
    for r in roots:
        base = groups.op(r)
        member_ids = sorted(groups.members[r])
        # Output: the largest activation leaving the group (its sink's for a chain); a group
        # with no successor keeps its last member's output.
        out = succ_bytes.get(r, graph.ops[member_ids[-1]].out_bytes)
        inputs = tuple(sorted({name[u] for (u, v) in edges if v == r}, key=lambda n: graph.index[n.split("+")[0]]))
        ops[r] = Operator(base.name, base.kind, base.params, base.flops, out, inputs, base.members)
    order: list[int] = []
    placed: set[int] = set()
    pending = sorted(roots, key=lambda r: min(groups.members[r]))
    while pending:
        for r in pending:
            if all(u in placed for (u, v) in edges if v == r):
                order.append(r)
                placed.add(r)
                pending.remove(r)
                break
        else:  # pragma: no cover - merges are cycle-checked
            raise ValueError("fusion produced a cycle")
    fused = OpGraph(graph.model, tuple(ops[r] for r in order))
    fused.validate()
    return fused


def regroup(graph: OpGraph, groups: list[tuple[str, ...]]) -> OpGraph:
    """``graph`` fused into the given groups of its operators' names (each group as
    `Operator.members` lists them): rebuilds a fused graph from a stored placement."""
    g = _Groups(graph)
    for members in groups:
        ids = [graph.index[name] for name in members]
        for other in ids[1:]:
            g.union(ids[0], other)
    return _rebuild(graph, g)


def fusion_summary(before: OpGraph, after: OpGraph) -> str:
    return f"{before.model}: {len(before)} operators fused into {len(after)} groups"


__all__ = ["FusionConfig", "fuse", "fusion_summary", "operator_cost", "regroup"]
