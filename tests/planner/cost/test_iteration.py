"""The iteration schedule executes the plan's strategy: its model-parallel transfers are the
plan's MP demand, its AllReduce buckets the demand's groups, for every topology kind and
strategy (the search's choice included), and the predictor runs exactly what the workers get."""

from __future__ import annotations

from collections import defaultdict

import pytest

from contract.plan import Plan
from planner import build_plan, parse_scenario
from planner.collectives import simulate_and_verify
from planner.cost.iteration import IterationOptions, iteration_schedule
from planner.cost.predict import plan_network, predict
from workers.spec import specs_for_schedule

N, D = 12, 4
KINDS = ("topoopt", "switch", "expander", "torus", "ring")
STRATEGIES = ("data", "hybrid", "search")
BATCH = 64


def _plan(kind: str, strategy: str, model: str) -> Plan:
    return build_plan(
        parse_scenario(
            {
                "cluster": {"servers": N, "degree": D},
                "topology": {"kind": kind},
                "workload": {"model": model, "batch_per_server": BATCH},
                "parallelism": {"strategy": strategy, "search_steps": 30, "seed": 3},
            }
        )
    )


def _mp_bytes(schedule) -> dict[tuple[int, int], int]:
    out: dict[tuple[int, int], int] = defaultdict(int)
    for rank, prog in enumerate(schedule.programs):
        for stream, ops in prog.items():
            if stream.startswith("mp>"):
                for op in ops:
                    assert op.kind == "send" and stream == f"mp>{op.peer}"
                    out[(rank, op.peer)] += op.length
    return dict(out)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("model", ["dlrm", "candle"])
def test_schedule_executes_the_plans_strategy(kind, strategy, model):
    plan = _plan(kind, strategy, model)
    assert Plan.from_json(plan.to_json()).placement == plan.placement
    schedule = iteration_schedule(plan, IterationOptions(payload_scale=1.0))
    uses_mp = any(op.owner >= 0 or op.mp > 1 for op in plan.placement.operators)
    assert bool(plan.demand.mp) == uses_mp
    if strategy == "hybrid":
        assert uses_mp  # both models have a model-parallel hybrid

    # Model-parallel bytes per ordered pair, and one stream per pair, as the demand says.
    wanted = {(f.src, f.dst): f.bytes for f in plan.demand.mp}
    got = _mp_bytes(schedule)
    assert set(got) == set(wanted)
    transfers_per_pair = 2 * len(plan.placement.operators)  # forward and backward of each operator at most
    for pair, nbytes in wanted.items():
        assert abs(got[pair] - nbytes) <= 4 * transfers_per_pair + 1, pair
    for rank, prog in enumerate(schedule.programs):
        assert {s for s in prog if s.startswith("mp>")} == {f"mp>{d}" for (s, d) in wanted if s == rank}

    # AllReduce: every group of the demand reduces its bytes in the schedule's buckets.
    reduced: dict[tuple[int, ...], int] = defaultdict(int)
    for check in schedule.checks:
        if check.kind == "allreduce":
            for group in check.groups:
                reduced[tuple(group)] += check.length
    for group in plan.demand.allreduce:
        assert reduced[group.members] == pytest.approx(group.bytes, abs=4 * schedule.params["buckets"] + 1)
    assert set(reduced) == {g.members for g in plan.demand.allreduce}


@pytest.mark.parametrize("kind", KINDS)
def test_predictor_and_workers_get_the_same_schedule(kind):
    plan = _plan(kind, "search", "dlrm")
    schedule = iteration_schedule(plan, IterationOptions(payload_scale=1e-3))
    assert simulate_and_verify(schedule) == []
    specs = specs_for_schedule(schedule.to_dict(), ["127.0.0.1"] * N, "ipc:///tmp/unused")
    for rank, spec in enumerate(specs):  # the workers receive the schedule's programs op for op
        assert spec.streams == schedule.to_dict()["programs"][rank]
    pred = predict(schedule, plan_network(plan))
    # The predictor moved exactly the schedule's bytes, each over every hop of its route.
    sent = sum(
        op.length * (len(plan.path(rank, op.peer)) - 1)
        for rank, prog in enumerate(schedule.programs)
        for ops in prog.values()
        for op in ops
        if op.kind == "send"
    )
    assert sum(pred.link_bytes.values()) == pytest.approx(sent, rel=1e-9)


def test_search_plan_keeps_its_model_parallel_flows():
    # DLRM's table placement beats data parallelism at this batch: the search's plan carries
    # the MP flows and the schedule runs them (before the fix it ran pure data parallelism).
    plan = _plan("topoopt", "search", "dlrm")
    assert plan.placement.tables and plan.demand.mp
    schedule = iteration_schedule(plan)
    assert sum(_mp_bytes(schedule).values()) == pytest.approx(plan.demand.mp_bytes, rel=1e-3)


@pytest.mark.parametrize("kind", KINDS)
def test_cost_model_workers_and_collective_use_the_same_rings(kind):
    from planner.collectives.from_plan import allreduce_for_plan, allreduce_rings
    from planner.cost.costmodel import NetworkModel

    plan = _plan(kind, "data", "candle")
    workers = iteration_schedule(plan, IterationOptions(payload_scale=1e-4))
    worker_rings = {s for s in workers.programs[0] if s.startswith("ar")}
    collective = allreduce_for_plan(plan, "topoopt", 4 * N * 64)
    cost_model_rings = NetworkModel(plan).allreduce_unit_loads(1).paths
    assert cost_model_rings == len(worker_rings) == len(collective.programs[0]) == len(allreduce_rings(plan))
    if kind == "expander":  # the plan's ring order, both directions (the cost model used d/2 tours)
        assert cost_model_rings == 2


def test_search_records_the_prediction_of_the_executed_schedule():
    plan = _plan("topoopt", "search", "dlrm")
    schedule = iteration_schedule(plan)
    executed = plan.extra["search"]["executed_iteration_s"]
    assert executed == pytest.approx(predict(schedule, plan_network(plan)).seconds, rel=1e-12)
