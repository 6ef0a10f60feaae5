"""Placement (docs/algorithms.md section 4): MILP against brute force, memory limits, the
heuristic against the baselines, and the placement schedule against the simulator and the
predictor."""

import itertools

import numpy as np
import pytest

from planner.placement import (
    TaskGraph,
    makespan,
    place_milp,
)
from planner.placement.cost import server_memory

GB = 1e9
BATCH, TFLOPS = 64, 125.0


def random_dag(seed: int, n: int) -> TaskGraph:
    """A random DAG with one sink (the loss), seconds ~ 1..10, transfers comparable."""
    rng = np.random.default_rng(seed)
    edges = []
    for v in range(1, n):
        preds = {int(rng.integers(0, v))} | {u for u in range(v) if rng.random() < 0.25}
        edges += [(u, v, float(rng.uniform(1, 8))) for u in sorted(preds)]
    for u in range(n - 1):  # every group reaches the sink
        if not any(e[0] == u for e in edges):
            edges.append((u, n - 1, float(rng.uniform(1, 8))))
    forward = tuple(float(rng.uniform(1, 10)) for _ in range(n))
    return TaskGraph(
        tuple(f"g{i}" for i in range(n)),
        forward,
        tuple(2 * f for f in forward),
        tuple(float(rng.uniform(1, 3)) for _ in range(n)),
        tuple(0 for _ in range(n)),
        tuple(sorted(edges, key=lambda e: (e[1], e[0]))),
    )


def random_rates(seed: int, k: int) -> np.ndarray:
    rates = np.random.default_rng(seed + 1000).uniform(0.5, 2.0, size=(k, k))
    np.fill_diagonal(rates, np.inf)
    return rates


def topological_orders(tasks: TaskGraph):
    indeg = [len(p) for p in tasks.preds]

    def rec(prefix, indeg):
        if len(prefix) == len(tasks):
            yield tuple(prefix)
            return
        for g in range(len(tasks)):
            if indeg[g] == 0 and g not in prefix:
                nxt = list(indeg)
                nxt[g] = -1
                for v, _ in tasks.succs[g]:
                    nxt[v] -= 1
                yield from rec(prefix + [g], nxt)

    yield from rec([], indeg)


def brute_force(tasks: TaskGraph, rates: np.ndarray, memory_limit: float) -> float:
    """Minimum of the cost model over every assignment and every per-server order: a
    topological order fixes the per-server orders, and distinct orders that agree on every
    server give the same makespan, so orders are deduplicated per assignment."""
    k = rates.shape[0]
    orders = list(topological_orders(tasks))
    best = np.inf
    for assignment in itertools.product(range(k), repeat=len(tasks)):
        if max(server_memory(tasks, assignment, k)) > memory_limit:
            continue
        seen = set()
        for order in orders:
            key = tuple(tuple(g for g in order if assignment[g] == s) for s in range(k))
            if key in seen:
                continue
            seen.add(key)
            best = min(best, makespan(tasks, assignment, order, rates))
    return best


@pytest.mark.parametrize("seed,n", [(0, 5), (1, 6), (2, 6), (3, 7), (4, 7)])
def test_milp_equals_brute_force(seed, n):
    tasks, rates = random_dag(seed, n), random_rates(seed, 3)
    limit = 0.5 * sum(tasks.memory)  # binds: no server can take everything
    milp = place_milp(tasks, rates, limit, time_limit=50)
    assert milp.optimal
    assert max(server_memory(tasks, milp.assignment, 3)) <= limit
    assert milp.makespan == pytest.approx(brute_force(tasks, rates, limit), rel=1e-6)
