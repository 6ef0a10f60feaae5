"""Forest AllReduce: the spanning-tree packing against Nash-Williams/Tutte by brute force,
the forest's shares and roots, and its schedule on the data-level simulator and predictor."""

from __future__ import annotations

import dataclasses
import itertools

import networkx as nx
import numpy as np
import pytest

from planner import build_plan, load_scenario, parse_scenario
from planner.collectives.forest import build_forest, forest_allreduce, plan_capacities, server_parents
from planner.collectives.from_plan import allreduce_for_plan, choose_allreduce, plan_rings
from planner.collectives.rings import multiring_allreduce
from planner.collectives.simulate import simulate_and_verify
from planner.collectives.tree_packing import (
    MAX_TAU_LOSS,
    allreduce_bounds,
    select_trees,
    shallow_or_exact_packing,
    shallow_tree_packing,
    spanning_tree_packing,
)
from planner.cost.costmodel.network import FOREST_SHARE_BYTES, NetworkModel
from planner.cost.iteration import IterationOptions, iteration_schedule
from planner.cost.predict import plan_network, predict

SEED = 20210510


def random_connected(rng: np.random.Generator, n: int, extra: float) -> dict[tuple[int, int], float]:
    """A random spanning tree plus each other pair with probability ``extra``; rates 1..25."""
    order = rng.permutation(n)
    pairs = {tuple(sorted((int(order[i]), int(order[rng.integers(0, i)])))) for i in range(1, n)}
    pairs |= {(a, b) for a, b in itertools.combinations(range(n), 2) if rng.random() < extra}
    return {e: float(rng.integers(1, 26)) for e in sorted(pairs)}


def set_partitions(items: list[int]):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in set_partitions(rest):
        yield [[first], *part]
        for i in range(len(part)):
            yield [*part[:i], [first, *part[i]], *part[i + 1 :]]


def tutte_bound(caps: dict[tuple[int, int], float], n: int) -> float:
    """min over partitions P (|P| >= 2) of c(crossing edges) / (|P| - 1), by enumeration."""
    best = float("inf")
    for part in set_partitions(list(range(n))):
        if len(part) < 2:
            continue
        block = {v: i for i, blk in enumerate(part) for v in blk}
        crossing = sum(c for (a, b), c in caps.items() if block[a] != block[b])
        best = min(best, crossing / (len(part) - 1))
    return best


def test_packing_equals_tutte_nash_williams_bound():
    rng = np.random.default_rng(SEED)
    for trial in range(60):
        n = int(rng.integers(3, 8))
        caps = random_connected(rng, n, extra=float(rng.uniform(0.1, 0.9)))
        packing = spanning_tree_packing(caps)
        assert packing.tau == pytest.approx(tutte_bound(caps, n), rel=1e-6), (trial, caps)
        load = dict.fromkeys(caps, 0.0)
        for tree, rate in zip(packing.trees, packing.rates):
            assert nx.is_tree(nx.Graph(tree)) and nx.Graph(tree).number_of_nodes() == n
            for e in tree:
                load[e] += rate
        assert all(load[e] <= caps[e] * (1 + 1e-7) for e in caps)


def test_packing_of_eight_nodes_and_parallel_cables():
    caps = {(i, (i + 1) % 8): 3.0 for i in range(8)} | {(1, 0): 2.0, (2, 6): 5.0}  # (1, 0) adds to (0, 1)
    merged = {(0, 1): 5.0} | {e: c for e, c in caps.items() if e not in ((0, 1), (1, 0))}
    assert spanning_tree_packing(caps).tau == pytest.approx(tutte_bound(merged, 8), rel=1e-6)


def test_disconnected_graph_is_refused():
    with pytest.raises(ValueError, match="connected"):
        spanning_tree_packing({(0, 1): 1.0, (2, 3): 1.0})


def test_forest_shares_roots_and_tree_count():
    rng = np.random.default_rng(SEED + 1)
    for n in (4, 7, 12):
        caps = random_connected(rng, n, extra=0.5)
        nbytes = 4 * 100_003
        forest, packing = build_forest(caps, n, nbytes)
        assert 1 <= len(forest) <= 2 * n
        assert sum(t.length for t in forest) == nbytes
        assert all(t.offset % 4 == 0 and t.length % 4 == 0 for t in forest)
        assert [t.offset for t in forest] == sorted(t.offset for t in forest)
        rates = np.array([t.rate for t in forest])
        shares = np.array([t.length for t in forest]) / nbytes
        assert np.allclose(shares, rates / rates.sum(), atol=1e-3)
        if len(forest) >= n:
            assert len({t.root for t in forest}) >= n // 2  # roots spread over the servers


def test_max_trees_keeps_the_fastest_and_resolves_rates():
    rng = np.random.default_rng(SEED + 2)
    caps = random_connected(rng, 8, extra=0.7)
    full = spanning_tree_packing(caps)
    forest, limited = build_forest(caps, 8, 4096, max_trees=2)
    assert len(forest) <= 2 and limited.tau <= full.tau * (1 + 1e-9)


@pytest.mark.parametrize("n", [4, 5, 6, 8, 10, 12])
def test_forest_schedule_allreduces_on_cables_only(n):
    rng = np.random.default_rng(SEED + n)
    caps = random_connected(rng, n, extra=0.4)
    cabled = {frozenset(e) for e in caps}
    for nbytes in (4, 4 * 997, 1 << 18):
        sched = forest_allreduce(caps, nbytes, segment_bytes=4096, window=3)
        assert simulate_and_verify(sched, seed=n) == []
        for rank, program in enumerate(sched.programs):
            for ops in program.values():
                assert all(frozenset((rank, op.peer)) in cabled for op in ops if op.kind == "send")


def scenario_plan(name: str, degraded: set[tuple[int, int]] = frozenset(), gbps: float = 5.0):
    plan = build_plan(load_scenario(f"scenarios/{name}.toml"))
    links = tuple(
        dataclasses.replace(link, gbps=gbps) if (min(link.a, link.b), max(link.a, link.b)) in degraded else link
        for link in plan.links
    )
    return dataclasses.replace(plan, links=links)


def test_switch_nodes_relay_and_are_never_roots():
    plan = scenario_plan("switch-12")
    sched = forest_allreduce(plan, 4 * 3001, segment_bytes=4096)
    assert simulate_and_verify(sched) == []
    assert all(tree["root"] < plan.servers for tree in sched.params["trees"])


def test_a_tree_edge_the_routes_do_not_follow_is_refused():
    forest, _ = build_forest({(0, 1): 1.0, (1, 2): 1.0, (0, 2): 1.0}, 3, 64)
    with pytest.raises(ValueError, match="not routed along the tree"):
        server_parents(forest[0], 3, path=lambda a, b: [a, 3, b])


def test_bounds_use_the_slowest_server():
    caps = {(0, 1): 10.0, (1, 2): 10.0, (2, 3): 10.0, (3, 0): 1.0}  # server 3 sends 11 at most
    bounds = allreduce_bounds(caps, 4, 1000)
    assert bounds.egress_s == pytest.approx(2 * 3 * 1000 / (4 * 11.0))
    assert bounds.packing_s == pytest.approx(1000 / spanning_tree_packing(caps).tau)


def test_degraded_topoopt_forest_beats_rings_and_nears_the_packing_bound():
    plan = scenario_plan("topoopt-12", {(0, 1), (7, 8), (4, 9)})
    nbytes = 2 << 20
    network = plan_network(plan, 100e6)
    bound = allreduce_bounds(plan_capacities(plan, 100e6), plan.servers, nbytes).packing_s
    forest = predict(forest_allreduce(plan, nbytes, link_bps=100e6, segment_bytes=64 << 10), network).seconds
    multiring = predict(multiring_allreduce(plan.servers, nbytes, plan_rings(plan)), network).seconds
    # 2 MiB is only six segments per tree: the pipeline's fill costs most of the gap to the bound
    assert bound <= forest < 2 * bound
    assert forest * 2 < multiring


def tree_height(edges, root: int) -> int:
    return max(nx.single_source_shortest_path_length(nx.Graph(edges), root).values())


@pytest.mark.parametrize("slack", [0, 1])
def test_shallow_trees_span_within_their_depth_limit(slack):
    rng = np.random.default_rng(SEED + 7 + slack)
    for n in (5, 8, 12):
        caps = random_connected(rng, n, extra=0.3)
        graph = nx.Graph(list(caps))
        packing = shallow_tree_packing(caps, n, slack)
        assert packing.tau <= spanning_tree_packing(caps).tau * (1 + 1e-9)
        ecc = nx.eccentricity(graph)
        for tree in packing.trees:
            assert nx.is_tree(nx.Graph(tree)) and nx.Graph(tree).number_of_nodes() == n
            # some server roots it within the limit: its BFS eccentricity + slack
            assert any(tree_height(tree, r) <= ecc[r] + slack for r in range(n))


def test_degraded_topoopt_packs_trees_three_deep_at_the_exact_tau():
    plan = scenario_plan("topoopt-12", {(0, 1), (7, 8), (4, 9)})
    caps = plan_capacities(plan)
    exact = spanning_tree_packing(caps)
    shallow = shallow_or_exact_packing(caps, plan.servers)
    assert shallow.tau == pytest.approx(exact.tau, rel=1e-6)
    forest, packing = build_forest(caps, plan.servers, 64 << 20)
    assert packing.tau >= (1 - MAX_TAU_LOSS) * exact.tau
    assert all(tree_height([(v, p) for v, p in t.parent.items() if p >= 0], t.root) == 3 for t in forest)


def test_degraded_topoopt_forest_of_64_mib_within_ten_percent_of_the_bound():
    plan = scenario_plan("topoopt-12", {(0, 1), (7, 8), (4, 9)})
    nbytes = 64 << 20
    bound = allreduce_bounds(plan_capacities(plan, 100e6), plan.servers, nbytes).packing_s
    sched = allreduce_for_plan(plan, "forest", nbytes)
    assert sched.params["shape"] == "trees"
    assert predict(sched, plan_network(plan, 100e6)).seconds < 1.10 * bound


def test_select_trees_keeps_the_fewest_within_the_tau_loss():
    plan = scenario_plan("topoopt-12", {(0, 1), (7, 8), (4, 9)})
    caps = plan_capacities(plan)
    exact = spanning_tree_packing(caps)
    kept = select_trees(exact, caps, max_trees=2 * plan.servers, max_loss=MAX_TAU_LOSS)
    assert kept.tau >= (1 - MAX_TAU_LOSS) * exact.tau
    assert len(kept.trees) < len(exact.trees)
    fewer = select_trees(exact, caps, max_trees=len(kept.trees) - 1, max_loss=MAX_TAU_LOSS)
    assert fewer.tau < (1 - MAX_TAU_LOSS) * exact.tau  # one tree fewer misses the target


def test_packing_gap_is_proved_by_the_upper_bound():
    rng = np.random.default_rng(SEED + 5)
    caps = random_connected(rng, 30, extra=0.3)
    loose = spanning_tree_packing(caps, gap=0.05)
    exact = spanning_tree_packing(caps)
    assert loose.tau >= 0.95 * loose.tau_upper
    assert loose.tau <= exact.tau * (1 + 1e-9) <= loose.tau_upper * (1 + 1e-9)


def test_forest_runs_trees_on_degraded_cables_and_rings_on_uniform_ones():
    degraded = scenario_plan("topoopt-12", {(0, 1), (7, 8), (4, 9)})
    uniform = scenario_plan("topoopt-12")
    trees = allreduce_for_plan(degraded, "forest", 1 << 20, 64 << 10)
    rings = allreduce_for_plan(uniform, "forest", 1 << 20, 64 << 10)
    assert trees.params["shape"] == "trees" and rings.params["shape"] == "rings"
    assert "trees" in trees.params["why"] and "rings" in rings.params["why"]
    assert 1 <= len(trees.params["trees"]) <= 2 * degraded.servers
    assert simulate_and_verify(trees) == [] and simulate_and_verify(rings) == []
    net = plan_network(degraded, 100e6)
    multiring = multiring_allreduce(12, 1 << 20, plan_rings(degraded))
    assert predict(trees, net).seconds < predict(multiring, net).seconds / 2  # 1 MiB: short pipelines


def test_iteration_uses_the_forest_on_heterogeneous_cables_and_says_why():
    scenario = {
        "cluster": {"servers": 12, "degree": 4, "link_gbps": 25},
        "topology": {"kind": "topoopt"},
        "workload": {"model": "candle", "batch_per_server": 64},
        "parallelism": {"strategy": "data"},
    }
    opts = IterationOptions(payload_scale=1e-3)
    slow = [{"a": 0, "b": 1, "gbps": 5}, {"a": 7, "b": 8, "gbps": 5}, {"a": 4, "b": 9, "gbps": 5}]
    hetero = build_plan(parse_scenario({**scenario, "cables": slow}))
    sched = iteration_schedule(hetero, opts)
    used = sched.params["allreduce"]["groups of 12"]
    assert used["algorithm"] == "forest trees" and "different rates" in used["why"]
    assert any(stream.startswith("ft") for stream in sched.programs[0])
    assert simulate_and_verify(sched) == []
    uniform = iteration_schedule(build_plan(parse_scenario(scenario)), opts)
    assert uniform.params["allreduce"]["groups of 12"]["algorithm"] == "multi-ring"


def test_iteration_collective_and_cost_model_make_one_choice_on_heterogeneous_cables():
    scenario = {
        "cluster": {"servers": 12, "degree": 4, "link_gbps": 25},
        "workload": {"model": "candle", "batch_per_server": 64},
        "parallelism": {"strategy": "data"},
    }
    slow = [{"a": 0, "b": 1, "gbps": 5}, {"a": 7, "b": 8, "gbps": 5}, {"a": 4, "b": 9, "gbps": 5}]
    hetero = build_plan(parse_scenario({**scenario, "cables": slow}))
    choice = choose_allreduce(hetero, FOREST_SHARE_BYTES)
    assert choice.algorithm == "forest trees" and choice.shape == "trees" and choice.trees
    assert "different rates" in choice.reason
    iteration = iteration_schedule(hetero, IterationOptions(payload_scale=1e-3))
    assert iteration.params["allreduce"]["groups of 12"]["algorithm"] == choice.algorithm
    named = choose_allreduce(hetero, FOREST_SHARE_BYTES, algorithm="forest")  # topolab collective's
    assert named.algorithm == choice.algorithm and named.trees == choice.trees
    model = NetworkModel(hetero)
    unit = model.allreduce_unit_loads(1)
    assert unit.algorithm == choice.algorithm and unit.paths == len(choice.trees)
    # every tree edge carries its tree's share both ways: the busiest link per byte is 1 / tau
    assert (unit.loads / model.capacity).max() == pytest.approx(1 / choice.packing.tau, rel=1e-3)
    uniform = build_plan(parse_scenario(scenario))
    assert NetworkModel(uniform).allreduce_unit_loads(1).algorithm == "multi-ring"
