"""The placement cost model: one makespan function that scores every placer.

Inter-operator parallelism (docs/search.md, "Device placement of operator groups"): each group of a (fused) operator
graph runs on one server; a tensor crosses servers when producer and consumer live apart.
One training iteration is modelled as

- forward: group ``g`` takes ``forward[g]`` seconds on its server; it starts when its server
  is free and every input has arrived: ``end(p) + bytes(p, g) / rate[server(p)][server(g)]``
  for a producer ``p`` on another server (zero on the same server);
- a loss barrier: the backward pass starts when the last forward ends (every model of the
  zoo has a single sink, the loss reads it);
- backward: ``backward[g]`` = the group's backward FLOPs at the device rate (2 x forward for
  a zoo model, `planner.model.opgraph.Operator.backward_flops`), in the
  reverse direction: group ``g`` waits for the gradient of every consumer ``v``,
  ``end_b(v) + bytes(g, v) / rate[server(v)][server(g)]``.

``order`` is a topological order of the groups; each server runs its forward groups in that
order and its backward groups in the reverse order (as autograd does), so a placement is
(assignment, order) and its makespan is the end of the last backward group. Transfers are
pure delays (no sharing of a pair's rate between concurrent tensors, as in HEFT and the
thesis' MILP); `planner.cost.predict` adds the sharing when it predicts the schedule.

Memory per group: weights, gradients and two Adam moments (`MEMORY_COPIES_PER_PARAM` copies
of the parameters) plus the stashed output activation of the whole batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from contract.errors import UsageError
from contract.physics import compute_seconds

from ..model.opgraph import OpGraph

MEMORY_COPIES_PER_PARAM = 4  # weights + gradients + two Adam moments


class PlacementError(UsageError):
    """No placement satisfies the input (memory limit too small). Exit 2."""


@dataclass(frozen=True)
class TaskGraph:
    """A (fused) operator graph as the placer sees it: seconds, bytes and memory per group.

    Groups are numbered in the graph's topological order; ``edges`` are (producer, consumer,
    bytes of the activation per iteration); the gradient of the same size flows back."""

    names: tuple[str, ...]
    forward: tuple[float, ...]
    backward: tuple[float, ...]
    memory: tuple[float, ...]  # bytes
    param_bytes: tuple[int, ...]
    edges: tuple[tuple[int, int, float], ...]
    preds: tuple[tuple[tuple[int, float], ...], ...] = field(init=False, repr=False)
    succs: tuple[tuple[tuple[int, float], ...], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        preds: list[list[tuple[int, float]]] = [[] for _ in self.names]
        succs: list[list[tuple[int, float]]] = [[] for _ in self.names]
        for u, v, nbytes in self.edges:
            if not 0 <= u < v < len(self.names):
                raise ValueError(f"edge {u}->{v} does not follow the topological numbering")
            preds[v].append((u, nbytes))
            succs[u].append((v, nbytes))
        object.__setattr__(self, "preds", tuple(tuple(p) for p in preds))
        object.__setattr__(self, "succs", tuple(tuple(s) for s in succs))

    def __len__(self) -> int:
        return len(self.names)

    @property
    def sinks(self) -> list[int]:
        return [g for g in range(len(self)) if not self.succs[g]]


def task_graph(graph: OpGraph, batch: int, device_tflops: float) -> TaskGraph:
    """Seconds, bytes and memory of every group of ``graph`` for ``batch`` samples."""
    forward = [compute_seconds(op.flops, batch, device_tflops) for op in graph.ops]
    edges = [(p, v, float(graph.ops[p].out_bytes * batch)) for v, ps in enumerate(graph.preds) for p in ps]
    memory = [MEMORY_COPIES_PER_PARAM * op.param_bytes + op.out_bytes * batch for op in graph.ops]
    return TaskGraph(
        tuple(op.name for op in graph.ops),
        tuple(forward),
        tuple(compute_seconds(op.backward_flops, batch, device_tflops) for op in graph.ops),
        tuple(float(m) for m in memory),
        tuple(op.param_bytes for op in graph.ops),
        tuple(edges),
    )


def uniform_rates(servers: int, bytes_per_s: float) -> np.ndarray:
    """A pair-rate matrix where every ordered pair of servers gets ``bytes_per_s``."""
    rates = np.full((servers, servers), float(bytes_per_s))
    np.fill_diagonal(rates, np.inf)
    return rates


@dataclass
class Timeline:
    """Start and end of every group's forward and backward on its server."""

    f_start: list[float]
    f_end: list[float]
    b_start: list[float]
    b_end: list[float]
    critical: list[int]  # groups on a longest path (forward or backward), last first

    @property
    def makespan(self) -> float:
        return max(self.b_end, default=0.0)


def check_order(tasks: TaskGraph, order: Sequence[int]) -> None:
    """Raise ValueError unless ``order`` is a topological order of all groups."""
    pos = {g: i for i, g in enumerate(order)}
    if len(pos) != len(tasks) or set(pos) != set(range(len(tasks))):
        raise ValueError("order must list every group exactly once")
    for u, v, _ in tasks.edges:
        if pos[u] > pos[v]:
            raise ValueError(f"order puts {tasks.names[v]!r} before its input {tasks.names[u]!r}")


def timeline(tasks: TaskGraph, assignment: Sequence[int], order: Sequence[int], rates: np.ndarray) -> Timeline:
    """The semi-active schedule of (assignment, order): every task as early as possible."""
    n, k = len(tasks), rates.shape[0]
    r = rates.tolist()
    f_start, f_end, b_start, b_end = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n
    why: dict[tuple[str, int], tuple[str, int] | None] = {}  # what each task waited for
    free, last = [0.0] * k, [-1] * k
    for g in order:
        s = assignment[g]
        t, cause = free[s], (("f", last[s]) if last[s] >= 0 else None)
        for p, nbytes in tasks.preds[g]:
            sp = assignment[p]
            ready = f_end[p] + (0.0 if sp == s else nbytes / r[sp][s])
            if ready > t:
                t, cause = ready, ("f", p)
        f_start[g], f_end[g] = t, t + tasks.forward[g]
        free[s], last[s] = f_end[g], g
        why[("f", g)] = cause
    barrier = max(f_end, default=0.0)
    last_f = max(range(n), key=lambda g: f_end[g]) if n else -1
    free, last = [barrier] * k, [-1] * k
    for g in reversed(order):
        s = assignment[g]
        t, cause = free[s], (("b", last[s]) if last[s] >= 0 else ("f", last_f))
        for v, nbytes in tasks.succs[g]:
            sv = assignment[v]
            ready = b_end[v] + (0.0 if sv == s else nbytes / r[sv][s])
            if ready > t:
                t, cause = ready, ("b", v)
        b_start[g], b_end[g] = t, t + tasks.backward[g]
        free[s], last[s] = b_end[g], g
        why[("b", g)] = cause
    critical: list[int] = []
    node: tuple[str, int] | None = ("b", max(range(n), key=lambda g: b_end[g])) if n else None
    while node is not None:
        critical.append(node[1])
        node = why[node]
    return Timeline(f_start, f_end, b_start, b_end, critical)


def makespan(tasks: TaskGraph, assignment: Sequence[int], order: Sequence[int], rates: np.ndarray) -> float:
    """Iteration seconds of groups on ``assignment[g]`` run in ``order`` at pair ``rates``."""
    return timeline(tasks, assignment, order, rates).makespan


def server_memory(tasks: TaskGraph, assignment: Sequence[int], servers: int) -> list[float]:
    used = [0.0] * servers
    for g, s in enumerate(assignment):
        used[s] += tasks.memory[g]
    return used


def check_memory_feasible(tasks: TaskGraph, servers: int, memory_limit: float) -> None:
    """Raise PlacementError when no assignment can respect ``memory_limit`` bytes per server
    (a group larger than the limit, or more memory in total than the servers hold)."""
    gb = 1e9
    big = max(range(len(tasks)), key=lambda g: tasks.memory[g], default=None)
    if big is not None and tasks.memory[big] > memory_limit:
        raise PlacementError(
            f"memory limit {memory_limit / gb:.3g} GB per server is below group {tasks.names[big]!r}'s "
            f"{tasks.memory[big] / gb:.3g} GB"
        )
    total = sum(tasks.memory)
    if total > servers * memory_limit:
        raise PlacementError(
            f"memory limit {memory_limit / gb:.3g} GB per server: {servers} servers hold "
            f"{servers * memory_limit / gb:.3g} GB but the groups need {total / gb:.3g} GB"
        )


@dataclass
class Placement:
    """Groups on servers, their order, and the makespan `makespan` gives them."""

    assignment: tuple[int, ...]
    order: tuple[int, ...]
    makespan: float
    method: str
    search_seconds: float = 0.0
    optimal: bool = False  # proven optimal (MILP within its time limit)

    def to_dict(self, tasks: TaskGraph) -> dict:
        return {
            "method": self.method,
            "makespan_s": self.makespan,
            "search_s": self.search_seconds,
            "optimal": self.optimal,
            "groups": [{"name": tasks.names[g], "server": self.assignment[g]} for g in self.order],
        }
