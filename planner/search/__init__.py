"""Parallelization search: the alternating MCMC loop over strategies and topologies.

`search(scenario, SearchConfig(...))` returns the full `SearchResult` (strategy, plan,
predicted cost, search statistics); `planner.build_plan` calls it for
``[parallelism] strategy = "search"``. The strategy model it searches over lives in
`planner.strategy.strategies`, the operator graphs in `planner.model.opgraph` (re-exported here).
"""

from ..model.opgraph import Operator, OpGraph, model_graph
from ..strategy.strategies import OpChoice, Strategy, data_parallel, strategy_demand, table_placement_start
from .mcmc import SearchConfig, SearchResult, search

__all__ = [
    "OpChoice",
    "OpGraph",
    "Operator",
    "SearchConfig",
    "SearchResult",
    "Strategy",
    "data_parallel",
    "model_graph",
    "search",
    "strategy_demand",
    "table_placement_start",
]
