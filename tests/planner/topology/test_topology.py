"""Property tests: every planned topology has its shape, is connected, and every route is a
valid path over existing cables that ends at its destination and is shortest."""

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from planner import Plan, build_plan, parse_scenario
from planner.model.zoo import MODELS


def _graph(plan: Plan) -> nx.MultiGraph:
    g = nx.MultiGraph()
    g.add_nodes_from(range(plan.nodes))
    g.add_edges_from((l.a, l.b) for l in plan.links)
    return g


def check_plan(plan: Plan) -> None:
    g = _graph(plan)
    assert nx.is_connected(g)
    if plan.topology == "switch":
        assert all(g.degree(i) == 1 for i in range(plan.servers))
    else:
        # every port used, except one when servers x degree is odd (no graph uses them all)
        assert all(g.degree(i) <= plan.degree for i in range(plan.servers)), dict(g.degree())
        dark = sum(plan.degree - g.degree(i) for i in range(plan.servers))
        assert dark == (plan.servers * plan.degree) % 2, dict(g.degree())
        assert any("left unused" in note for note in plan.notes) == bool(dark)
    simple = nx.Graph(g)
    dist = dict(nx.all_pairs_shortest_path_length(simple))
    nh = plan.next_hop
    for src in range(plan.servers):
        for dst in range(plan.servers):
            if src == dst:
                continue
            path = plan.path(src, dst)
            assert path[0] == src and path[-1] == dst
            assert all(simple.has_edge(a, b) for a, b in zip(path, path[1:])), path
            assert len(path) - 1 == dist[src][dst]  # shortest
    assert (np.diag(nh) == -1).all()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(n=5, half=2, kind="topoopt", model="ncf", strategy="hybrid")  # odd n: a server unmatched twice
@given(
    n=st.integers(5, 40),
    half=st.integers(1, 3),
    kind=st.sampled_from(["topoopt", "expander", "ring"]),
    model=st.sampled_from(MODELS),
    strategy=st.sampled_from(["data", "hybrid"]),
)
def test_direct_connect_plans_are_valid(n, half, kind, model, strategy):
    d = 2 * half
    if d >= n:
        d = 2
    mp = next(m for m in (2, 1) if n % m == 0)
    s = parse_scenario(
        {
            "cluster": {"servers": n, "degree": d},
            "topology": {"kind": kind},
            "workload": {"model": model},
            "parallelism": {"strategy": strategy, "mp_degree": mp},
        }
    )
    check_plan(build_plan(s))


@pytest.mark.parametrize("n", [9, 12, 20, 36])
def test_torus_and_switch(n):
    for kind in ("torus", "switch"):
        s = parse_scenario({"cluster": {"servers": n, "degree": 4}, "topology": {"kind": kind}})
        plan = build_plan(s)
        check_plan(plan)
    assert (
        build_plan(
            parse_scenario({"cluster": {"servers": n, "degree": 4}, "topology": {"kind": "switch"}})
        ).summary.diameter
        == 2
    )


def test_hybrid_dense_model_gets_subgroup_rings_and_matchings():
    s = parse_scenario(
        {
            "cluster": {"servers": 12, "degree": 4},
            "workload": {"model": "resnet50"},
            "parallelism": {"strategy": "hybrid", "mp_degree": 2},
        }
    )
    plan = build_plan(s)
    check_plan(plan)
    sizes = sorted(len(g.members) for g in plan.demand.allreduce)
    assert sizes == [6, 6, 12]  # two coset groups of the sharded layers + the replicated rest
    assert plan.extra["d_mp"] > 0  # activation traffic inside blocks got matching cables
    block_pairs = {(a, a + 1) for a in range(0, 12, 2)}
    mp_cables = [(min(l.a, l.b), max(l.a, l.b)) for l in plan.links][plan.extra["d_allreduce"] * 6 :]
    assert mp_cables and all(c in block_pairs for c in mp_cables)


def test_expander_is_seeded():
    def plan(seed):
        return build_plan(
            parse_scenario({"cluster": {"servers": 20, "degree": 4}, "topology": {"kind": "expander", "seed": seed}})
        )

    assert plan(3).links == plan(3).links
    assert plan(3).links != plan(4).links


@pytest.mark.parametrize("kind", ["topoopt", "switch", "expander", "torus", "ring"])
def test_plan_json_round_trip(kind):
    s = parse_scenario({"cluster": {"servers": 16, "degree": 4}, "topology": {"kind": kind}})
    plan = build_plan(s)
    again = Plan.from_json(plan.to_json())
    assert again == plan
    assert (again.next_hop == plan.next_hop).all()
    assert again.path(0, 9) == plan.path(0, 9)


def test_large_plan_routes_are_compact():
    s = parse_scenario(
        {
            "cluster": {"servers": 1024, "degree": 8},
            "workload": {"model": "resnet50"},
            "parallelism": {"strategy": "data"},
        }
    )
    plan = build_plan(s)
    assert plan.routes.kind == "circulant" and len(plan.routes.first_stride) == 1024
    assert len(plan.to_json()) < 200_000
    hops = [len(plan.path(0, v)) - 1 for v in range(1, 1024)]
    assert max(hops) == plan.summary.diameter


def test_full_group_keeps_a_ring_when_subgroups_dominate():
    from planner.topology.finder import split_ports

    # proportional shares would give every port to the groups of 16 (cosets, disconnected)
    assert split_ports(4, {128: 1.0, 16: 50.0}) == {128: 2, 16: 2}
    assert split_ports(8, {12: 115.0, 6: 21.0}) == {12: 6, 6: 2}  # unchanged when both get ports
    assert split_ports(2, {128: 1.0, 16: 9.0}) == {16: 2}  # one stride only: proportional
    assert split_ports(4, {12: 1.0, 6: 1.0}, "released") == {12: 4}


@pytest.mark.parametrize("n", [5, 7, 9, 11, 13])
@pytest.mark.parametrize("model", ["ncf", "dlrm", "resnet50"])
def test_odd_n_uses_every_port(n, model):
    """Odd n: matchings leave a server out; it takes its free ports by splitting an MP cable."""
    s = parse_scenario(
        {
            "cluster": {"servers": n, "degree": 4},
            "workload": {"model": model},
            "parallelism": {"strategy": "hybrid", "mp_degree": 1},
        }
    )
    plan = build_plan(s)
    check_plan(plan)
    assert not any("left unused" in note for note in plan.notes)


def test_absorb_free_ports_splits_a_model_parallel_cable():
    from planner.topology.mp_matching import absorb_free_ports

    ring = [(i, (i + 1) % 5) for i in range(5)]
    mp = [(0, 2), (1, 3), (0, 3), (1, 2)]  # server 4 was left out of both rounds
    out = absorb_free_ports(5, 4, ring, mp)
    degree = [0] * 5
    for a, b in ring + out:
        degree[a] += 1
        degree[b] += 1
    assert degree == [4, 4, 4, 4, 4]


def test_connect_rejects_degree_one_in_one_line():
    from contract.errors import UsageError
    from planner.topology.connectivity import UnconnectableDegreeError, connect

    matching = [(2 * i, 2 * i + 1) for i in range(6)]
    with pytest.raises(UnconnectableDegreeError, match="degree 1") as err:
        connect(12, matching)
    assert isinstance(err.value, UsageError) and "\n" not in str(err.value)
