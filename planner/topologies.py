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
  traffic, equally, or by given fractions (docs/algorithms.md section 3);
- ``file``: the cables of a cabling file (planner.topology.cabling_file, read with the
  scenario), each at its own rate; routed by the routes file, by coin change when the cables
  are a circulant (as TopoOpt routes them), else by shortest paths; the AllReduce rides the
  circulant's stride rings or a Hamiltonian ring, and packs spanning trees where there is
  none (docs/topologies.md).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from math import gcd

import numpy as np

from contract.plan import AllReduceGroup, Link, Placement, Plan, Routes, TrafficDemand

from .bandwidth.libra import allocate, model_seconds
from .scenario import Scenario, ScenarioError, _torus_shape
from .topology.baseline_graphs import expander_cables, ring_cables, ring_order, switch_cables, torus_cables
from .topology.cabling_file import Cabling, circulant_strides, default_routes, hamiltonian_ring
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
    gbps: tuple[float, ...] = ()  # each cable's own rate (a cabling file); empty: all at link_gbps
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


RING_NOTE_SERVERS = 16  # a file plan's note shows its ring's first servers


def file_topology(s: Scenario, demand: TrafficDemand) -> Topology:
    """The cables of the scenario's cabling file, in its order, at their own rates. Routes:
    the routes file's; else, when the cables are a circulant (`circulant_strides`: a TopoOpt
    plan written out and read back), coin change over its strides, as `topoopt_topology`
    routes one; else shortest paths (`default_routes`). Rings: the circulant's stride rings
    (strides coprime with n), else one Hamiltonian ring (`hamiltonian_ring`; the AllReduce
    runs it both ways), else none, and the full-group AllReduce packs spanning trees
    (planner.collectives.from_plan). The plan names no file, so the same cables written as
    CSV, JSON or GraphML give the same plan."""
    if s.cabling is None:  # the scenario loader reads the file for kind "file"
        raise ValueError("a file topology needs the scenario's cabling (load_scenario reads it)")
    cabling = s.cabling.cabling
    n = cabling.servers
    cables = cabling.cable_pairs()
    parallel = len(cables) - len({frozenset(pair) for pair in cables})
    rates = sorted(set(cabling.gbps))
    notes = [
        f"cables from the scenario's cabling file: {len(cables)} cables"
        + (f" ({parallel} parallel)" if parallel else "")
        + (f", {rates[0]:g} .. {rates[-1]:g} Gbps" if len(rates) > 1 else f", {rates[0]:g} Gbps each")
    ]
    strides = _wired_strides(cabling)
    ring_strides = _group_strides(strides, n, n)
    routes = None
    if s.cabling.routes is not None:
        routes = Routes("table", table=s.cabling.routes)
        notes.append("routes from the scenario's routes file")
    elif strides:
        try:
            routes = Routes("circulant", first_stride=tuple(coin_change_first_strides(n, list(strides))))
            notes.append(f"a circulant of strides {', '.join(f'±{p}' for p in strides)}: routed by coin change")
        except ValueError:
            routes = None
    if routes is None:
        routes = Routes("table", table=tuple(map(tuple, default_routes(cabling).tolist())))
        notes.append("routes: shortest paths, one per pair")
    groups = demand.allreduce
    if ring_strides:
        rings = stride_orders(n, list(ring_strides))
        groups = tuple(
            AllReduceGroup(g.members, g.bytes, _group_strides(strides, n, len(g.members))) for g in demand.allreduce
        )
        notes.append("AllReduce rings: the circulant's stride rings, both ways")
    else:
        ring = hamiltonian_ring(cabling)
        rings = (ring,) if ring is not None else ()
        shown = " ".join(map(str, (ring or ())[:RING_NOTE_SERVERS])) + (" ..." if n > RING_NOTE_SERVERS else "")
        notes.append(
            f"AllReduce ring: a Hamiltonian ring over the cables ({shown}), both ways"
            if ring is not None
            else "no Hamiltonian ring over the cables: the AllReduce packs spanning trees (forest)"
        )
    return Topology(
        cables=cables,
        routes=routes,
        demand=TrafficDemand(groups, demand.mp),
        rings=rings,
        strides=ring_strides,
        gbps=cabling.gbps,
        degree=cabling.degree(),
        notes=notes,
        extra={"allreduce": "rings" if rings else "forest"},
    )


def _wired_strides(cabling: Cabling) -> tuple[int, ...]:
    """The strides of a circulant cabling (`circulant_strides`; empty when it is none) as its
    cables are written: each stride in the order its first cable appears, and as ``q`` when
    every one of its cables goes from ``i`` to ``i + q mod n`` (TopoOpt wires ``i -- i + p``
    with strides up to n - 1), repeated for parallel copies. A TopoOpt plan written out and
    read back so gets its own strides back, in its own order."""
    strides = circulant_strides(cabling)
    if not strides:
        return ()
    n = cabling.servers
    first: dict[int, int] = {}
    ways: dict[int, set[int]] = {}
    for k, (a, b) in enumerate(cabling.cable_pairs()):
        q = (b - a) % n
        first.setdefault(min(q, n - q), k)
        ways.setdefault(min(q, n - q), set()).add(q)
    count = Counter(strides)
    return tuple(
        next(iter(ways[p])) if len(ways[p]) == 1 else p
        for p in sorted(count, key=first.__getitem__)
        for _ in range(count[p])
    )


def _group_strides(strides: tuple[int, ...], n: int, size: int) -> tuple[int, ...]:
    """The strides whose rings span a coset group of ``size`` servers ({s, s + n/size, ...}):
    ``(n / size) k`` with k coprime with ``size`` (`planner.topology.totient.totient_strides`;
    the full group: the strides coprime with n), which are exactly the strides TopoOpt gave
    that group size."""
    if size < 2 or n % size:
        return ()
    step = n // size
    return tuple(p for p in strides if p % step == 0 and gcd(p // step, size) == 1)


TOPOLOGY_BUILDERS: dict[str, Callable[[Scenario, TrafficDemand], Topology]] = {
    "topoopt": topoopt_topology,
    "ring": ring_topology,
    "switch": switch_topology,
    "expander": expander_topology,
    "torus": torus_topology,
    "hierarchical": hierarchical_topology,
    "file": file_topology,
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
    rates = topo.gbps or (rate,) * len(topo.cables)
    links = with_cable_rates(tuple(Link(a, b, float(gbps)) for (a, b), gbps in zip(topo.cables, rates)), s)
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
