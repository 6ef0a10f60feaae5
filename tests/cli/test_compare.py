"""`topolab compare` on the emulated network (root): every arm runs at one time scale, the
fastest arm's, and the table, compare.json and each arm's results.json say it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
COMPARE_TIMEOUT_S = 150


@pytest.mark.timeout(COMPARE_TIMEOUT_S + 20)
def test_compare_runs_every_arm_at_the_switch_arms_time_scale(tmp_path: Path) -> None:
    # on its own TopoOpt's 25 Gbps links run at x250 and the switch's 100 Gbps port at x1000
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "topolab", "compare", "scenarios/smoke-12.toml", "--topologies", "topoopt,switch",
         "--iterations", "1", "--out", str(out), "--run-dir", str(tmp_path / "run")],
        cwd=REPO, capture_output=True, text=True, timeout=COMPARE_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    arms = {k: json.loads((out / k / "results.json").read_text())["emulation"] for k in ("topoopt", "switch")}
    assert {e["time_scale"] for e in arms.values()} == {1000.0}
    assert arms["topoopt"]["reference_gbps"] == arms["switch"]["reference_gbps"] == 100.0
    assert arms["topoopt"]["rates_mbps"] == [25.0] and arms["switch"]["rates_mbps"] == [100.0]  # as built
    doc = json.loads((out / "compare.json").read_text())
    assert doc["axis"] == {
        "time_scale": 1000.0,
        "fastest": "switch",
        "reference_gbps": {"topoopt": 100.0, "switch": 100.0},
    }
    assert [row["time_scale"] for row in doc["rows"]] == [1000.0, 1000.0]
    assert "time axis: every arm at time scale x1000 (the switch arm's)" in done.stdout
    assert "| x1000 |" in done.stdout
