"""The per-destination allocation LP: hand-computable optima, never worse than single-path,
capacities respected, paths are cable paths; the predictor follows a send's plane."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner.bandwidth.multipath as bandwidth
from contract.errors import UsageError
from contract.network import Link, Network, PairAllocation, PathShare, circulant_network
from contract.physics import tcp_goodput_fraction
from contract.schedule import ScheduleBuilder
from planner import build_plan, load_scenario
from planner.bandwidth.multipath import (
    allocate_bandwidth,
    allocate_for_plan,
    cable_capacity,
    embedding_alltoall_traffic,
    iteration_mp_traffic,
)
from planner.collectives.p2p import add_p2p_transfers
from planner.cost.predict import plan_network, predict

GBIT = 1e9 / 8  # bytes in one Gbit
SCENARIOS = ("topoopt-12", "expander-12", "switch-12")
EMULATED_BPS = 100e6


def _with_links(network: Network, links: list[Link]) -> Network:
    return dataclasses.replace(network, links=tuple(links))


def test_opposite_corner_of_a_4_cycle_uses_both_sides():
    result = allocate_bandwidth(circulant_network(4, (1,), link_gbps=1.0), {(0, 2): GBIT})
    assert result.seconds == pytest.approx(0.5, rel=1e-6)  # two disjoint 1 Gbit/s paths
    assert result.single_path_seconds == pytest.approx(1.0)
    (pair,) = result.allocation
    assert sorted(s.path for s in pair.paths) == [(0, 1, 2), (0, 3, 2)]


def test_a_slow_direct_cable_gets_help_from_the_long_way_round():
    ring = circulant_network(4, (1,), link_gbps=1.0)
    slow = _with_links(ring, [Link(0, 1, 0.5)] + [link for link in ring.links if {link.a, link.b} != {0, 1}])
    result = allocate_bandwidth(slow, {(0, 1): GBIT})
    assert result.seconds == pytest.approx(1 / 1.5, rel=1e-6)  # 0.5 direct + 1 via 3, 2
    assert result.single_path_seconds == pytest.approx(2.0)
    rates = {s.path: s.gbps for s in result.allocation[0].paths}
    assert rates == pytest.approx({(0, 1): 0.5, (0, 3, 2, 1): 1.0}, rel=1e-6)


def test_parallel_cables_of_different_rates_add_up():
    pair = Network(2, 0, (Link(0, 1, 1.0), Link(0, 1, 2.0)), circulant_network(2, (1,)).routes, 1.0, 1.0)
    result = allocate_bandwidth(pair, {(0, 1): 3 * GBIT})
    assert result.seconds == pytest.approx(1.0, rel=1e-6)
    assert result.single_path_seconds == pytest.approx(1.0)


def test_uniform_alltoall_on_a_4_cycle_meets_the_hop_count_bound():
    # every server: 2 neighbours at 1 hop, 1 at 2 hops = 4 D hop-bytes; 8 directed cables
    result = allocate_bandwidth(
        circulant_network(4, (1,), link_gbps=1.0), {(s, d): GBIT for s in range(4) for d in range(4) if s != d}
    )
    assert result.seconds == pytest.approx(2.0, rel=1e-6)
    assert result.single_path_seconds == pytest.approx(3.0)  # the opposite pair shares a side


def test_rotation_reduced_lp_equals_the_full_lp(monkeypatch):
    network = circulant_network(12, (1, 5), link_gbps=25.0)
    traffic = {(s, d): 1e6 * (1 + (d - s) % 12) for s in range(12) for d in range(12) if s != d}
    reduced = allocate_bandwidth(network, traffic)
    assert reduced.columns <= 11 * bandwidth.K_PATHS  # server 0's pairs only
    monkeypatch.setattr(bandwidth, "rotation_invariant", lambda *_: False)
    full = allocate_bandwidth(network, traffic)
    assert full.columns > reduced.columns
    assert reduced.seconds == pytest.approx(full.seconds, rel=1e-5)


def _check_allocation(network: Network, traffic, result) -> None:
    cap = cable_capacity(network)
    load: dict[tuple[int, int], float] = defaultdict(float)
    assert {(p.src, p.dst) for p in result.allocation} == {pair for pair, v in traffic.items() if v > 0}
    for pair in result.allocation:
        assert 1 <= len(pair.paths) <= bandwidth.K_PATHS
        for share in pair.paths:
            path = share.path
            assert path[0] == pair.src and path[-1] == pair.dst and len(set(path)) == len(path)
            assert share.gbps >= bandwidth.NEGLIGIBLE_SHARE * pair.gbps * 0.99
            for edge in zip(path, path[1:]):
                assert edge in cap  # a cable
                load[edge] += share.gbps
        # every pair finishes by the phase time at its rate
        assert traffic[(pair.src, pair.dst)] * 8 / 1e9 / pair.gbps <= result.seconds * (1 + 1e-9)
    for edge, gbps in load.items():
        assert gbps <= cap[edge] * (1 + 1e-9)
    assert result.seconds <= result.single_path_seconds * (1 + 1e-6)


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_phases_fit_and_never_lose_to_single_path(name):
    scenario = load_scenario(f"scenarios/{name}.toml")
    plan = build_plan(scenario)
    for traffic in (
        embedding_alltoall_traffic(plan),
        iteration_mp_traffic(plan),
    ):
        assert traffic
        _check_allocation(plan.network, traffic, allocate_for_plan(plan, traffic))


@settings(max_examples=15, deadline=None)
@given(
    st.dictionaries(
        st.tuples(st.integers(0, 11), st.integers(0, 11)).filter(lambda p: p[0] != p[1]),
        st.integers(1, 10**7),
        min_size=1,
        max_size=30,
    ),
    st.integers(1, 4),
)
def test_random_traffic_on_an_expander_fits(traffic, k):
    plan = build_plan(load_scenario("scenarios/expander-12.toml"))
    result = allocate_bandwidth(plan.network, traffic, k)
    _check_allocation(plan.network, traffic, result)


def test_predictor_sends_a_plane_along_its_path():
    base = build_plan(load_scenario("scenarios/topoopt-12.toml"))
    result = allocate_bandwidth(circulant_network(4, (1,), link_gbps=1.0), {(0, 2): GBIT})
    ring = circulant_network(4, (1,), link_gbps=1.0)
    plan = dataclasses.replace(
        base, servers=4, degree=2, links=ring.links, routes=ring.routes, link_gbps=1.0, allocation=result.allocation
    )
    b = ScheduleBuilder(4)
    b.buffer("x", 4096)
    for plane in (1, 2):
        b.send(0, f"s{plane}", 2, "x", 0, 4096, tag=plane, plane=plane)
        b.recv(2, f"r{plane}", 0, "x", 0, 4096, tag=plane, mode="copy")
    pred = predict(b.build(), plan_network(plan))
    assert set(pred.link_bytes) == {(0, 1), (1, 2), (0, 3), (3, 2)}
    assert all(v == pytest.approx(4096) for v in pred.link_bytes.values())


def test_predicted_embedding_phase_meets_the_lp_bound_on_topoopt_12():
    scenario = load_scenario("scenarios/topoopt-12.toml")
    plan = build_plan(scenario)
    traffic = embedding_alltoall_traffic(plan)
    result = allocate_for_plan(plan, traffic)
    allocated = dataclasses.replace(plan, allocation=result.allocation)
    transfers = [(s, d, int(v)) for (s, d), v in sorted(traffic.items())]
    seconds = {}
    for name, p in (("single", plan), ("planned", allocated)):
        b = ScheduleBuilder(12)
        add_p2p_transfers(b, transfers, network=p.network)
        network = plan_network(p, link_bps=EMULATED_BPS, alpha_s=0.0, reduce_bytes_per_s=1e18)
        seconds[name] = predict(b.build(), network).seconds
    bound = result.seconds * (plan.link_gbps * 1e9 / EMULATED_BPS) / tcp_goodput_fraction(9000)
    assert seconds["planned"] == pytest.approx(bound, rel=0.02)  # assured rates: every pair at its LP rate
    assert seconds["single"] > 2 * seconds["planned"]


def test_reservations_never_starve_a_plane_0_flow():
    ring = circulant_network(4, (1,), link_gbps=1.0)
    allocation = (PairAllocation(0, 1, (PathShare((0, 1), 1.0),)),)
    base = build_plan(load_scenario("scenarios/topoopt-12.toml"))
    plan = dataclasses.replace(
        base, servers=4, degree=2, links=ring.links, routes=ring.routes, link_gbps=1.0, allocation=allocation
    )
    b = ScheduleBuilder(4)
    b.buffer("x", 8192)
    b.send(0, "planned", 1, "x", 0, 4096, tag=1, plane=1)
    b.recv(1, "planned", 0, "x", 0, 4096, tag=1, mode="copy")
    b.send(0, "route", 1, "x", 4096, 4096, tag=2)
    b.recv(1, "route", 0, "x", 4096, 4096, tag=2, mode="copy")
    pred = predict(b.build(), plan_network(plan, alpha_s=0.0, reduce_bytes_per_s=1e18))
    fair = 2 * 4096 / (1e9 * tcp_goodput_fraction(9000) / 8)  # both share the cable equally
    assert pred.seconds == pytest.approx(fair, rel=1e-9)


def test_planned_routing_scenario_key_allocates_the_model_parallel_traffic(tmp_path):
    from planner import build_plan, load_scenario

    text = Path("scenarios/topoopt-12.toml").read_text()
    path = tmp_path / "planned.toml"
    path.write_text(text.replace("[topology]", '[topology]\nrouting = "planned"', 1))
    plan = build_plan(load_scenario(path))
    mp_pairs = {(f.src, f.dst) for f in plan.demand.mp}
    assert {(p.src, p.dst) for p in plan.allocation} == mp_pairs
    assert any(len(p.paths) > 1 for p in plan.allocation)
    assert any("routing 'planned'" in note for note in plan.notes)
    assert not build_plan(load_scenario("scenarios/topoopt-12.toml")).allocation
    path.write_text(text.replace("[topology]", '[topology]\nrouting = "widest"', 1))
    with pytest.raises(UsageError, match="routing"):
        load_scenario(path)
