"""Baseline placers and the data-parallel reference time.

- Round robin: groups in topological order go to servers 0, 1, ..., k-1, 0, ... (the next
  server with memory left when one is full).
- Memory-balanced contiguous partition (a pipeline split, as GPipe cuts a model into
  stages): the topological order cut into k consecutive blocks whose memory is as even as
  the cut points allow (the block boundary falls where the running memory sum crosses
  i / k of the total).
- Data parallelism: every server runs the whole model on 1/k of the batch and the gradients
  are ring-AllReduced, ``2 (k - 1) / k x parameter bytes`` at the slowest ring hop (Patarasuk
  and Yuan 2009); a reference figure, memory not checked (each server holds all weights).
"""

from __future__ import annotations

import numpy as np

from .cost import Placement, PlacementError, TaskGraph, check_memory_feasible, makespan


def round_robin(tasks: TaskGraph, rates: np.ndarray, memory_limit: float) -> Placement:
    k = rates.shape[0]
    check_memory_feasible(tasks, k, memory_limit)
    used = [0.0] * k
    assignment = [0] * len(tasks)
    server = 0
    for g in range(len(tasks)):
        for step in range(k):
            s = (server + step) % k
            if used[s] + tasks.memory[g] <= memory_limit:
                break
        else:
            raise PlacementError(
                f"memory limit {memory_limit / 1e9:.3g} GB per server: round robin found no server "
                f"for group {tasks.names[g]!r}"
            )
        assignment[g] = s
        used[s] += tasks.memory[g]
        server = (s + 1) % k
    order = tuple(range(len(tasks)))
    a = tuple(assignment)
    return Placement(a, order, makespan(tasks, a, order, rates), "round-robin")


def contiguous_partition(tasks: TaskGraph, rates: np.ndarray, memory_limit: float) -> Placement:
    k = rates.shape[0]
    check_memory_feasible(tasks, k, memory_limit)
    total = sum(tasks.memory)
    assignment = [0] * len(tasks)
    used = [0.0] * k
    running = 0.0
    for g in range(len(tasks)):
        s = min(k - 1, int(running / total * k)) if total > 0 else g * k // len(tasks)
        s = max(s, assignment[g - 1] if g else 0)  # blocks stay contiguous
        while s < k - 1 and used[s] + tasks.memory[g] > memory_limit:
            s += 1
        if used[s] + tasks.memory[g] > memory_limit:
            raise PlacementError(
                f"memory limit {memory_limit / 1e9:.3g} GB per server: no contiguous partition into {k} blocks fits"
            )
        assignment[g] = s
        used[s] += tasks.memory[g]
        running += tasks.memory[g]
    order = tuple(range(len(tasks)))
    a = tuple(assignment)
    return Placement(a, order, makespan(tasks, a, order, rates), "contiguous")


def data_parallel_seconds(tasks: TaskGraph, rates: np.ndarray) -> float:
    """Iteration seconds of data parallelism over the k servers of ``rates`` (ring order
    0, 1, ..., k-1), compute and AllReduce not overlapped."""
    k = rates.shape[0]
    compute = (sum(tasks.forward) + sum(tasks.backward)) / k
    if k == 1:
        return compute
    slowest = min(float(rates[s, (s + 1) % k]) for s in range(k))
    return compute + 2 * (k - 1) / k * sum(tasks.param_bytes) / slowest
