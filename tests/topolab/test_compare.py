"""`topolab compare`: each arm's verdict (the prediction held its tolerance or not, and whether
the workers' own cost weighs on it), the exit code, and (as root) a whole comparison."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.sample_results import smoke_results
from topolab.cli import main
from topolab.results.comparison import verdict
from topolab.results.run_results import WORKER_COST_NOTABLE, Calibration

REPO = Path(__file__).resolve().parents[2]


def _row(over: bool, share: float | None) -> dict:
    return {"over_tolerance": over, "tolerance": 0.25, "worker_cost_share": share}


def test_verdict_flags_a_missed_prediction_and_a_heavy_worker_cost():
    assert verdict(_row(False, 0.05)) == "held (within 25%)"
    assert verdict(_row(True, None)).startswith("**MISSED** (over 25%)")
    heavy = verdict(_row(False, WORKER_COST_NOTABLE + 0.1))
    assert "held" in heavy and "workers' cost 35% of the iteration: partly the emulator" in heavy
    assert "workers' cost" not in verdict(_row(False, WORKER_COST_NOTABLE - 0.01))


def test_worker_cost_share_is_the_calibrated_cost_on_the_critical_path_over_the_iteration():
    results = smoke_results("complete", [2.0, 2.0, 2.0], 2.0)
    assert results.worker_cost_share() is None  # not calibrated
    measured_s = results.summarize().median_measured_s
    results.calibration = Calibration(op_overhead_s=100e-6, twin_seconds=0.01, critical_ops=50, twin_ops=400)
    assert results.worker_cost_share() == pytest.approx(100e-6 * 50 / measured_s)


@pytest.mark.root
def test_compare_with_an_arm_over_its_tolerance_flags_it_and_exits_3(tmp_path, capsys):
    scenario = tmp_path / "tight.toml"
    text = (REPO / "scenarios" / "smoke-12.toml").read_text().replace("tolerance = 1.0", "tolerance = 0.0")
    scenario.write_text(text)
    out = tmp_path / "out"
    code = main(["compare", str(scenario), "--topologies", "topoopt,ring", "--iterations", "1", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 3, captured.err
    doc = json.loads((out / "compare.json").read_text())
    assert [r["over_tolerance"] for r in doc["rows"]] == [True, True]  # no prediction is exact
    assert all(r["worker_cost_share"] is not None for r in doc["rows"])
    assert "**MISSED**" in (out / "compare.md").read_text() and "missed its tolerance on topoopt, ring" in captured.err
