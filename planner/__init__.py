"""topolab's planner: parallelization strategy, direct-connect topology, routes, schedules.

Imports nothing else of topolab and needs no privileges. Front door::

    from planner import load_scenario, build_plan
    plan = build_plan(load_scenario("scenarios/topoopt-12.toml"))
"""

from contract.plan import AllReduceGroup, Link, MPFlow, Plan, Routes, Summary, TrafficDemand

from .build import build_plan
from .scenario import Scenario, ScenarioError, load_scenario, parse_scenario

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
