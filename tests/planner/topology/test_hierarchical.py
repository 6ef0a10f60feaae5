"""Hierarchical multi-dimensional networks: cables, routes, the hierarchical AllReduce
schedule (verified on data), and its predicted time against the LIBRA allocator's model."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from contract.errors import UsageError
from contract.physics import tcp_goodput_fraction
from contract.plan import Plan
from planner.bandwidth.libra import Collective, allocate, allreduce_workload, collective_bytes
from planner.collectives.hierarchical import PIPELINE_CHUNKS, hierarchical_allreduce, hierarchical_allreduce_for_plan
from planner.collectives.simulate import simulate_and_verify
from planner.cost.predict import plan_network, predict
from planner.topology.hierarchical import check_dims_blocks, coordinates, hierarchical_plan

MIB = 1 << 20
BUDGET_MBPS = 400.0


def _per_server_gbps(plan: Plan) -> dict[int, float]:
    total: dict[int, float] = defaultdict(float)
    for link in plan.links:
        total[link.a] += link.gbps
        total[link.b] += link.gbps
    return total


def test_fc_x_ring_cables_carry_each_dimensions_share():
    plan = hierarchical_plan([4, 3], ["fc", "ring"], 100.0, [0.8, 0.2])
    assert plan.servers == 12 and plan.switches == 0 and plan.degree == 3 + 2
    assert len(plan.links) == 3 * 6 + 4 * 3
    rates = Counter(round(l.gbps, 6) for l in plan.links)
    assert rates == {round(80 / 3, 6): 18, 10.0: 12}
    assert all(v == pytest.approx(100.0) for v in _per_server_gbps(plan).values())
    assert Plan.from_json(plan.to_json()) == plan


def test_two_member_ring_is_one_cable_and_switch_nodes_follow_the_servers():
    plan = hierarchical_plan([2, 3], ["ring", "switch"], 10.0, [0.5, 0.5])
    ring = [l for l in plan.links if l.b < plan.servers]
    assert [(l.a, l.b, l.gbps) for l in ring] == [(0, 1, 5.0), (2, 3, 5.0), (4, 5, 5.0)]
    assert plan.switches == 2
    assert sorted(l.b for l in plan.links if l.b >= plan.servers) == [6, 6, 6, 7, 7, 7]
    assert plan.path(0, 5) == [0, 1, 7, 5]  # dimension 0 first, then through the switch
    assert plan.summary.relayed_fraction == pytest.approx(2 / 5)  # switch-mates are not relayed


@pytest.mark.parametrize(("dims", "blocks"), [([4, 3], ["fc", "ring"]), ([4, 5, 2], ["ring", "ring", "switch"])])
def test_routes_are_dimension_ordered_shortest_paths(dims, blocks):
    plan = hierarchical_plan(dims, blocks, 1.0, [1 / len(dims)] * len(dims))
    coords = coordinates(dims)
    per_dim_hops = {"fc": lambda p, a, b: 1, "switch": lambda p, a, b: 2}
    for u in range(plan.servers):
        for v in range(plan.servers):
            if u == v:
                continue
            servers_on_path = [x for x in plan.path(u, v) if x < plan.servers]
            changed = [int((coords[a] != coords[b]).argmax()) for a, b in zip(servers_on_path, servers_on_path[1:])]
            assert changed == sorted(changed)
            expected = 0
            for d, (p, block) in enumerate(zip(dims, blocks)):
                a, b = int(coords[u][d]), int(coords[v][d])
                if a != b:
                    ring = min((a - b) % p, (b - a) % p)
                    expected += ring if block == "ring" else per_dim_hops[block](p, a, b)
            assert len(plan.path(u, v)) - 1 == expected


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: hierarchical_plan([4, 3], ["fc", "torus"], 1.0, [0.5, 0.5]), "topology.blocks"),
        (lambda: hierarchical_plan([4, 1], ["fc", "ring"], 1.0, [0.5, 0.5]), r"topology.dims\[1\]"),
        (lambda: hierarchical_plan([4, 3], ["fc", "ring"], 1.0, [0.5, 0.4]), "topology.shares"),
        (lambda: hierarchical_plan([4, 3], ["fc", "ring"], 0.0, [0.5, 0.5]), "topology.budget_gbps"),
        (lambda: check_dims_blocks([4, 3], ["fc", "ring"], servers=16), "topology.dims"),
    ],
)
def test_bad_inputs_raise_one_line_usage_errors(call, field):
    with pytest.raises(UsageError, match=field) as err:
        call()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("dims", "blocks"),
    [([4, 3], ["fc", "ring"]), ([2, 3, 2], ["ring", "switch", "fc"]), ([3, 4], ["switch", "ring"]), ([5], ["ring"])],
)
@pytest.mark.parametrize("chunks", [1, 3, PIPELINE_CHUNKS])
def test_hierarchical_allreduce_reduces_correctly(dims, blocks, chunks):
    schedule = hierarchical_allreduce(dims, blocks, 4 * 1001, chunks)  # uneven shards on purpose
    assert schedule.checks[0].kind == "allreduce"
    for seed in (0, 1):
        assert simulate_and_verify(schedule, seed) == []


def test_schedule_sends_the_allocators_bytes_per_dimension():
    dims, blocks, nbytes = [4, 3, 2], ["fc", "ring", "switch"], 4 * 24 * 1000
    schedule = hierarchical_allreduce(dims, blocks, nbytes, 5)
    coords = coordinates(dims)
    sent = defaultdict(float)
    for rank, program in enumerate(schedule.programs):
        for ops in program.values():
            for op in ops:
                if op.kind == "send":
                    sent[int((coords[rank] != coords[op.peer]).argmax())] += op.length
    expected = collective_bytes(dims, Collective("allreduce", nbytes))
    assert [sent[d] / schedule.ranks for d in range(3)] == pytest.approx(expected.tolist())


def test_predicted_pipelined_time_is_near_the_allocators_model():
    """12 servers as 4 x 3 fc x ring, 400 Mbit/s per server emulated, 64 MiB AllReduce."""
    nbytes = 64 * MIB
    budget_gbps = BUDGET_MBPS / 1e3
    libra = allocate([4, 3], allreduce_workload(nbytes), budget_gbps, mode="pipelined")
    model_s = libra.seconds / tcp_goodput_fraction(9000)  # the model counts raw rate, TCP gets this share

    def predicted(shares, chunks):
        plan = hierarchical_plan([4, 3], ["fc", "ring"], 100.0, shares)
        return predict(hierarchical_allreduce_for_plan(plan, nbytes, chunks), plan_network(plan, BUDGET_MBPS * 1e6))

    pipelined = predicted(libra.shares, PIPELINE_CHUNKS).seconds
    assert model_s <= pipelined <= 1.05 * model_s
    equal = predicted([0.5, 0.5], PIPELINE_CHUNKS).seconds
    assert equal / pipelined >= 1.45
    sequential = allocate([4, 3], allreduce_workload(nbytes), budget_gbps, mode="sequential")
    one_after_another = predicted(sequential.shares, 1).seconds
    assert one_after_another == pytest.approx(sequential.seconds / tcp_goodput_fraction(9000), rel=0.05)
