"""Topologies for strategies during the search: TopologyFinder (or a fixed baseline), cached.

The alternating loop (docs/algorithms.md section 5) hands every accepted strategy's traffic to
TopologyFinder. Strategies that differ only in ways TopologyFinder cannot see map to the
same topology, so plans are cached under a signature of what TopologyFinder reads:

- the degree split (d_AR, d_MP) and the AllReduce port split per group class;
- when d_MP > 0, the model-parallel demand (bytes per ordered pair, rounded to 7
  significant bits, so a table moving between equally loaded servers is a new key but
  float noise is not).

Baseline kinds (switch, expander, torus, ring) do not depend on the traffic: one plan.
Plans are built with `planner.topologies.plan_for_demand`, as `planner.build_plan` builds them, so the search scores exactly the topology and
routes `topolab plan` will emit for the same demand.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import numpy as np

from contract.plan import Plan

from ..scenario import Scenario
from ..strategy.strategies import TrafficArrays
from ..topologies import plan_for_demand
from ..topology.finder import split_degree, split_ports


class DemandSignature(NamedTuple):
    """What TopologyFinder reads of a strategy's traffic (module docstring)."""

    d_allreduce: int
    d_mp: int
    ports: tuple[tuple[int, int], ...]
    mp_hash: str = ""  # digest of the rounded MP pair matrix; empty when d_mp = 0


BASELINE_SIGNATURE = DemandSignature(0, 0, ())  # baseline kinds ignore the traffic


def demand_signature(n: int, d: int, traffic: TrafficArrays, rule: str) -> DemandSignature:
    """What TopologyFinder's output depends on (module docstring). Computes the same
    degree and port split as `planner.topology.finder` from the layout totals directly
    (groups of one layout m: m cosets of k = n/m members, each reducing ``bytes``)."""
    t_ar = 0.0
    classes: dict[int, float] = {}
    for m, b in traffic.groups.items():
        b = float(round(b))
        k = n // m
        if b <= 0:
            continue
        t_ar += m * 2 * (k - 1) * b
        if k > 1:
            classes[k] = classes.get(k, 0.0) + m * 2 * (k - 1) * b / k
    mp_total = float(round(traffic.pair.sum()))
    d_ar, d_mp = split_degree(d, t_ar, mp_total)
    ports = tuple(sorted(split_ports(d_ar, classes, rule).items()))
    if not d_mp:
        return DemandSignature(d_ar, d_mp, ports)
    # MP bytes per pair, rounded to 7 significant bits (float noise is not a new topology).
    mantissa, exponent = np.frexp(traffic.pair)
    q = np.ldexp(np.round(mantissa * 128), exponent)
    return DemandSignature(d_ar, d_mp, ports, hashlib.sha1(q.tobytes()).hexdigest())


class TopologyCache:
    """Plans for traffic on one scenario's cluster, built once per signature."""

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.kind = scenario.topology.kind
        self._plans: dict[DemandSignature, Plan] = {}
        self.builds = 0

    def key(self, traffic: TrafficArrays) -> DemandSignature:
        if self.kind != "topoopt":
            return BASELINE_SIGNATURE
        c = self.scenario.cluster
        return demand_signature(c.servers, c.degree, traffic, self.scenario.topology.degree_split)

    def cached(self, key: DemandSignature) -> Plan | None:
        return self._plans.get(key)

    def plan(self, key: DemandSignature, traffic: TrafficArrays) -> Plan:
        plan = self._plans.get(key)
        if plan is None:
            plan = plan_for_demand(self.scenario, traffic.demand())
            self._plans[key] = plan
            self.builds += 1
        return plan
