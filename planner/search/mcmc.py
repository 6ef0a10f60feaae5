"""Alternating MCMC search over parallelization strategies and TopoOpt topologies.

Reference: docs/algorithms.md section 5 (TopoOpt's alternating optimization on FlexFlow's
MCMC). The loop:

1. Fuse the model's operator graph (planner.model.fusion, docs/algorithms.md section 9).
2. Start from the better of pure data parallelism and the table-placement hybrid, each on
   the topology TopologyFinder builds for its own traffic.
3. Each step proposes a change of ONE operator's choice (a tensor-parallel degree, or an
   embedding table's owner / shard count / replication; 15% of the proposals instead set
   one tensor-parallel degree for every dense operator), scores it with the flow-level
   simulator, and accepts it with the Metropolis rule ``min(1, exp(-alpha * delta))``,
   delta = relative change of the iteration time. Scoring topology: the CURRENT one (the
   paper's alternation, ``proposals="current"``), the one TopologyFinder builds for the
   proposal's own traffic when that is affordable (``"own"``), or by default the better
   of the two (``"both"``; see `SearchConfig.proposals`).
4. Every accepted strategy's traffic goes to TopologyFinder (`TopologyCache`); when the
   topology changes, the strategy is re-scored on it and later proposals use it. New
   topologies are built for at most `SearchConfig.max_topology_builds` traffic signatures
   (see there); the others are scored on the current topology.
5. The best CONSISTENT pair (a strategy on the topology TopologyFinder builds for its own
   traffic) is returned, so `build_plan` reproduces it from the strategy's demand. It is
   never worse than data parallelism on its own topology, the first pair scored.

With a baseline topology kind (switch, expander, ...) step 4 is a no-op: the search then
optimizes the strategy for a fixed network, as the paper does for its baselines.
Everything random comes from one ``random.Random(seed)``: same inputs, same result.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from contract.plan import Plan, TrafficDemand

from ..cost.costmodel.simulator import CostConfig, IterationCost, Simulator
from ..cost.iteration_prediction import predict_iteration
from ..model.fusion import FusionConfig, fuse
from ..model.opgraph import OpGraph
from ..model.workload_graph import workload_graph
from ..scenario import Scenario
from ..strategy.strategies import (
    Strategy,
    TrafficArrays,
    data_parallel,
    describe,
    placement_of,
    table_placement_start,
    traffic_arrays,
)
from ..topologies import plan_for_demand
from .config import DENSE_MP_PAIRS_PER_SERVER, SearchConfig
from .proposals import propose
from .topology import DemandSignature, TopologyCache


@dataclass
class SearchResult:
    """The best (strategy, topology) pair and how the search got there."""

    model: str
    topology: str
    graph: OpGraph
    strategy: Strategy
    plan: Plan
    cost: IterationCost
    demand: TrafficDemand
    data_parallel: IterationCost  # pure data parallelism on its own topology
    steps: int
    accepted: int
    topology_changes: int
    topology_builds: int
    evaluations: int
    seconds: float
    history: list[tuple[int, float]] = field(default_factory=list)  # (step, best iteration s)

    @property
    def speedup_over_data_parallel(self) -> float:
        return self.data_parallel.iteration_s / self.cost.iteration_s

    def choices(self) -> dict[str, str]:
        return describe(self.graph, self.strategy)

    def info(self) -> dict:
        """JSON-safe summary (lists and str keys only: it goes into Plan.extra)."""
        return {
            "search": {
                "model": self.model,
                "topology": self.topology,
                "operators": len(self.graph),
                "choices": self.choices(),
                "predicted_iteration_s": self.cost.iteration_s,
                "data_parallel_iteration_s": self.data_parallel.iteration_s,
                "steps": self.steps,
                "accepted": self.accepted,
                "topology_changes": self.topology_changes,
                "evaluations": self.evaluations,
            }
        }


class _Scorer:
    """Simulators per topology (one per cached plan), so caches survive topology changes."""

    def __init__(self, scenario: Scenario, graph: OpGraph, cost: CostConfig):
        self.topologies = TopologyCache(scenario)
        self.graph = graph
        self.cost = cost
        self.n = scenario.cluster.servers
        self._sims: dict[DemandSignature, Simulator] = {}
        self._pieces: dict = {}

    def traffic(self, strategy: Strategy) -> tuple[DemandSignature, TrafficArrays]:
        traffic = traffic_arrays(self.graph, strategy, self.n, self.cost.batch, self._pieces)
        return self.topologies.key(traffic), traffic

    def sim(self, key: DemandSignature, plan: Plan) -> Simulator:
        s = self._sims.get(key)
        if s is None:
            s = self._sims[key] = Simulator(plan, self.graph, self.cost)
        return s

    @property
    def evaluations(self) -> int:
        return sum(s.evaluations for s in self._sims.values())


def _search_graph(scenario: Scenario, cfg: SearchConfig) -> OpGraph:
    """The model's operator graph, fused unless `SearchConfig.fuse` is off."""
    c, w = scenario.cluster, scenario.workload
    graph = workload_graph(w)
    if not cfg.fuse:
        return graph
    return fuse(
        graph, FusionConfig(batch=w.batch_per_server, device_tflops=w.device_tflops, server_gbps=c.degree * c.link_gbps)
    )


def search(
    scenario: Scenario, config: SearchConfig | None = None, progress: Callable[[int, int, float], None] | None = None
) -> SearchResult:
    """Search the scenario's job on its topology kind (module docstring).

    ``progress(step, steps, best_s)`` is called every 100 steps and at the end."""
    cfg = config or SearchConfig(steps=scenario.parallelism.search_steps, seed=scenario.parallelism.seed)
    t0 = time.perf_counter()
    c, w = scenario.cluster, scenario.workload
    n = c.servers
    cost_cfg = CostConfig(batch=w.batch_per_server, device_tflops=w.device_tflops)
    graph = _search_graph(scenario, cfg)
    scorer = _Scorer(scenario, graph, cost_cfg)
    cache = scorer.topologies
    alternate = cfg.alternate and scenario.topology.kind == "topoopt"
    rng = random.Random(cfg.seed)

    def own_pair(strategy: Strategy) -> tuple[IterationCost, DemandSignature, Plan, TrafficArrays]:
        key, traffic = scorer.traffic(strategy)
        plan = cache.plan(key, traffic)
        return scorer.sim(key, plan).iteration(strategy), key, plan, traffic

    dp = data_parallel(graph)
    starts = [dp]
    if any(op.is_embedding for op in graph.ops):
        starts.append(table_placement_start(graph, n))
    scored = [(own_pair(s), s) for s in starts]
    dp_cost = scored[0][0][0]
    (cur_r, cur_key, cur_plan, cur_traffic), current = min(scored, key=lambda t: t[0][0].iteration_s)
    cur_s = cur_r.iteration_s
    best = (cur_s, cur_r, current, cur_plan, cur_traffic)
    pending: tuple | None = None  # best strategy seen on a topology other than its own
    accepted = changes = extra_builds = 0
    history = [(0, cur_s)]

    def topology_for(key: DemandSignature, traffic: TrafficArrays) -> Plan | None:
        """The plan for a traffic signature: cached, cheap, or within the build budget."""
        nonlocal extra_builds
        plan = cache.cached(key)
        if plan is not None:
            return plan
        if key.d_mp and np.count_nonzero(traffic.pair) > DENSE_MP_PAIRS_PER_SERVER * n:
            if extra_builds >= cfg.max_topology_builds:
                return None
            extra_builds += 1
        return cache.plan(key, traffic)

    score_own = alternate and cfg.proposals in ("own", "both")
    for step in range(1, cfg.steps + 1):
        cand = propose(graph, current, n, rng, cfg)
        own = r_own = None
        if score_own:
            key, traffic = scorer.traffic(cand)
            plan = topology_for(key, traffic)
            if plan is not None:
                own = (key, plan, traffic)
                r_own = scorer.sim(key, plan).iteration(cand)
        r = r_own
        if r_own is None or (cfg.proposals == "both" and own[0] != cur_key):
            r_cur = scorer.sim(cur_key, cur_plan).iteration(cand)
            r = r_cur if r_own is None else min(r_own, r_cur, key=lambda x: x.iteration_s)
        delta = (r.iteration_s - cur_s) / cur_s
        if delta <= 0 or rng.random() < math.exp(-cfg.alpha * delta):
            accepted += 1
            current, cur_s, cur_r = cand, r.iteration_s, r
            consistent = True
            if own:  # the accepted strategy moves to its own topology (it has been scored there)
                key, plan, traffic = own
                if key != cur_key:
                    changes += 1
                    cur_key, cur_plan = key, plan
                cur_r, cur_s = r_own, r_own.iteration_s
            else:
                key, traffic = scorer.traffic(cand)
                if alternate and key != cur_key:
                    plan = topology_for(key, traffic)
                    if plan is not None:
                        changes += 1
                        cur_key, cur_plan = key, plan
                        cur_r = scorer.sim(key, plan).iteration(cand)
                        cur_s = cur_r.iteration_s
                    else:
                        consistent = False
            if consistent and cur_s < best[0]:
                best = (cur_s, cur_r, current, cur_plan, traffic)
                history.append((step, cur_s))
            elif not consistent and cur_s < best[0] and (pending is None or cur_s < pending[0]):
                pending = (cur_s, current, key, traffic)
        if progress and (step % 100 == 0 or step == cfg.steps):
            progress(step, cfg.steps, best[0])
    if pending is not None:  # verify the best out-of-budget strategy on its own topology
        _, strategy, key, traffic = pending
        plan = cache.plan(key, traffic)
        r = scorer.sim(key, plan).iteration(strategy)
        if r.iteration_s < best[0]:
            best = (r.iteration_s, r, strategy, plan, traffic)
            history.append((cfg.steps, r.iteration_s))
    _, best_r, best_strategy, _, best_traffic = best
    demand = best_traffic.demand()
    result = SearchResult(
        model=w.model,
        topology=scenario.topology.kind,
        graph=graph,
        strategy=best_strategy,
        plan=plan_for_demand(scenario, demand, placement_of(graph, best_strategy)),
        cost=best_r,
        demand=demand,
        data_parallel=dp_cost,
        steps=cfg.steps,
        accepted=accepted,
        topology_changes=changes,
        topology_builds=cache.builds,
        evaluations=scorer.evaluations,
        seconds=time.perf_counter() - t0,
        history=history,
    )
    info = result.info()
    _, executed = predict_iteration(result.plan, max_ops=cfg.rescore_max_ops)  # None: over the op budget
    info["search"]["executed_iteration_s"] = executed.seconds if executed is not None else None
    result.plan = dataclasses.replace(result.plan, extra={**result.plan.extra, **info})
    return result
