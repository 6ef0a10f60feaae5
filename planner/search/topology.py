"""Topologies for strategies during the search: TopologyFinder (or a fixed baseline), cached.

The alternating loop (reference section 1.4) hands every accepted strategy's traffic to
TopologyFinder. Strategies that differ only in ways TopologyFinder cannot see map to the
same topology, so plans are cached under a signature of what TopologyFinder reads:

- the degree split (d_AR, d_MP) and the AllReduce port split per group class;
- when d_MP > 0, the model-parallel demand (bytes per ordered pair, rounded to two
  significant digits so a table moving between equally loaded servers is a new key but
  float noise is not).

Baseline kinds (switch, expander, torus, ring) do not depend on the traffic: one plan.
Plans are built with `planner.build_plan`, so the search scores exactly the topology and
routes `topolab plan` will emit for the same demand.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..build import build_plan
from ..plan import AllReduceGroup, MPFlow, Plan, TrafficDemand
from ..scenario import Scenario
from ..topology_finder import allreduce_network_bytes, class_traffic, split_degree, split_ports
from .strategy import TrafficArrays, coset


def demand_signature(n: int, d: int, traffic: TrafficArrays, rule: str) -> tuple:
    """What TopologyFinder's output depends on (module docstring)."""
    groups = tuple(AllReduceGroup(coset(n, m, s), int(round(b))) for m, b in traffic.groups.items()
                   for s in range(m) if b >= 0.5)
    mp_total = float(traffic.pair.sum())
    stub = TrafficDemand(groups, (MPFlow(0, 1, int(round(mp_total))),) if mp_total else ())
    d_ar, d_mp = split_degree(d, allreduce_network_bytes(stub), float(stub.mp_bytes))
    ports = tuple(sorted(split_ports(d_ar, class_traffic(stub), rule).items()))
    if not d_mp:
        return (d_ar, d_mp, ports)
    x = traffic.pair
    q = np.zeros_like(x)
    pos = x > 0
    e = np.floor(np.log10(x[pos])) - 1
    q[pos] = np.round(x[pos] / 10**e) * 10**e
    return (d_ar, d_mp, ports, hashlib.sha1(q.tobytes()).hexdigest())


class TopologyCache:
    """Plans for traffic on one scenario's cluster, built once per signature."""

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.kind = scenario.topology.kind
        self._plans: dict[tuple, Plan] = {}
        self.builds = 0

    def key(self, traffic: TrafficArrays) -> tuple:
        if self.kind != "topoopt":
            return (self.kind,)
        c = self.scenario.cluster
        return demand_signature(c.servers, c.degree, traffic, self.scenario.topology.degree_split)

    def cached(self, key: tuple) -> Plan | None:
        return self._plans.get(key)

    def plan(self, key: tuple, traffic: TrafficArrays) -> Plan:
        plan = self._plans.get(key)
        if plan is None:
            plan = build_plan(self.scenario, traffic.demand())
            self._plans[key] = plan
            self.builds += 1
        return plan
