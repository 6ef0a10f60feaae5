"""Operator fusion before the parallelization search (docs/algorithms.md section 9).

The search assigns one parallel configuration per operator; fewer, larger operators make
its state space smaller and every cost evaluation cheaper, so the graph is shrunk first:

1. Chain merging: an edge (u, v) with out_deg(u) + in_deg(v) = 2 is merged, as in the
   thesis. Adaptation: the search gives a merged group ONE configuration (the thesis only
   places groups), so a chain edge is merged only when u and v would want the same kind of
   configuration: same family (embedding tables are never merged: each is a placement
   unit; nor is a trace's all-to-all) and communication intensities (gradient-sync seconds per compute second) within a
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

Operator cost = forward + backward compute (forward + backward FLOPs x batch at the device
rate; backward = 2x forward for the zoo) + the ring AllReduce time of its gradients at the
server's total bandwidth. Merged operators add parameters, gradient bytes and FLOPs; their
output is the output of the group's sink. A shared parameter (tied weights) is read by the
groups of its readers; one that all its readers' group holds is that group's own.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

import numpy as np

from contract.graph import SharedParameter
from contract.physics import compute_seconds

from .opgraph import Operator, OpGraph
from .zoo import DEFAULT_DEVICE_TFLOPS


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
    """Forward + backward compute seconds of ``op``."""
    return compute_seconds(op.flops + op.backward_flops, cfg.batch, cfg.device_tflops)


def _sync(op: Operator, cfg: FusionConfig) -> float:
    """Ring AllReduce of ``op``'s gradients at the server's total bandwidth (2 S / (d B))."""
    return 2.0 * op.param_bytes / (cfg.server_gbps * 1e9 / 8)


def _intensity(op: Operator, cfg: FusionConfig) -> float:
    return (_sync(op, cfg) + 1e-12) / (_compute(op, cfg) + 1e-12)


class _Groups:
    """Union of operators into groups (union-find, a group's root is its smallest operator
    index), with the group DAG kept up to date as groups merge: ``succ[g]`` and ``pred[g]``
    map each neighbour group to the activation bytes per sample flowing between them."""

    def __init__(self, graph: OpGraph):
        self.graph = graph
        self.parent = list(range(len(graph)))
        self.members: dict[int, list[int]] = {i: [i] for i in range(len(graph))}
        self.succ: dict[int, dict[int, int]] = {i: {} for i in range(len(graph))}
        self.pred: dict[int, dict[int, int]] = {i: {} for i in range(len(graph))}
        for v, ps in enumerate(graph.preds):
            for p in ps:
                self.succ[p][v] = self.succ[p].get(v, 0) + graph.ops[p].out_bytes
                self.pred[v][p] = self.pred[v].get(p, 0) + graph.ops[p].out_bytes
        self._ops: dict[int, Operator] = {i: op for i, op in enumerate(graph.ops)}

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def edges(self) -> dict[tuple[int, int], int]:
        """Group edges (u, v) -> activation bytes per sample flowing u -> v."""
        return {(u, v): nbytes for u, out in self.succ.items() for v, nbytes in out.items()}

    def creates_cycle(self, a: int, b: int) -> bool:
        """Would merging groups a and b (edge a -> b) create a cycle? (another a ~> b path)"""
        stack = [v for v in self.succ[a] if v != b]
        seen = set(stack)
        while stack:
            u = stack.pop()
            if u == b:
                return True
            for w in self.succ[u]:
                if w not in seen:
                    seen.add(w)
                    stack.append(w)
        return False

    def union(self, a: int, b: int) -> int:
        """Merge the groups of ``a`` and ``b``; returns the root of the merged group."""
        a, b = self.find(a), self.find(b)
        if a == b:
            return a
        keep, gone = min(a, b), max(a, b)
        self.parent[gone] = keep
        self.members[keep] = sorted(self.members[keep] + self.members.pop(gone))  # two sorted runs: linear
        for mine, theirs in ((self.succ, self.pred), (self.pred, self.succ)):
            for other, nbytes in mine.pop(gone).items():
                if other != keep:
                    del theirs[other][gone]
                    mine[keep][other] = mine[keep].get(other, 0) + nbytes
                    theirs[other][keep] = theirs[other].get(keep, 0) + nbytes
        self.succ[keep].pop(gone, None)  # the edge between the two is now inside the group
        self.pred[keep].pop(gone, None)
        del self._ops[gone]
        self._ops[keep] = self._summary(keep)
        return keep

    def _summary(self, root: int) -> Operator:
        """The group's kind, parameters and FLOPs (summed in member order, as `op` does)."""
        ops = [self.graph.ops[i] for i in self.members[root]]
        return _merged(ops[0].name, _kind(ops), ops, 0, (), ())

    def cost_view(self, root: int) -> Operator:
        """What the merge rules read of a group (kind, parameters, FLOPs), kept per root."""
        return self._ops[root]

    def op(self, root: int) -> Operator:
        ops = [self.graph.ops[i] for i in self.members[root]]
        name = ops[0].name if len(ops) == 1 else f"{ops[0].name}+{len(ops) - 1}"
        kind = ops[0].kind if len(ops) == 1 else _kind(ops)
        return _merged(name, kind, ops, 0, (), tuple(m for o in ops for m in o.members))


def _merged(
    name: str, kind: str, ops: list[Operator], out_bytes: int, inputs: tuple[str, ...], members: tuple[str, ...]
) -> Operator:
    """``ops`` as one operator: parameters, FLOPs (forward and backward) and gradient bytes
    summed; a group none of whose operators has its own keeps the implicit ones (2x, float32)."""
    own = any(o.bwd_flops is not None or o.grad_bytes is not None for o in ops)
    return Operator(
        name,
        kind,
        sum(o.params for o in ops),
        sum(o.flops for o in ops),
        out_bytes,
        inputs,
        members,
        sum(o.backward_flops for o in ops) if own else None,
        sum(o.param_bytes for o in ops) if own else None,
    )


def _apart(op: Operator) -> bool:
    """Never merged: an embedding table (a placement unit) or a trace's all-to-all."""
    return op.is_embedding or op.is_exchange


def _kind(ops: list[Operator]) -> str:
    return max(ops, key=lambda o: (o.params, o.flops)).kind


def fuse(graph: OpGraph, cfg: FusionConfig | None = None) -> OpGraph:
    """The fused operator DAG of ``graph`` (steps 1-3 of the module docstring).

    Each step merges, again and again, the first mergeable edge (step 1-2, in (u, v) order
    of group roots) or cheap group (step 3, in root order) until none is left. A merge
    changes whether only a few others are mergeable (those touching the merged group, or
    whose degree it lowered; a merge elsewhere can only add paths, which forbids merges and
    never allows one), so the candidates live in a heap: popped in order and checked,
    dropped when they fail, and pushed again when a merge touches them. That finds the same
    merges in the same order as rescanning every edge after each merge, in near-linear
    rather than quadratic time."""
    cfg = cfg or FusionConfig()
    groups = _Groups(graph)
    costs = np.array([operator_cost(op, cfg) for op in graph.ops])
    total = float(costs.sum())
    alpha = min(float(np.quantile(costs, cfg.alpha_quantile)), cfg.alpha_cap * total) if len(costs) else 0.0
    view = groups.cost_view

    def edge_mergeable(u: int, v: int) -> bool:  # steps 1 and 2
        ou, ov = view(u), view(v)
        if _apart(ou) or _apart(ov):
            return False
        chain = len(groups.succ[u]) + len(groups.pred[v]) == 2
        ratio = _intensity(ou, cfg) / _intensity(ov, cfg)
        similar = max(ratio, 1 / ratio) <= cfg.intensity_ratio
        cheap = min(operator_cost(ou, cfg), operator_cost(ov, cfg)) < alpha
        return (chain and similar) or (cheap and not groups.creates_cycle(u, v))

    edges = sorted(groups.edges())
    while edges:
        u, v = heapq.heappop(edges)
        if v not in groups.succ.get(u, ()) or not edge_mergeable(u, v):
            continue  # gone since pushed, or not mergeable until a merge touches it
        k = groups.union(u, v)
        touched = [(k, w) for w in groups.succ[k]] + [(w, k) for w in groups.pred[k]]
        touched += [(p, w) for p in groups.pred[k] for w in groups.succ[p]]  # out-degree of p fell
        touched += [(w, s) for s in groups.succ[k] for w in groups.pred[s]]  # in-degree of s fell
        for edge in touched:
            heapq.heappush(edges, edge)

    # Step 3: attach cheap leftovers to the neighbour they exchange the most bytes with.
    beta = cfg.beta_fraction * total
    roots = sorted(groups.members)
    while roots:
        r = heapq.heappop(roots)
        op = view(r) if r in groups.members else None
        if op is None or _apart(op) or operator_cost(op, cfg) >= beta:
            continue
        nbrs = [(b, o) for o, b in groups.succ[r].items()] + [(b, o) for o, b in groups.pred[r].items()]
        for _, other in sorted(nbrs, key=lambda t: (-t[0], t[1])):
            if _apart(view(other)):
                continue
            a, b = (r, other) if other in groups.succ[r] else (other, r)
            if not groups.creates_cycle(a, b):
                k = groups.union(r, other)
                for root in (k, *groups.succ[k], *groups.pred[k]):
                    heapq.heappush(roots, root)
                break
    return _rebuild(graph, groups)


def _rebuild(graph: OpGraph, groups: _Groups) -> OpGraph:
    """Fused operators in a topological order (the ready group of smallest root first),
    with inputs and sink outputs."""
    roots = sorted(groups.members)
    name = {r: groups.op(r).name for r in roots}
    ops: dict[int, Operator] = {}
    for r in roots:
        base = groups.op(r)
        # Output: the largest activation leaving the group (its sink's for a chain); a group
        # with no successor keeps its last member's output.
        out = max(groups.succ[r].values(), default=graph.ops[groups.members[r][-1]].out_bytes)
        inputs = tuple(sorted({name[u] for u in groups.pred[r]}, key=lambda n: graph.index[n.split("+")[0]]))
        ops[r] = replace(base, out_bytes=out, inputs=inputs)
    waiting = {r: len(groups.pred[r]) for r in roots}
    ready = [r for r in roots if not waiting[r]]
    order: list[int] = []
    while ready:
        r = heapq.heappop(ready)
        order.append(r)
        for s in groups.succ[r]:
            waiting[s] -= 1
            if not waiting[s]:
                heapq.heappush(ready, s)
    if len(order) != len(roots):  # pragma: no cover - merges are cycle-checked
        raise ValueError("fusion produced a cycle")
    fused = OpGraph(graph.model, tuple(ops[r] for r in order), _shared_by_groups(graph, groups, name))
    fused.validate()
    return fused


def _shared_by_groups(graph: OpGraph, groups: _Groups, name: dict[int, str]) -> tuple[SharedParameter, ...]:
    """``graph``'s shared parameters as its groups read them: each reader replaced by its
    group (the counting operator's group first, as its gradient bytes are there); a parameter
    whose readers all fell into one group is that group's own."""
    out: list[SharedParameter] = []
    for p in graph.shared:
        readers = list(dict.fromkeys(name[groups.find(graph.index[op])] for op in p.ops))
        if len(readers) > 1:
            out.append(replace(p, ops=tuple(readers)))
    return tuple(out)


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
