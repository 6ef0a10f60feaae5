"""The alternating MCMC search: never worse than data parallelism, reproducible, and the
topology follows the strategy's traffic (docs/algorithms.md sections 2 and 5)."""

import json

import networkx as nx
import pytest

from planner import Plan, build_plan, parse_scenario
from planner.cost.costmodel import CostConfig, Simulator
from planner.model.fusion import fuse
from planner.search import SearchConfig, data_parallel, model_graph, search, strategy_demand, table_placement_start
from planner.search.topology import TopologyCache
from planner.strategy.strategies import traffic_arrays


def _scenario(model, n=16, d=4, kind="topoopt", batch=128, steps=120, **topology):
    return parse_scenario(
        {
            "cluster": {"servers": n, "degree": d, "link_gbps": 100},
            "workload": {"model": model, "batch_per_server": batch},
            "parallelism": {"strategy": "search", "search_steps": steps, "seed": 3},
            "topology": {"kind": kind, **topology},
        }
    )


@pytest.mark.parametrize("model", ["dlrm", "candle", "bert", "vgg16"])
@pytest.mark.parametrize("kind", ["topoopt", "switch"])
def test_search_is_never_worse_than_data_parallel_on_the_same_topology(model, kind):
    s = _scenario(model, kind=kind)
    result = search(s, SearchConfig(steps=120, seed=3))
    graph = result.graph
    dp = data_parallel(graph)
    # Independently: data parallelism on the topology TopologyFinder builds for it ...
    dp_plan = build_plan(s, strategy_demand(graph, dp, 16, 128))
    dp_time = Simulator(dp_plan, graph, CostConfig(batch=128)).iteration(dp).iteration_s
    assert result.cost.iteration_s <= dp_time * (1 + 1e-12)
    assert result.data_parallel.iteration_s == pytest.approx(dp_time)
    # ... and the reported cost is what the simulator says for the returned pair.
    again = Simulator(result.plan, graph, CostConfig(batch=128)).iteration(result.strategy)
    assert again.iteration_s == pytest.approx(result.cost.iteration_s)
    if kind == "switch":  # a fixed topology: the same network for both
        assert result.plan.links == dp_plan.links


def test_search_finds_table_placement_for_dlrm():
    # Replicating 16 tables of 2 GiB and AllReducing them is absurd; the search must not.
    result = search(_scenario("dlrm"), SearchConfig(steps=60, seed=1))
    assert result.speedup_over_data_parallel > 10
    tables = {k: v for k, v in result.choices().items() if k.startswith("emb")}
    assert tables and all(v != "replicated" for v in tables.values())


def test_search_is_reproducible():
    s = _scenario("candle", d=8)
    a = search(s, SearchConfig(steps=150, seed=7))
    b = search(s, SearchConfig(steps=150, seed=7))
    assert a.strategy == b.strategy and a.cost == b.cost and a.plan == b.plan
    assert a.history == b.history


def _mp_cables(plan: Plan) -> int:
    return (
        len(plan.links)
        - sum(len(plan.extra["class_strides"].get(k, [])) for k in plan.extra["class_strides"]) * plan.servers
    )


def test_hybrid_dlrm_traffic_gives_mp_links_that_data_parallel_does_not():
    # Large batches make the lookups heavy: the table placement's MP traffic earns matching
    # ports; pure data parallelism has no MP traffic, so its topology is rings only.
    s = _scenario("dlrm", batch=1024)
    graph = fuse(model_graph("dlrm"))
    cache = TopologyCache(s)
    plans = {}
    for name, st in (("data", data_parallel(graph)), ("hybrid", table_placement_start(graph, 16))):
        traffic = traffic_arrays(graph, st, 16, 1024)
        plans[name] = cache.plan(cache.key(traffic), traffic)
    assert plans["data"].extra["d_mp"] == 0 and _mp_cables(plans["data"]) == 0
    assert plans["hybrid"].extra["d_mp"] > 0 and _mp_cables(plans["hybrid"]) > 0
    assert set(plans["data"].links) != set(plans["hybrid"].links)
    # Table owners are matched with their heaviest consumers: every MP cable touches an owner.
    owners = {c.owner for c in table_placement_start(graph, 16) if c.owner >= 0}
    mp_links = plans["hybrid"].links[len(plans["hybrid"].links) - _mp_cables(plans["hybrid"]) :]
    assert any(l.a in owners or l.b in owners for l in mp_links)


def test_alternating_loop_moves_the_topology_with_the_strategy():
    s = _scenario("dlrm", batch=1024)
    alt = search(s, SearchConfig(steps=80, seed=2))
    assert alt.topology_changes >= 1 and alt.topology_builds >= 2
    assert alt.plan.extra["d_mp"] > 0  # the chosen pair uses model-parallel matchings
    fixed = search(s, SearchConfig(steps=80, seed=2, alternate=False))
    assert fixed.topology_changes == 0
    # The returned pair is consistent: TopologyFinder on the strategy's traffic rebuilds it.
    assert build_plan(s, alt.demand).links == alt.plan.links


def test_degree_split_rules_both_work():
    plans = {}
    for rule in ("paper", "released"):
        r = search(_scenario("candle", n=16, d=8, degree_split=rule), SearchConfig(steps=80, seed=1))
        plans[rule] = r
        assert r.cost.iteration_s <= r.data_parallel.iteration_s
    assert plans["paper"].topology == plans["released"].topology == "topoopt"


@pytest.mark.parametrize("model,n,d", [("dlrm", 12, 4), ("candle", 12, 4), ("ncf", 16, 4), ("vgg16", 12, 4)])
def test_search_builds_valid_plans_through_build_plan(model, n, d):
    s = _scenario(model, n=n, d=d, steps=60)
    plan = build_plan(s)  # strategy = "search": build_plan calls planner.search.search_strategy
    assert plan.strategy == "search"
    info = plan.extra["search"]
    assert info["predicted_iteration_s"] <= info["data_parallel_iteration_s"]
    assert Plan.from_json(plan.to_json()) == plan
    json.dumps(plan.extra)  # JSON-safe
    g = nx.MultiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from((l.a, l.b) for l in plan.links)
    assert nx.is_connected(g) and all(g.degree(i) == d for i in range(n))
    for src in range(n):
        for dst in range(n):
            if src != dst:
                path = plan.path(src, dst)
                assert all(g.has_edge(a, b) for a, b in zip(path, path[1:]))
    for group in plan.demand.allreduce:  # replica groups sit on cosets (TotientPerms sub-groups)
        step = n // len(group.members)
        assert group.members == tuple(range(group.members[0], n, step))


def test_topology_signature_matches_topology_finder_inputs():
    # The cache key's degree and port split must be what TopologyFinder computes from the
    # full TrafficDemand, for strategies with every kind of choice.
    import random

    from planner.search.mcmc import propose
    from planner.search.topology import demand_signature
    from planner.topology.finder import allreduce_network_bytes, class_traffic, split_degree, split_ports

    rng = random.Random(5)
    for model in ("dlrm", "candle", "bert"):
        graph = fuse(model_graph(model))
        st = table_placement_start(graph, 16)
        for _ in range(25):
            st = propose(graph, st, 16, rng, SearchConfig())
            traffic = traffic_arrays(graph, st, 16, 512)
            demand = traffic.demand()
            d_ar, d_mp = split_degree(8, allreduce_network_bytes(demand), float(demand.mp_bytes))
            ports = tuple(sorted(split_ports(d_ar, class_traffic(demand), "paper").items()))
            assert demand_signature(16, 8, traffic, "paper")[:3] == (d_ar, d_mp, ports)
