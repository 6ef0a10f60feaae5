"""Joint placement and bandwidth allocation (docs/search.md, "Device placement of operator groups").

Alternate until the makespan stops improving:

1. place the groups at the current pair rates (`place_heuristic` or `place_milp`), then
   improve the placement by the local search of `planner.placement.heuristic` scoring
   every candidate at the allocation of its own traffic (step 3), so moves that crowd a
   receiver's ingress or a sender's egress are charged for it;
2. the traffic matrix of that placement: bytes per ordered server pair per iteration
   (activations forward, their gradients backward);
3. per-destination allocation: each server splits its egress (the goodput of all its
   cables) among destinations in proportion to the bytes it sends them, keeping
   `RESERVED_SHARE` of it spread evenly so a pair without traffic today still has a rate
   the next placement can use; a destination whose ingress cables cannot take what its
   senders allocate scales those rates down to its ingress. On the network this is one HTB
   class per destination with a per-destination filter, the heavy classes spread over
   several cables by policy routing; where a pair's traffic takes one path only (a network
   without per-destination multipath, such as the emulator's static routes), ``pair_cap``
   bounds each pair at its path's bottleneck;
4. score the placement at its own allocation, keep the best, and place again at those
   rates while the makespan improves.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from contract.network import cable_capacities
from contract.physics import DEFAULT_MTU
from contract.plan import Plan

from .cost import Placement, TaskGraph, makespan
from .heuristic import local_search, place_heuristic

RESERVED_SHARE = 0.1  # egress share spread evenly over all destinations
IMPROVEMENT = 1e-6  # relative makespan gain that counts as "still improving"
DEFAULT_ROUNDS = 8

Solver = Callable[[TaskGraph, np.ndarray, float, float], Placement]


def traffic_matrix(tasks: TaskGraph, assignment: Sequence[int], servers: int) -> np.ndarray:
    """Bytes per iteration from server i to server j (both passes)."""
    traffic = np.zeros((servers, servers))
    for u, v, nbytes in tasks.edges:
        a, b = assignment[u], assignment[v]
        if a != b:
            traffic[a, b] += nbytes
            traffic[b, a] += nbytes
    return traffic


def plan_capacity(plan: Plan, mtu: int = DEFAULT_MTU) -> tuple[np.ndarray, np.ndarray]:
    """(pair rates, egress per server) of ``plan`` in bytes/s of TCP goodput: a pair's rate
    is the slowest cable on its route (what one flow gets alone), a server's egress the sum
    of its cables."""
    cable = cable_capacities(plan.links, mtu)
    egress = np.zeros(plan.servers)
    for (a, _b), capacity in cable.items():
        if a < plan.servers:
            egress[a] += capacity
    rates = np.full((plan.servers, plan.servers), np.inf)
    for s in range(plan.servers):
        for d in range(plan.servers):
            if s != d:
                path = plan.path(s, d)
                rates[s, d] = min(cable[(a, b)] for a, b in zip(path, path[1:]))
    return rates, egress


def allocate_rates(
    traffic: np.ndarray,
    egress: np.ndarray,
    ingress: np.ndarray | None = None,
    reserve: float = RESERVED_SHARE,
    pair_cap: np.ndarray | None = None,
) -> np.ndarray:
    """Per-pair rates: egress split by demand (step 3 of the module docstring), at most
    ``pair_cap`` per pair when given."""
    k = traffic.shape[0]
    ingress = egress if ingress is None else ingress
    rates = np.zeros((k, k))
    off = ~np.eye(k, dtype=bool)
    for s in range(k):
        sent = traffic[s].sum()
        even = np.where(off[s], 1.0 / max(k - 1, 1), 0.0)
        share = reserve * even + (1 - reserve) * (traffic[s] / sent if sent > 0 else even)
        rates[s] = egress[s] * share
    for d in range(k):
        arriving = rates[:, d].sum()
        if arriving > ingress[d]:
            rates[:, d] *= ingress[d] / arriving
    if pair_cap is not None:
        rates = np.minimum(rates, pair_cap)
    rates[~off] = np.inf
    return rates


@dataclass
class JointPlacement:
    placement: Placement
    rates: np.ndarray  # the allocation the placement runs with
    traffic: np.ndarray
    history: list[float] = field(default_factory=list)  # makespan after each round


def place_jointly(
    tasks: TaskGraph,
    rates: np.ndarray,
    egress: np.ndarray,
    memory_limit: float,
    solver: Solver = place_heuristic,
    time_limit: float = 60.0,
    max_rounds: int = DEFAULT_ROUNDS,
    ingress: np.ndarray | None = None,
    pair_cap: np.ndarray | None = None,
) -> JointPlacement:
    """Placement and per-destination allocation, alternated (module docstring); ``rates``
    are the pair rates of the first round (the network without allocation). A placement is
    always scored at its own allocation, which (unlike independent pair rates) charges
    several senders sharing a receiver's ingress, or a sender's egress. ``pair_cap`` bounds
    every pair's allocation (single-path networks: pass ``rates``)."""
    if max_rounds < 1:
        raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
    started = time.perf_counter()
    k = rates.shape[0]

    def allocation(assignment: Sequence[int]) -> np.ndarray:
        return allocate_rates(traffic_matrix(tasks, assignment, k), egress, ingress, pair_cap=pair_cap)

    placement = solver(tasks, rates, memory_limit, time_limit)
    history: list[float] = []
    best: JointPlacement | None = None
    for _ in range(max_rounds):
        placement = local_search(tasks, placement, allocation, memory_limit, time.perf_counter() + time_limit)
        allocated = allocation(placement.assignment)
        score = makespan(tasks, placement.assignment, placement.order, allocated)
        history.append(score)
        if best is not None and score >= best.placement.makespan * (1 - IMPROVEMENT):
            break
        placement.makespan = score
        best = JointPlacement(placement, allocated, traffic_matrix(tasks, placement.assignment, k), history)
        placement = solver(tasks, allocated, memory_limit, time_limit)
    assert best is not None  # the first round always sets it
    best.placement.method += "+allocation"
    best.placement.search_seconds = time.perf_counter() - started
    return best
