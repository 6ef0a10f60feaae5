"""Cost models: the flow-level iteration simulator and the network price model.

- `Simulator` / `simulate`: one training iteration on a plan, as a task graph on serial
  compute and link resources (docs/algorithms.md section 6), fast enough for the MCMC search.
- `PriceModel` / `similar_cost_fattree_gbps`: what a network costs, and the per-server
  bandwidth of a Fat-tree that costs the same as a TopoOpt cluster (docs/algorithms.md section 8).
"""

from .network import NetworkModel
from .simulator import CostConfig, IterationCost, Simulator, simulate

__all__ = ["CostConfig", "IterationCost", "NetworkModel", "Simulator", "simulate"]
