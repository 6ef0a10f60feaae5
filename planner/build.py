"""From a validated `Scenario` to a complete `Plan`: strategy traffic, topology, routes.

This is the planner's front door (`planner.build_plan`). The search strategy
(``[parallelism] strategy = "search"``) is delegated to `planner.search` when present.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from contract.plan import AllReduceGroup, Link, Plan, Routes, TrafficDemand

from .baselines import expander_cables, ring_cables, ring_order, switch_cables, torus_cables
from .routing import circulant_hop_counts, coin_change_first_strides, hop_counts, next_hop_table
from .scenario import Scenario, _torus_shape
from .summary import summarize
from .topology_finder import find_topology
from .traffic import strategy_demand
from .zoo import get_model


def scenario_demand(s: Scenario) -> tuple[TrafficDemand, dict]:
    """Traffic demand of the scenario's strategy, and a note of how it was obtained."""
    model = get_model(s.workload.model)
    n = s.cluster.servers
    if s.parallelism.strategy == "search":
        from .search import search_strategy  # optional module: the MCMC search

        return search_strategy(s)
    demand, placement = strategy_demand(
        model, n, s.parallelism.strategy, s.workload.batch_per_server, s.parallelism.mp_degree
    )
    return demand, {"tables": placement.tables, "sharded": list(placement.sharded), "mp_degree": placement.mp_degree}


def _ring_orders(n: int, strides: list[int]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple((i * p) % n for i in range(n)) for p in strides)


def build_plan(s: Scenario, demand: TrafficDemand | None = None) -> Plan:
    """Plan the scenario's job on its topology kind (``demand`` overrides the strategy's)."""
    n, d, gbps = s.cluster.servers, s.cluster.degree, s.cluster.link_gbps
    kind = s.topology.kind
    placement: dict = {}
    if demand is None:
        demand, placement = scenario_demand(s)
    notes: list[str] = []
    extra: dict = {"placement": placement} if placement else {}
    switches = 0
    strides: tuple[int, ...] = ()
    rings: tuple[tuple[int, ...], ...] = ((tuple(range(n))),)
    link_rate = gbps
    degree = d

    if kind == "topoopt":
        topo = find_topology(n, d, demand, s.topology.degree_split)
        cables = topo.cables
        strides = tuple(topo.class_strides.get(n, []))
        groups = []
        for g in demand.allreduce:
            groups.append(AllReduceGroup(g.members, g.bytes, tuple(topo.class_strides.get(len(g.members), []))))
        demand = TrafficDemand(tuple(groups), demand.mp)
        if strides:
            rings = _ring_orders(n, list(strides))
        extra.update(
            d_allreduce=topo.d_allreduce,
            d_mp=topo.d_mp,
            class_strides={str(k): v for k, v in topo.class_strides.items()},
        )
        if topo.swaps:
            notes.append(f"{topo.swaps} degree-preserving swap(s) made the topology connected")
        if topo.unmatched_ports:
            why = (
                f"{n} servers x {d} ports is odd, so no graph can use every port"
                if (n * d) % 2
                else "no model-parallel cable could be rewired to take them"
            )
            notes.append(f"{topo.unmatched_ports} port(s) left unused: {why}")
        circulant = topo.ring_cables == len(cables) and bool(topo.class_strides)
        all_strides = [p for ps in topo.class_strides.values() for p in ps]
        if circulant:
            try:
                routes = Routes("circulant", first_stride=tuple(coin_change_first_strides(n, all_strides)))
            except ValueError:
                circulant = False
        if not circulant:
            routes = Routes("table", table=tuple(map(tuple, next_hop_table(n, cables, topo.ring_cables).tolist())))
    elif kind == "ring":
        cables = ring_cables(n, d)
        routes = Routes("circulant", first_stride=tuple(coin_change_first_strides(n, [1])))
        strides = (1,)
        rings = _ring_orders(n, [1])
    elif kind == "switch":
        switches = 1
        link_rate = s.topology.switch_gbps or d * gbps
        degree = 1
        cables = switch_cables(n)
        table = np.full((n + 1, n + 1), n, dtype=np.int32)
        table[n, :] = np.arange(n + 1)
        np.fill_diagonal(table, -1)
        routes = Routes("table", table=tuple(map(tuple, table.tolist())))
        notes.append(f"one {link_rate:g} Gbps port per server into a non-blocking switch (node {n})")
    elif kind == "expander":
        cables, used_seed = expander_cables(n, d, s.topology.seed)
        extra["seed"] = used_seed
        rings = (tuple(ring_order(n, cables)),)
        routes = Routes("table", table=tuple(map(tuple, next_hop_table(n, cables).tolist())))
    elif kind == "torus":
        a, b = _torus_shape(n)  # validated by the scenario loader
        cables = torus_cables(a, b)
        extra["shape"] = [a, b]
        rings = (tuple(ring_order(n, cables)),)
        routes = Routes("table", table=tuple(map(tuple, next_hop_table(n, cables).tolist())))
    else:  # pragma: no cover - the scenario loader rejects unknown kinds
        raise ValueError(f"unknown topology kind {kind!r}")

    links = tuple(Link(a, b, float(link_rate)) for a, b in cables)
    plan = Plan(
        servers=n,
        degree=degree,
        link_gbps=float(link_rate),
        latency_us=s.cluster.latency_us,
        topology=kind,
        links=links,
        routes=routes,
        demand=demand,
        summary=summarize(np.zeros((1, 1)), 1, []),
        model=s.workload.model,
        strategy=s.parallelism.strategy,
        switches=switches,
        strides=strides,
        rings=rings,
        notes=tuple(notes),
        extra=extra,
    )
    if routes.kind == "circulant":
        hops = circulant_hop_counts(routes.first_stride)
    else:
        hops = hop_counts(plan.next_hop, n)
    direct = _direct_matrix(n, switches, cables)
    summary = summarize(hops, n, list(links), switches, direct if switches else None)
    return dataclasses.replace(plan, summary=summary)


def _direct_matrix(n: int, switches: int, cables: list[tuple[int, int]]) -> np.ndarray:
    direct = np.zeros((n, n), dtype=bool)
    if switches:
        direct[:] = True  # a non-blocking switch relays nothing through servers
        return direct
    for a, b in cables:
        direct[a, b] = direct[b, a] = True
    return direct
