"""Heuristic placement for large graphs: HEFT list scheduling plus a local search.

1. HEFT (Topcuoglu, Hariri and Wu, IEEE TPDS 2002): the upward rank of a group is its
   forward + backward seconds plus the largest (mean transfer time + rank) over its
   consumers, the transfer counted twice (activation forward, gradient backward) at the
   mean pair rate. Groups are taken in decreasing rank (a topological order, by Kahn's
   algorithm with the rank as priority); each goes to the server where it would finish
   first, a transfer from a producer on another server costing its time at that pair's
   rate, among the servers with memory left for it.
2. Local search on the model of `planner.placement.cost`: the search starts from the best
   of HEFT, the baselines (so it is never worse than they are) and the contiguous partition
   over as few servers as the memory allows (no transfers where the network is slow for
   the model: inter-operator parallelism without pipelining only pays where parallel
   branches compute longer than their tensors take to cross) and repeats, while the
   makespan improves and ``time_limit`` allows, first-improvement moves of a group on the
   critical path to another server, then swaps of such a group with a group of another
   server, then merges of all groups of one server into another (a single move cannot
   undo spreading parallel branches whose transfers cost more than they save). Every
   candidate is scored by `cost.makespan`.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence

import numpy as np

from .baselines import contiguous_partition, round_robin
from .cost import (
    Placement,
    PlacementError,
    TaskGraph,
    check_memory_feasible,
    makespan,
    server_memory,
    timeline,
)

IMPROVEMENT = 1e-9  # relative makespan gain a move must bring to be taken

RatesOf = Callable[[Sequence[int]], np.ndarray]


def upward_ranks(tasks: TaskGraph, rates: np.ndarray) -> list[float]:
    k = rates.shape[0]
    off = rates[~np.eye(k, dtype=bool)] if k > 1 else np.array([np.inf])
    mean_rate = float(np.mean(off))
    rank = [0.0] * len(tasks)
    for g in reversed(range(len(tasks))):
        tail = max((2 * b / mean_rate + rank[v] for v, b in tasks.succs[g]), default=0.0)
        rank[g] = tasks.forward[g] + tasks.backward[g] + tail
    return rank


def priority_order(tasks: TaskGraph, priority: list[float]) -> tuple[int, ...]:
    """Kahn's topological order taking the highest-priority ready group first."""
    indeg = [len(p) for p in tasks.preds]
    ready = [(-priority[g], g) for g in range(len(tasks)) if indeg[g] == 0]
    heapq.heapify(ready)
    out: list[int] = []
    while ready:
        _, g = heapq.heappop(ready)
        out.append(g)
        for v, _ in tasks.succs[g]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(ready, (-priority[v], v))
    return tuple(out)


def heft(tasks: TaskGraph, rates: np.ndarray, memory_limit: float) -> Placement:
    started = time.perf_counter()
    k = rates.shape[0]
    order = priority_order(tasks, upward_ranks(tasks, rates))
    r = rates.tolist()
    assignment = [0] * len(tasks)
    end = [0.0] * len(tasks)
    free = [0.0] * k
    used = [0.0] * k
    for g in order:
        best: tuple[float, float, int] | None = None
        work = tasks.forward[g] + tasks.backward[g]
        for s in range(k):
            if used[s] + tasks.memory[g] > memory_limit:
                continue
            t = free[s]
            for p, nbytes in tasks.preds[g]:
                sp = assignment[p]
                t = max(t, end[p] + (0.0 if sp == s else 2 * nbytes / r[sp][s]))
            cand = (t + work, used[s], s)
            if best is None or cand < best:
                best = cand
        if best is None:
            raise PlacementError(
                f"memory limit {memory_limit / 1e9:.3g} GB per server: HEFT found no server for "
                f"group {tasks.names[g]!r}"
            )
        end[g], _, s = best
        assignment[g] = s
        free[s] = end[g]
        used[s] += tasks.memory[g]
    a = tuple(assignment)
    return Placement(a, order, makespan(tasks, a, order, rates), "heft", time.perf_counter() - started)


def local_search(
    tasks: TaskGraph,
    start: Placement,
    rates: np.ndarray | RatesOf,
    memory_limit: float,
    deadline: float,
) -> Placement:
    """Moves and swaps of critical groups while the makespan improves (see module docstring).

    ``rates`` is the pair-rate matrix, or a function giving the rates an assignment runs at
    (joint placement: the allocation of its own traffic)."""
    rates_of: RatesOf = rates if callable(rates) else (lambda _a, fixed=rates: fixed)
    k = rates_of(start.assignment).shape[0]

    def score(a: Sequence[int]) -> float:
        return makespan(tasks, a, order, rates_of(a))

    assignment = list(start.assignment)
    order = start.order
    best = score(assignment)
    used = server_memory(tasks, assignment, k)
    improved = True
    while improved and time.perf_counter() < deadline:
        improved = False
        critical = list(dict.fromkeys(timeline(tasks, assignment, order, rates_of(assignment)).critical))
        for g in critical:
            if improved or time.perf_counter() >= deadline:
                break
            home = assignment[g]
            for s in range(k):  # move g to s
                if s == home or used[s] + tasks.memory[g] > memory_limit:
                    continue
                assignment[g] = s
                new = score(assignment)
                if new < best * (1 - IMPROVEMENT):
                    best, improved = new, True
                    used[home] -= tasks.memory[g]
                    used[s] += tasks.memory[g]
                    break
                assignment[g] = home
            if improved:
                break
            for h in range(len(tasks)):  # swap g with h of another server
                if time.perf_counter() >= deadline:
                    break
                s = assignment[h]
                if s == home:
                    continue
                delta = tasks.memory[h] - tasks.memory[g]
                if used[home] + delta > memory_limit or used[s] - delta > memory_limit:
                    continue
                assignment[g], assignment[h] = s, home
                new = score(assignment)
                if new < best * (1 - IMPROVEMENT):
                    best, improved = new, True
                    used[home] += delta
                    used[s] -= delta
                    break
                assignment[g], assignment[h] = home, s
        if not improved:
            improved, best = _merge_servers(assignment, k, score, memory_limit, used, best)
    return Placement(tuple(assignment), order, best, "heft+local", start.search_seconds)


def _merge_servers(
    assignment: list[int],
    k: int,
    score: Callable[[Sequence[int]], float],
    memory_limit: float,
    used: list[float],
    best: float,
) -> tuple[bool, float]:
    """Move every group of one server to another when that shortens the makespan (first
    improvement); updates ``assignment`` and ``used`` in place."""
    for src in range(k):
        moved = [g for g, s in enumerate(assignment) if s == src]
        if not moved:
            continue
        for dst in range(k):
            if dst == src or used[dst] + used[src] > memory_limit:
                continue
            for g in moved:
                assignment[g] = dst
            new = score(assignment)
            if new < best * (1 - IMPROVEMENT):
                used[dst] += used[src]
                used[src] = 0.0
                return True, new
            for g in moved:
                assignment[g] = src
    return False, best


def place_heuristic(tasks: TaskGraph, rates: np.ndarray, memory_limit: float, time_limit: float = 60.0) -> Placement:
    """HEFT, then the local search from the best of HEFT and the baselines."""
    started = time.perf_counter()
    k = rates.shape[0]
    check_memory_feasible(tasks, k, memory_limit)
    candidates = [heft(tasks, rates, memory_limit)]
    fewest = max(1, min(k, math.ceil(sum(tasks.memory) / memory_limit)))
    for baseline, servers in ((round_robin, k), (contiguous_partition, k), (contiguous_partition, fewest)):
        try:
            candidate = baseline(tasks, rates[:servers, :servers], memory_limit)
        except PlacementError:
            continue  # a baseline that cannot fit the memory is no starting point
        candidate.makespan = makespan(tasks, candidate.assignment, candidate.order, rates)
        candidates.append(candidate)
    start = min(candidates, key=lambda p: p.makespan)
    result = local_search(tasks, start, rates, memory_limit, started + time_limit)
    result.search_seconds = time.perf_counter() - started
    return result
