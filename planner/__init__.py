"""topolab's planner: parallelization strategy, direct-connect topology, routes, schedules.

Imports nothing else of topolab and needs no privileges. Front door::

    from planner import load_scenario, build_plan
    plan = build_plan(load_scenario("scenarios/topoopt-12.toml"))
"""

from contract.plan import AllReduceGroup, Link, MPFlow, Plan, Routes, Summary, TrafficDemand

from .scenario import Scenario, ScenarioError, load_scenario, parse_scenario


def build_plan(s: Scenario, demand: TrafficDemand | None = None) -> Plan:
    """`planner.build.build_plan` (loaded on first use, so that reading and checking a
    scenario does not pay for importing the planner's algorithms)."""
    from .build import build_plan as build

    return build(s, demand)


__all__ = [
    "AllReduceGroup",
    "Link",
    "MPFlow",
    "Plan",
    "Routes",
    "Scenario",
    "ScenarioError",
    "Summary",
    "TrafficDemand",
    "build_plan",
    "load_scenario",
    "parse_scenario",
]
