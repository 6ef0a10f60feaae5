"""Topology kinds: from a scenario's cluster and a traffic demand to cables and routes.

`TOPOLOGY_BUILDERS` maps each ``[topology] kind`` of the scenario schema to its builder;
`plan_for_demand` runs the scenario's builder and assembles the `Plan` (links, routes,
summary, the strategy's placement). Builders (docs/algorithms.md section 2 and 8):

- ``topoopt``: TopologyFinder (TotientPerms rings + model-parallel matchings), routes by
  coin change on the circulant, else shortest paths;
- ``ring``: the +1 ring with d/2 parallel cables per neighbour pair;
- ``switch``: one port per server into a non-blocking switch (node n);
- ``expander``: a seeded random d-regular graph, shortest-path routes;
- ``torus``: a 2-D torus (d = 4), shortest-path routes;
- ``hierarchical``: a multi-dimensional network (planner.topology.hierarchical) whose per-server
  budget is split over the dimensions by LIBRA (planner.bandwidth.libra) for the strategy's
  traffic, equally, or by given fractions (docs/algorithms.md section 3).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from contract.plan import AllReduceGroup, Link, Placement, Plan, Routes, TrafficDemand

from .bandwidth.libra import allocate, model_seconds
from .scenario import Scenario, ScenarioError, _torus_shape
from .topology.baseline_graphs import expander_cables, ring_cables, ring_order, switch_cables, torus_cables
from .topology.finder import find_topology
from .topology.hierarchical import demand_workload, hierarchical_plan
from .topology.routing import circulant_hop_counts, coin_change_first_strides, hop_counts, next_hop_table
from .topology.summary import summarize_topology


@dataclass
class Topology:
    """What a builder decides: cables, routes, and the rings the AllReduce uses."""

    cables: list[tuple[int, int]]
    routes: Routes
    demand: TrafficDemand
    rings: tuple[tuple[int, ...], ...]
    strides: tuple[int, ...] = ()
    switches: int = 0
    link_gbps: float | None = None  # None: the scenario's link rate
    degree: int | None = None  # None: the scenario's degree
    notes: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    plan: Plan | None = None  # a builder whose cables differ in rate assembles the plan itself


def stride_orders(n: int, strides: list[int]) -> tuple[tuple[int, ...], ...]:
    """The server order of the p-ring for every stride p."""
    return tuple(tuple((i * p) % n for i in range(n)) for p in strides)


def _table_routes(n: int, cables: list[tuple[int, int]], ring_cables: int = 0) -> Routes:
    return Routes("table", table=tuple(map(tuple, next_hop_table(n, cables, ring_cables).tolist())))


def topoopt_topology(s: Scenario, demand: TrafficDemand) -> Topology:
    n, d = s.cluster.servers, s.cluster.degree
    topo = find_topology(n, d, demand, s.topology.degree_split, s.topology.stride_range)
    strides = tuple(topo.class_strides.get(n, []))
    groups = tuple(
        AllReduceGroup(g.members, g.bytes, tuple(topo.class_strides.get(len(g.members), []))) for g in demand.allreduce
    )
    notes = []
    if topo.swaps:
        notes.append(f"{topo.swaps} degree-preserving swap(s) made the topology connected")
    if topo.unmatched_ports:
        why = (
            f"{n} servers x {d} ports is odd, so no graph can use every port"
            if (n * d) % 2
            else "no model-parallel cable could be rewired to take them"
        )
        notes.append(f"{topo.unmatched_ports} port(s) left unused: {why}")
    routes = None
    if topo.ring_cables == len(topo.cables) and topo.class_strides:  # a circulant: coin change
        all_strides = [p for ps in topo.class_strides.values() for p in ps]
        try:
            routes = Routes("circulant", first_stride=tuple(coin_change_first_strides(n, all_strides)))
        except ValueError:
            routes = None
    return Topology(
        cables=topo.cables,
        routes=routes or _table_routes(n, topo.cables, topo.ring_cables),
        demand=TrafficDemand(groups, demand.mp),
        rings=stride_orders(n, list(strides)) if strides else (tuple(range(n)),),
        strides=strides,
        notes=notes,
        extra={
            "d_allreduce": topo.d_allreduce,
            "d_mp": topo.d_mp,
            "ring_cables": topo.ring_cables,  # the first ring_cables links; the rest are model-parallel matchings
            "class_strides": {str(k): v for k, v in topo.class_strides.items()},
        },
    )


def ring_topology(s: Scenario, demand: TrafficDemand) -> Topology:
    n = s.cluster.servers
    return Topology(
        cables=ring_cables(n, s.cluster.degree),
        routes=Routes("circulant", first_stride=tuple(coin_change_first_strides(n, [1]))),
        demand=demand,
        rings=stride_orders(n, [1]),
        strides=(1,),
    )


def switch_topology(s: Scenario, demand: TrafficDemand) -> Topology:
    n = s.cluster.servers
    rate = s.topology.switch_gbps or s.cluster.degree * s.cluster.link_gbps
    table = np.full((n + 1, n + 1), n, dtype=np.int32)
    table[n, :] = np.arange(n + 1)
    np.fill_diagonal(table, -1)
    return Topology(
        cables=switch_cables(n),
        routes=Routes("table", table=tuple(map(tuple, table.tolist()))),
        demand=demand,
        rings=(tuple(range(n)),),
        switches=1,
        link_gbps=rate,
        degree=1,
        notes=[f"one {rate:g} Gbps port per server into a non-blocking switch (node {n})"],
    )


def expander_topology(s: Scenario, demand: TrafficDemand) -> Topology:
    n = s.cluster.servers
    cables, used_seed = expander_cables(n, s.cluster.degree, s.topology.seed)
    return Topology(
        cables, _table_routes(n, cables), demand, (tuple(ring_order(n, cables)),), extra={"seed": used_seed}
    )


def torus_topology(s: Scenario, demand: TrafficDemand) -> Topology:
    n = s.cluster.servers
    a, b = _torus_shape(n)  # validated by the scenario loader
    cables = torus_cables(a, b)
    return Topology(cables, _table_routes(n, cables), demand, (tuple(ring_order(n, cables)),), extra={"shape": [a, b]})


def hierarchical_allocation(s: Scenario, demand: TrafficDemand) -> dict:
    """LIBRA's split of ``topology.budget_gbps`` for the strategy's traffic, the equal split,
    and the scenario's choice (``allocation``): per-dimension Gbit/s, shares and the model's
    communication seconds on the planned network (compute is not part of the split)."""
    t = s.topology
    dims = list(t.dims)
    libra = allocate(
        dims,
        demand_workload(dims, demand),
        t.budget_gbps,
        mode=t.schedule,
        objective=t.objective,
        price=t.price_per_gbps or None,
    )

    def split(shares) -> dict:
        gbps = [share * t.budget_gbps for share in shares]
        return {"shares": list(shares), "gbps": gbps, "model_s": model_seconds(libra.dimension_bytes, gbps, t.schedule)}

    named = {"libra": libra.shares, "equal": [1 / len(dims)] * len(dims)}
    chosen = named.get(t.allocation, t.allocation) if isinstance(t.allocation, str) else t.allocation
    return {
        "choice": t.allocation if isinstance(t.allocation, str) else "fractions",
        "schedule": t.schedule,
        "objective": t.objective,
        "budget_gbps": t.budget_gbps,
        "dimension_bytes": list(libra.dimension_bytes),
        **split(chosen),
        "libra": split(libra.shares),
        "equal": split(named["equal"]),
    }


def hierarchical_topology(s: Scenario, demand: TrafficDemand) -> Topology:
    t = s.topology
    allocation = hierarchical_allocation(s, demand)
    plan = hierarchical_plan(
        t.dims,
        t.blocks,
        t.budget_gbps,
        allocation["shares"],
        s.cluster.latency_us,
        demand,
        s.workload,
        s.parallelism.strategy,
    )
    plan = dataclasses.replace(plan, extra={**plan.extra, "schedule": t.schedule, "allocation": allocation})
    return Topology([], plan.routes, demand, (), plan=plan)


TOPOLOGY_BUILDERS: dict[str, Callable[[Scenario, TrafficDemand], Topology]] = {
    "topoopt": topoopt_topology,
    "ring": ring_topology,
    "switch": switch_topology,
    "expander": expander_topology,
    "torus": torus_topology,
    "hierarchical": hierarchical_topology,
}


def with_cable_rates(links: tuple[Link, ...], s: Scenario) -> tuple[Link, ...]:
    """``links`` with the scenario's ``[[cables]]`` rates applied (every parallel cable of the
    pair); an entry that names no cable of this plan is a one-line error."""
    if not s.cables:
        return links
    rates = {(min(c.a, c.b), max(c.a, c.b)): c.gbps for c in s.cables}
    present = {(min(link.a, link.b), max(link.a, link.b)) for link in links}
    for i, c in enumerate(s.cables):
        if (min(c.a, c.b), max(c.a, c.b)) not in present:
            raise ScenarioError(
                s.source, f"cables[{i}]", f"the {s.topology.kind} plan has no cable between servers {c.a} and {c.b}"
            )
    return tuple(
        dataclasses.replace(link, gbps=rates.get((min(link.a, link.b), max(link.a, link.b)), link.gbps))
        for link in links
    )


def plan_for_demand(s: Scenario, demand: TrafficDemand, placement: Placement | None = None) -> Plan:
    """The plan of the scenario's topology kind for ``demand``, the traffic of the strategy
    ``placement`` describes (empty: data parallel)."""
    n = s.cluster.servers
    topo = TOPOLOGY_BUILDERS[s.topology.kind](s, demand)
    if topo.plan is not None:
        return dataclasses.replace(topo.plan, placement=placement or Placement())
    rate = float(topo.link_gbps if topo.link_gbps is not None else s.cluster.link_gbps)
    links = with_cable_rates(tuple(Link(a, b, rate) for a, b in topo.cables), s)
    plan = Plan(
        servers=n,
        degree=topo.degree if topo.degree is not None else s.cluster.degree,
        link_gbps=rate,
        latency_us=s.cluster.latency_us,
        topology=s.topology.kind,
        links=links,
        routes=topo.routes,
        demand=topo.demand,
        summary=summarize_topology(np.zeros((1, 1)), 1, []),
        workload=s.workload,
        strategy=s.parallelism.strategy,
        switches=topo.switches,
        strides=topo.strides,
        rings=topo.rings,
        notes=tuple(topo.notes),
        placement=placement or Placement(),
        extra=topo.extra,
    )
    if topo.routes.kind == "circulant":
        hops = circulant_hop_counts(topo.routes.first_stride)
    else:
        hops = hop_counts(plan.next_hop, n)
    direct = None if not topo.switches else np.ones((n, n), dtype=bool)  # the switch relays nothing
    return dataclasses.replace(plan, summary=summarize_topology(hops, n, list(links), topo.switches, direct))
