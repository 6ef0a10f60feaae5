"""Parallelization search: operator DAGs, strategies, and the alternating MCMC loop.

`search_strategy(scenario)` is the hook `planner.build_plan` calls for
``[parallelism] strategy = "search"``; `search(scenario, SearchConfig(...))` returns the
full `SearchResult` (strategy, plan, predicted cost, search statistics) for the sweep.
The loop itself (`planner.search.mcmc`) is imported lazily: the cost model and the fusion
pass import this package's graph and strategy modules, and the loop imports them.
"""

from typing import Any

from .graph import Operator, OpGraph, model_graph
from .strategy import OpChoice, Strategy, data_parallel, strategy_demand, table_placement_start

_LAZY = ("SearchConfig", "SearchResult", "search", "search_strategy")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import mcmc

        return getattr(mcmc, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    "search_strategy",
    "strategy_demand",
    "table_placement_start",
]
