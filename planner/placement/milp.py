"""Exact placement: a mixed-integer linear program solved by HiGHS (scipy.optimize.milp).

The model of `planner.placement.cost` as an MILP (the thesis' formulation, docs/algorithms.md
section 4), for graphs of a few dozen groups:

- ``x[g,s]`` binary: group ``g`` on server ``s``; ``sum_s x[g,s] = 1``;
  memory ``sum_g mem[g] x[g,s] <= limit``;
- start times ``F[g]`` (forward), ``B[g]`` (backward), the loss barrier ``T`` and the
  makespan ``C``: ``T >= F[g] + f[g]``, ``B[g] >= T``, ``C >= B[g] + b[g]``; minimize ``C``;
- precedence with communication: for an edge (u, v) and servers a != b, with
  ``d = bytes / rate[a][b]``: ``F[v] >= F[u] + f[u] + d - d (2 - x[u,a] - x[v,b])``, which is
  ``F[v] >= F[u] + f[u]`` unless u is on a and v on b (a big-M of exactly ``d``, the
  tightest valid one); backward likewise with ``rate[b][a]``;
- disjunctive order on a server, only for pairs with no path between them (a path already
  orders them): ``w[i,j] >= x[i,s] + x[j,s] - 1`` (same server), ``y[i,j]`` binary (i first
  in the forward pass, hence last in the backward) and, with the horizon ``H`` (all compute
  plus every transfer at the slowest rate, a bound on any semi-active schedule's makespan):
  ``F[j] >= F[i] + f[i] - H (1 - y) - H (1 - w)``, ``F[i] >= F[j] + f[j] - H y - H (1 - w)``,
  and the mirrored pair on ``B``.

The solution's assignment and forward order are re-scored with `cost.makespan`, so the MILP
and the heuristic are compared on the same function.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from .cost import Placement, PlacementError, TaskGraph, check_memory_feasible, makespan

MILP_STATUS_INFEASIBLE = 2  # scipy.optimize.milp: "the problem is infeasible"


def _ancestors(tasks: TaskGraph) -> list[set[int]]:
    anc: list[set[int]] = [set() for _ in range(len(tasks))]
    for v in range(len(tasks)):
        for u, _ in tasks.preds[v]:
            anc[v] |= anc[u] | {u}
    return anc


def place_milp(tasks: TaskGraph, rates: np.ndarray, memory_limit: float, time_limit: float = 60.0) -> Placement:
    """The makespan-optimal placement (``optimal`` False when ``time_limit`` seconds ran out
    first: the best solution found is returned)."""
    started = time.perf_counter()
    n, k = len(tasks), rates.shape[0]
    check_memory_feasible(tasks, k, memory_limit)
    anc = _ancestors(tasks)
    pairs = [(i, j) for j in range(n) for i in range(j) if i not in anc[j]]
    off_diag = rates[~np.eye(k, dtype=bool)] if k > 1 else np.array([np.inf])
    slowest = float(off_diag.min())
    horizon = sum(tasks.forward) + sum(tasks.backward) + sum(2 * b / slowest for _, _, b in tasks.edges) + 1.0

    # variable layout
    def x(g: int, s: int) -> int:
        return g * k + s

    y0 = n * k
    w0 = y0 + len(pairs)
    f0, b0 = w0 + len(pairs), w0 + len(pairs) + n
    t_var, c_var = b0 + n, b0 + n + 1
    nvar = c_var + 1

    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lo: list[float] = []
    hi: list[float] = []

    def row(terms: list[tuple[int, float]], low: float, high: float = np.inf) -> None:
        r = len(lo)
        for c, v in terms:
            rows.append(r)
            cols.append(c)
            vals.append(v)
        lo.append(low)
        hi.append(high)

    for g in range(n):
        row([(x(g, s), 1.0) for s in range(k)], 1.0, 1.0)
        row([(t_var, 1.0), (f0 + g, -1.0)], tasks.forward[g])
        row([(b0 + g, 1.0), (t_var, -1.0)], 0.0)
        row([(c_var, 1.0), (b0 + g, -1.0)], tasks.backward[g])
    for s in range(k):
        row([(x(g, s), tasks.memory[g]) for g in range(n)], -np.inf, memory_limit)
    for u, v, nbytes in tasks.edges:
        row([(f0 + v, 1.0), (f0 + u, -1.0)], tasks.forward[u])
        row([(b0 + u, 1.0), (b0 + v, -1.0)], tasks.backward[v])
        for a in range(k):
            for b in range(k):
                if a == b:
                    continue
                d = nbytes / rates[a, b]  # forward: u on a sends to v on b
                row([(f0 + v, 1.0), (f0 + u, -1.0), (x(u, a), -d), (x(v, b), -d)], tasks.forward[u] - d)
                d = nbytes / rates[b, a]  # backward: v on b sends to u on a
                row([(b0 + u, 1.0), (b0 + v, -1.0), (x(u, a), -d), (x(v, b), -d)], tasks.backward[v] - d)
    big = horizon
    for p, (i, j) in enumerate(pairs):
        y, w = y0 + p, w0 + p
        for s in range(k):
            row([(w, 1.0), (x(i, s), -1.0), (x(j, s), -1.0)], -1.0)
        # y = 1: i before j forward, after j backward; y = 0: the other way round
        row([(f0 + j, 1.0), (f0 + i, -1.0), (y, -big), (w, -big)], tasks.forward[i] - 2 * big)
        row([(b0 + i, 1.0), (b0 + j, -1.0), (y, -big), (w, -big)], tasks.backward[j] - 2 * big)
        row([(f0 + i, 1.0), (f0 + j, -1.0), (y, big), (w, -big)], tasks.forward[j] - big)
        row([(b0 + j, 1.0), (b0 + i, -1.0), (y, big), (w, -big)], tasks.backward[i] - big)

    matrix = coo_matrix((vals, (rows, cols)), shape=(len(lo), nvar)).tocsr()
    integrality = np.zeros(nvar)
    integrality[:w0] = 1  # x and y binary; w only needs to reach 1 when x puts i, j together
    upper = np.full(nvar, horizon)
    upper[: w0 + len(pairs)] = 1.0
    cost = np.zeros(nvar)
    cost[c_var] = 1.0
    res = milp(
        cost,
        constraints=LinearConstraint(matrix, lo, hi),
        integrality=integrality,
        bounds=Bounds(np.zeros(nvar), upper),
        options={"time_limit": float(time_limit)},
    )
    if res.status == MILP_STATUS_INFEASIBLE:
        raise PlacementError(
            f"memory limit {memory_limit / 1e9:.3g} GB per server: no assignment of the groups to {k} servers fits"
        )
    if res.x is None:
        raise PlacementError(f"MILP found no placement within its time limit of {time_limit:g} s; raise the limit")
    sol = res.x
    assignment = tuple(int(np.argmax([sol[x(g, s)] for s in range(k)])) for g in range(n))
    order = tuple(sorted(range(n), key=lambda g: (round(sol[f0 + g], 12), g)))
    order = _repair_order(tasks, order)
    return Placement(
        assignment,
        order,
        makespan(tasks, assignment, order, rates),
        "milp",
        time.perf_counter() - started,
        optimal=res.status == 0,
    )


def _repair_order(tasks: TaskGraph, order: tuple[int, ...]) -> tuple[int, ...]:
    """The topological order closest to ``order`` (start times tied by solver tolerance)."""
    rank = {g: i for i, g in enumerate(order)}
    indeg = [len(p) for p in tasks.preds]
    ready = sorted((rank[g], g) for g in range(len(tasks)) if indeg[g] == 0)
    out: list[int] = []
    while ready:
        _, g = ready.pop(0)
        out.append(g)
        for v, _ in tasks.succs[g]:
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append((rank[v], v))
                ready.sort()
    return tuple(out)
