"""The zero-payload twin of `topolab run`'s calibration: the iteration's ops with no payload,
and K, its ops on the critical path, from the one iteration prediction (no root needed)."""

from __future__ import annotations

from dataclasses import replace

from planner import build_plan, load_scenario
from planner.cost.iteration import IterationOptions, iteration_schedule
from topolab.common.calibrate import zero_payload_twin


def test_twin_has_the_iterations_ops_and_k_counts_whole_ops(scenario_dir):
    plan = build_plan(load_scenario(scenario_dir / "topoopt-12.toml"))
    opts = IterationOptions(time_scale=250.0, payload_scale=1e-2)
    twin, k = zero_payload_twin(plan, opts)
    assert twin.op_count() == iteration_schedule(plan, opts).op_count()
    full = iteration_schedule(plan, replace(opts, payload_scale=1.0))
    assert max(twin.bytes_sent()) * 1000 < max(full.bytes_sent())
    assert all(op.seconds == 0.0 for prog in twin.programs for op in prog.get("compute", []))
    # links take no time and every send and recv costs 1, taking turns on its rank's processor:
    # K is a whole number of ops, at least the busiest rank's
    busiest = max(sum(op.kind != "compute" for ops in prog.values() for op in ops) for prog in twin.programs)
    assert k == round(k) and k >= busiest


def test_with_shared_cores_k_counts_the_ops_each_core_runs(scenario_dir):
    # twelve workers on two cores (`topolab run` on one machine): every send and recv of every
    # rank runs on one of the two, so K is at least half of all ops, above one rank's count
    plan = build_plan(load_scenario(scenario_dir / "topoopt-12.toml"))
    opts = IterationOptions(time_scale=250.0, payload_scale=1e-2)
    twin, alone = zero_payload_twin(plan, opts)
    _, shared = zero_payload_twin(plan, opts, cores=2)
    ops = sum(op.kind != "compute" for prog in twin.programs for ops in prog.values() for op in ops)
    assert shared >= ops / 2 > alone
    assert zero_payload_twin(plan, opts, cores=12)[1] == alone  # a core per rank: as before
