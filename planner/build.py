"""From a validated `Scenario` to a complete `Plan`: strategy, its traffic, topology, routes.

This is the planner's front door (`planner.build_plan`). The scenario's strategy decides
the traffic: a fixed one (``data``, ``hybrid``: `planner.strategy.strategies.fixed_strategy`) on the
model's operator graph, or the alternating search (``search``: `planner.search.search`),
which returns the plan of its best strategy. The topology kind's builder
(`planner.topologies.TOPOLOGY_BUILDERS`) then turns the traffic into cables and routes.
Either way the plan carries the strategy as `Plan.placement`, from which
`planner.cost.iteration.iteration_schedule` builds the schedule the workers execute.
"""

from __future__ import annotations

from contract.plan import Plan, TrafficDemand

from .model.workload_graph import workload_graph
from .scenario import Scenario
from .strategy.strategies import fixed_strategy, placement_of, strategy_demand
from .topologies import plan_for_demand


def build_plan(s: Scenario, demand: TrafficDemand | None = None) -> Plan:
    """Plan the scenario's job on its topology kind. ``demand`` replaces the strategy's
    traffic (the plan then has no placement: its schedule is data parallel). With
    ``[topology] routing = "planned"`` the model-parallel traffic gets a per-destination
    multipath allocation (`planner.bandwidth.multipath.planned_routing`). With ``[collectives]
    allreduce = "msccl:FILE"`` the plan records the XML its full-group AllReduce runs
    (`planner.collectives.from_plan.with_msccl_allreduce`)."""
    plan = _plan_routes(s, demand)
    if s.topology.routing == "planned":
        from .bandwidth.multipath import planned_routing  # here: the LP is only loaded when asked for

        plan = planned_routing(plan)
    if s.msccl is not None:
        from .collectives.from_plan import with_msccl_allreduce

        plan = with_msccl_allreduce(plan, s.msccl.path, s.msccl.text, s.msccl.gpus_per_server)
    return plan


def _plan_routes(s: Scenario, demand: TrafficDemand | None) -> Plan:
    if demand is not None:
        return plan_for_demand(s, demand)
    if s.parallelism.strategy == "search":
        from .search import search  # here, not at the top: the search is only loaded when used

        return search(s).plan
    n, p = s.cluster.servers, s.parallelism
    graph = workload_graph(s.workload)
    strategy = fixed_strategy(graph, n, p.strategy, p.mp_degree)
    demand = strategy_demand(graph, strategy, n, s.workload.batch_per_server)
    return plan_for_demand(s, demand, placement_of(graph, strategy))
