"""The networks of the evaluation as scenarios the planner can build (docs/algorithms.md section 8).

``NETWORKS`` names what a sweep compares; each maps to a plain topology kind of the
scenario schema, so every cell of a sweep is a plan `topolab plan` could produce too:

- ``topoopt``: TopoOpt (TotientPerms rings + MP matchings), co-optimized with the search,
  with the degree split of the base scenario (the paper's by default);
- ``topoopt-released``: the same with the authors' released split (every AllReduce port
  to the heaviest group class), for comparison;
- ``switch``: the ideal switch, one non-blocking port of d x B per server;
- ``fattree``: a non-blocking Fat-tree whose per-server bandwidth X is what the same money
  buys (`similar_cost_fattree_gbps`). Modelled as the ideal switch at X with twice the
  per-hop latency (a two-tier tree path crosses 4 cables, the switch model has 2);
- ``expander``: a random d-regular graph with shortest-path routing (seeded);
- ``torus`` (d = 4) and ``ring``: further direct-connect baselines.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...scenario import Scenario, with_overrides
from .price import PriceModel, similar_cost_fattree_gbps

NETWORKS = ("topoopt", "topoopt-released", "switch", "fattree", "expander", "torus", "ring")


@dataclass(frozen=True)
class Network:
    """One network of a comparison: the scenario to plan and what it costs."""

    name: str
    scenario: Scenario
    per_server_gbps: float
    cost_usd: float
    note: str


def network_scenario(base: Scenario, name: str, prices: PriceModel | None = None) -> Network:
    """``base`` on network ``name`` (module docstring); the strategy is set to "search"."""
    prices = prices or PriceModel()
    c = base.cluster
    n, d, b = c.servers, c.degree, c.link_gbps
    common = {"parallelism": {"strategy": "search"}}
    direct_cost = prices.direct_connect(n, d, b)
    if name == "topoopt-released":
        s = with_overrides(base, topology={"kind": "topoopt", "degree_split": "released"}, **common)
        return Network(name, s, d * b, direct_cost, f"{d} x {b:g} Gbps, released degree split")
    if name in ("topoopt", "expander", "torus", "ring"):
        s = with_overrides(base, topology={"kind": name}, **common)
        return Network(name, s, d * b, direct_cost, f"{d} x {b:g} Gbps direct-connect interfaces")
    if name == "switch":
        s = with_overrides(base, topology={"kind": "switch", "switch_gbps": float(d * b)}, **common)
        return Network(name, s, d * b, prices.ideal_switch(n, d * b), f"ideal switch, {d * b:g} Gbps per server")
    if name == "fattree":
        x, cost, budget = similar_cost_fattree_gbps(n, d, b, prices)
        s = with_overrides(
            base,
            topology={"kind": "switch", "switch_gbps": float(x)},
            cluster={"latency_us": 2 * c.latency_us},
            **common,
        )
        return Network(
            name,
            s,
            x,
            cost,
            f"non-blocking Fat-tree at {x:g} Gbps per server: ${cost:,.0f} vs direct-connect ${budget:,.0f}",
        )
    raise ValueError(f"unknown network {name!r}; choose from {', '.join(NETWORKS)}")
