"""The all-to-all generator (single- and multipath), p2p transfers split over planes, and the
iteration's model-parallel transfers on an allocated plan: correct data, faster predictions."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import pytest

from planner import build_plan, load_scenario
from planner.bandwidth.multipath import allocate_for_plan, iteration_mp_traffic
from planner.collectives import simulate_and_verify
from planner.collectives.alltoall import alltoall, alltoall_for_plan
from planner.collectives.p2p import all_to_all, plane_pieces
from planner.cost.iteration import IterationOptions, iteration_schedule
from planner.cost.predict import plan_network, predict

NBYTES = 4096 * 4 + 12  # not a multiple of the planes' shares: pieces must stay item aligned
EMULATED_BPS = 100e6


def _plan(name: str):
    return build_plan(load_scenario(f"scenarios/{name}.toml"))


def _planned(plan, nbytes):
    traffic = {(s, d): float(nbytes) for s, d, _ in all_to_all(range(plan.servers), nbytes)}
    return dataclasses.replace(plan, allocation=allocate_for_plan(plan, traffic).allocation)


def test_single_alltoall_copies_every_pair_on_plane_0():
    schedule = alltoall(5, 64, "single")
    sends = [op for prog in schedule.programs for ops in prog.values() for op in ops if op.kind == "send"]
    assert len(sends) == 20 and {op.plane for op in sends} == {0}
    assert len(schedule.checks) == 20 and {c.kind for c in schedule.checks} == {"copy"}
    assert simulate_and_verify(schedule) == []


def test_planned_alltoall_splits_each_pair_by_rate_with_a_tag_per_plane():
    plan = _planned(_plan("topoopt-12"), NBYTES)
    network = plan.network
    schedule = alltoall(12, NBYTES, "planned", network)
    per_pair: dict[tuple[int, int], list] = defaultdict(list)
    for rank, prog in enumerate(schedule.programs):
        for ops in prog.values():
            for op in ops:
                if op.kind == "send":
                    per_pair[(rank, op.peer)].append(op)
    split = 0
    for (src, dst), ops in per_pair.items():
        pair = network.allocation_of(src, dst)
        assert sum(op.length for op in ops) == NBYTES and all(op.length % 4 == 0 for op in ops)
        assert {op.plane for op in ops} <= set(range(1, len(pair.paths) + 1))
        assert len({op.tag for op in ops}) == len(ops)
        for op in ops:  # each piece within one item of its rate's share
            share = pair.paths[op.plane - 1].gbps / pair.gbps
            assert abs(op.length - share * NBYTES) <= 4 * len(pair.paths)
        split += len(ops) > 1
    assert split > 0
    assert simulate_and_verify(schedule) == []
    assert simulate_and_verify(schedule, seed=3) == []


def test_planned_needs_an_allocation():
    with pytest.raises(ValueError, match="allocation"):
        alltoall(12, 64, "planned", _plan("topoopt-12").network)
    with pytest.raises(ValueError, match="routing"):
        alltoall(12, 64, "both")


def test_plane_pieces_without_allocation_is_the_whole_region():
    assert plane_pieces(None, 0, 1, 8, 400) == [(0, 8, 400)]


@pytest.mark.parametrize("name", ["topoopt-12", "expander-12"])
def test_planned_alltoall_is_predicted_faster(name):
    plan = _plan(name)
    planned = _planned(plan, NBYTES)
    single_s = predict(alltoall_for_plan(plan, NBYTES, "single"), plan_network(plan, EMULATED_BPS)).seconds
    planned_s = predict(alltoall(12, NBYTES, "planned", planned.network), plan_network(planned, EMULATED_BPS)).seconds
    assert planned_s < single_s / (1.4 if name == "topoopt-12" else 1.2)


def test_switch_alltoall_is_unchanged_by_planning():
    plan = _plan("switch-12")
    single = predict(alltoall_for_plan(plan, NBYTES, "single"), plan_network(plan, EMULATED_BPS)).seconds
    planned = _planned(plan, NBYTES)
    assert predict(alltoall(12, NBYTES, "planned", planned.network), plan_network(planned, EMULATED_BPS)).seconds == (
        pytest.approx(single, rel=1e-9)
    )


def test_iteration_transfers_use_the_plans_planes():
    plan = _plan("topoopt-12")
    allocated = dataclasses.replace(plan, allocation=allocate_for_plan(plan, iteration_mp_traffic(plan)).allocation)
    opts = IterationOptions(payload_scale=1e-3)
    single, planned = iteration_schedule(plan, opts), iteration_schedule(allocated, opts)
    planes = {op.plane for prog in planned.programs for ops in prog.values() for op in ops if op.kind == "send"}
    assert max(planes) >= 2
    assert {op.plane for prog in single.programs for ops in prog.values() for op in ops if op.kind == "send"} == {0}
    assert single.bytes_sent() == planned.bytes_sent()
    assert simulate_and_verify(planned) == []
