"""The flow-level simulator against the closed forms of docs/algorithms.md section 6."""

import pytest

from contract.physics import DEFAULT_MTU, tcp_goodput_fraction
from planner import build_plan, parse_scenario
from planner.cost.costmodel import CostConfig, NetworkModel, Simulator
from planner.model.opgraph import Operator, OpGraph
from planner.strategy.strategies import OpChoice, data_parallel, strategy_demand

GOODPUT = tcp_goodput_fraction(DEFAULT_MTU)  # the cost model carries TCP goodput
MB = 1 << 20


def _scenario(n=12, d=4, kind="topoopt", gbps=100.0, latency=1.0, **topology):
    return parse_scenario(
        {
            "cluster": {"servers": n, "degree": d, "link_gbps": gbps, "latency_us": latency},
            "workload": {"model": "resnet50"},
            "parallelism": {"strategy": "data"},
            "topology": {"kind": kind, **topology},
        }
    )


def _one_weight(nbytes: int) -> OpGraph:
    return OpGraph("toy", (Operator("w", "dense", nbytes // 4, 0.0, 4),))


def test_ring_allreduce_on_own_rings_matches_the_formula():
    n, d, gbps, alpha = 12, 4, 100.0, 1e-6
    s = _scenario(n, d)
    g = _one_weight(40 * MB)
    plan = build_plan(s, strategy_demand(g, data_parallel(g), n, 1))
    sim = Simulator(plan, g, CostConfig(batch=1, bucket_bytes=1 << 40))
    t = sim.iteration(data_parallel(g)).iteration_s
    k, rings, S, B = n, d, 40 * MB, gbps * 1e9 / 8 * GOODPUT  # strides ±1, ±5: P = 4 rings
    assert t == pytest.approx(2 * (k - 1) * S / (k * rings * B) + 2 * (k - 1) * alpha, rel=1e-9)


def test_switch_allreduce_uses_the_full_port_and_pays_two_hops():
    n, d, gbps, alpha = 8, 2, 50.0, 1e-6
    s = _scenario(n, d, kind="switch", gbps=gbps)
    g = _one_weight(16 * MB)
    plan = build_plan(s, strategy_demand(g, data_parallel(g), n, 1))
    t = Simulator(plan, g, CostConfig(batch=1, bucket_bytes=1 << 40)).iteration(data_parallel(g)).iteration_s
    B = d * gbps * 1e9 / 8 * GOODPUT
    assert t == pytest.approx(2 * (n - 1) * 16 * MB / (n * B) + 2 * (n - 1) * 2 * alpha, rel=1e-9)


def test_relayed_subgroup_rings_pay_the_forwarding_tax():
    # Groups of 6 on cosets {s, s+2, ...} next to a heavy full-group AllReduce, d = 8.
    # Paper split: the groups of 6 get one stride of their own (direct ring edges).
    # Released split: every port goes to the heaviest class (the full group), so each ring
    # edge of offset 2 is routed by coin change over the full group's strides and crosses
    # two links, loading both with all its bytes.
    n = 12
    ops = (Operator("full", "dense", 60 * MB // 4, 0.0, 4), Operator("sub", "dense", 12 * MB // 4, 0.0, 4, ("full",)))
    g = OpGraph("toy", ops)
    st = (OpChoice(mp=1), OpChoice(mp=2))
    seen = {}
    for rule in ("paper", "released"):
        s = _scenario(n, 8, degree_split=rule)
        plan = build_plan(s, strategy_demand(g, st, n, 1))
        net = NetworkModel(plan)
        unit = net.allreduce_unit_loads(2)
        loads, rings, hops, k = unit.loads, unit.paths, unit.hops, unit.group_size
        assert unit.algorithm == "multi-ring" and unit.steps == 2 * (k - 1)
        assert k == 6
        per_ring_edge = 2 * (k - 1) / k / rings
        assert loads.sum() == pytest.approx(per_ring_edge * n * rings * hops)  # every hop carries it all
        seen[rule] = (hops, rings, loads.max())
    assert seen["paper"][0] == 1 and seen["released"][0] == 2
    # Relayed: 2 rings (both directions) over 2 hops each, on links shared by the full
    # group's rings; own rings: 2 rings on their own stride. Max load per byte is higher.
    assert seen["released"][2] > seen["paper"][2]


def test_transfer_is_segmented_and_pipelined_over_hops():
    # One table on server 0 sends lookups to everyone on a plain ring (n=6, +-1): the
    # farthest server is 3 hops away; the busiest link carries the bytes of every server
    # it relays for.
    n, gbps, alpha = 6, 10.0, 2e-6
    s = _scenario(n, 2, kind="ring", gbps=gbps, latency=2.0)
    table = Operator("t", "embedding", 1000, 0.0, 4 * MB)
    g = OpGraph("toy", (table,))
    st = (OpChoice(owner=0),)
    plan = build_plan(s, strategy_demand(g, st, n, 1))
    sim = Simulator(plan, g, CostConfig(batch=1))
    r = sim.iteration(st)
    B = gbps * 1e9 / 8 * GOODPUT
    # Clockwise and counter-clockwise links out of server 0 carry 1 + 1 + (1 for the
    # 3-hop server on one side) = 3 x 4 MiB at most; fill: 3 hops, (3-1) segments.
    one_way = 3 * 4 * MB / B + 3 * alpha + 2 * MB / B
    assert r.forward_s == pytest.approx(one_way, rel=1e-9)
    assert r.iteration_s == pytest.approx(2 * one_way, rel=1e-9)  # gradients come back the same way


def test_links_are_serial_resources():
    # Two AllReduce buckets of one layout on the same rings take twice as long as one.
    n = 12
    s = _scenario(n, 4)
    ops = (Operator("a", "dense", 30 * MB // 4, 0.0, 4), Operator("b", "dense", 30 * MB // 4, 0.0, 4, ("a",)))
    g = OpGraph("toy", ops)
    plan = build_plan(s, strategy_demand(g, data_parallel(g), n, 1))
    two = Simulator(plan, g, CostConfig(batch=1, bucket_bytes=1)).iteration(data_parallel(g))
    one = Simulator(plan, g, CostConfig(batch=1, bucket_bytes=1 << 40)).iteration(data_parallel(g))
    alpha_term = 2 * (n - 1) * 1e-6
    assert two.iteration_s - 2 * alpha_term == pytest.approx(one.iteration_s - alpha_term, rel=1e-9)


def test_allreduce_overlaps_backward_compute():
    # Gradients of the last layer are reduced while earlier layers compute their backward.
    n = 12
    s = _scenario(n, 4)
    ops = (Operator("a", "dense", 1000, 2e9, 4), Operator("b", "dense", 40 * MB // 4, 1e6, 4, ("a",)))
    g = OpGraph("toy", ops)
    plan = build_plan(s, strategy_demand(g, data_parallel(g), n, 1))
    r = Simulator(plan, g, CostConfig(batch=64, device_tflops=10.0)).iteration(data_parallel(g))
    assert r.iteration_s < r.compute_s + r.allreduce_s
    assert r.iteration_s >= max(r.compute_s, r.allreduce_s)
