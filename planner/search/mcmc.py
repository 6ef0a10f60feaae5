"""Alternating MCMC search over parallelization strategies and TopoOpt topologies.

Reference: docs/algorithms.md section 5 (TopoOpt's alternating optimization on FlexFlow's
MCMC). The loop:

1. Fuse the model's operator graph (planner.fusion, docs/algorithms.md section 9).
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

from ..costmodel.simulator import CostConfig, IterationCost, Simulator
from ..fusion import FusionConfig, fuse
from ..iteration import IterationOptions, iteration_schedule
from ..opgraph import OpGraph, model_graph
from ..predict import plan_network, predict
from ..scenario import Scenario
from ..strategy import (
    OpChoice,
    Strategy,
    TrafficArrays,
    data_parallel,
    describe,
    mp_options,
    placement_of,
    shard_options,
    table_placement_start,
    traffic_arrays,
)
from ..topologies import plan_for_demand
from ..zoo import get_model
from .topology import DemandSignature, TopologyCache

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
    # predicted with planner.predict and recorded in the plan as "executed_iteration_s",
    # when the schedule has at most this many ops (the predictor replays every op: a
    # 32-server data-parallel CANDLE schedule of 2e5 ops takes tens of seconds).
    rescore_max_ops: int = 20_000


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


def propose(graph: OpGraph, strategy: Strategy, n: int, rng: random.Random, cfg: SearchConfig) -> Strategy:
    """Change one operator's choice (local moves more often than jumps), or, with
    probability `SearchConfig.block_moves`, give every dense operator the same
    tensor-parallel degree (a coordinated move: mixed layouts pay re-distribution
    all-gathers, so single moves towards a uniformly sharded model look worse than they
    are)."""
    dense = [i for i, op in enumerate(graph.ops) if not op.is_embedding]
    if len(dense) > 1 and rng.random() < cfg.block_moves:
        m = rng.choice(mp_options(n, cfg.max_mp))
        out = list(strategy)
        for i in dense:
            out[i] = OpChoice(mp=m)
        return tuple(out)
    movable = [i for i, op in enumerate(graph.ops) if op.is_embedding or len(mp_options(n, cfg.max_mp)) > 1]
    i = rng.choice(movable)
    op, cur = graph.ops[i], strategy[i]
    if op.is_embedding:
        shards = shard_options(n, cfg.max_shards)
        r = rng.random()
        if cur.owner < 0:
            new = OpChoice(owner=rng.randrange(n), shards=1)
        elif r < 0.6:
            new = OpChoice(owner=rng.randrange(n), shards=cur.shards)
        elif r < 0.95:
            new = OpChoice(owner=cur.owner, shards=rng.choice([s for s in shards if s != cur.shards] or shards))
        else:
            new = OpChoice(owner=-1)
    else:
        opts = mp_options(n, cfg.max_mp)
        k = opts.index(cur.mp) if cur.mp in opts else 0
        if rng.random() < 0.5:
            k = min(len(opts) - 1, max(0, k + rng.choice((-1, 1))))
            if opts[k] == cur.mp:
                k = (k + 1) % len(opts)
        else:
            k = rng.choice([j for j in range(len(opts)) if j != k] or [k])
        new = OpChoice(mp=opts[k])
    return strategy[:i] + (new,) + strategy[i + 1 :]


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
    graph = model_graph(w.model)
    if cfg.fuse:
        graph = fuse(
            graph,
            FusionConfig(batch=w.batch_per_server, device_tflops=w.device_tflops, server_gbps=c.degree * c.link_gbps),
        )
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
    info["search"]["executed_iteration_s"] = _executed_seconds(result.plan, w, cfg)
    result.plan = dataclasses.replace(result.plan, extra={**result.plan.extra, **info})
    return result


def _executed_seconds(plan: Plan, w, cfg: SearchConfig) -> float | None:
    """The predictor's time for the plan's iteration schedule (None: over the op budget)."""
    opts = IterationOptions(batch=w.batch_per_server, device_tflops=w.device_tflops)
    schedule = iteration_schedule(plan, get_model(w.model), opts)
    if schedule.op_count() > cfg.rescore_max_ops:
        return None
    return predict(schedule, plan_network(plan)).seconds
