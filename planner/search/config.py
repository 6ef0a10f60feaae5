"""Settings of the alternating search (docs/algorithms.md section 5)."""

from __future__ import annotations

from dataclasses import dataclass

# An MP demand with more than this many pairs per server makes TopologyFinder's matching
# (networkx Blossom on the demand graph) cost seconds: such builds count against
# `SearchConfig.max_topology_builds`.
DENSE_MP_PAIRS_PER_SERVER = 4


@dataclass(frozen=True)
class SearchConfig:
    steps: int = 400
    seed: int = 1
    alpha: float = 25.0  # Metropolis: accept a relative slowdown delta with exp(-alpha delta)
    alternate: bool = True  # feed accepted strategies to TopologyFinder (TopoOpt only)
    max_mp: int = 32
    max_shards: int = 16
    block_moves: float = 0.15  # share of proposals that set one degree for all dense operators
    fuse: bool = True
    # TopologyFinder calls with model-parallel ports (d_MP > 0) beyond the starting points.
    # At 128 servers one such call costs seconds (networkx Blossom on a dense demand
    # graph), so the loop re-plans the topology for at most this many new MP traffic
    # signatures (ring-only topologies cost milliseconds and are always re-planned); later
    # accepted strategies with an unseen signature are scored on the current topology, and
    # the best of them is verified on its own topology at the end.
    max_topology_builds: int = 6
    # Which topology a proposal is scored on. "current": the topology of the last accepted
    # strategy (the paper's alternation, docs/algorithms.md section 5). "own": the topology TopologyFinder
    # builds for the proposal's own traffic whenever it is cached, cheap (ring-only or
    # sparse MP demand) or within the build budget, else the current one. "both" (default):
    # the better of the two decides acceptance. Either way an accepted strategy then moves
    # to its own topology, as in the paper. "own" alone reaches strategies whose benefit
    # needs a different topology (tensor-parallel BERT needs MP links between block
    # members) but can stall where the path goes through odd intermediate topologies
    # (CANDLE's towers sharded one at a time); "both" keeps both paths open.
    proposals: str = "both"
    # After the search, the chosen strategy's iteration schedule (what the workers run) is
    # predicted with planner.cost.predict and recorded in the plan as "executed_iteration_s",
    # when the schedule has at most this many ops (the predictor replays every op: a
    # 32-server data-parallel CANDLE schedule of 2e5 ops takes tens of seconds).
    rescore_max_ops: int = 20_000
