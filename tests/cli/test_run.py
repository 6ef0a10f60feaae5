"""End to end on the real emulated network (root): the CI smoke run and an interrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]


def _root_links() -> set[str]:
    out = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0].split("@")[0] for line in out.splitlines() if line.strip()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _topolab(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "topolab", *args],
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kw,
    )


def test_smoke_run_end_to_end(tmp_path):
    before = _root_links()
    out = tmp_path / "out"
    t0 = time.monotonic()
    proc = _topolab("run", "scenarios/smoke-12.toml", "--out", str(out), "--run-dir", str(tmp_path / "run"))
    stdout, stderr = proc.communicate(timeout=120)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "complete"
    assert results["summary"]["verified"] is True
    assert results["summary"]["iterations"] == 2
    assert all(it["verified"] and it["measured_s"] > 0 for it in results["iterations"])
    assert results["predicted"]["emulated_s"] > 0 and results["calibration"]["op_overhead_s"] > 0
    assert results["emulation"]["time_scale"] == pytest.approx(250.0)
    for name in ("report.md", "topology.png", "iterations.png", "link_bytes.png"):
        assert (out / name).stat().st_size > 1000, name
    assert "verification passed" in stdout
    assert _root_links() == before
    assert not list((tmp_path / "run").glob("run-*.json"))
    print(f"smoke run took {elapsed:.1f} s")


def test_interrupted_run_writes_partial_results_and_leaves_nothing(tmp_path):
    before = _root_links()
    out = tmp_path / "out"
    run_dir = tmp_path / "run"
    proc = _topolab(
        "run", "scenarios/smoke-12.toml", "--out", str(out), "--iterations", "500", "--run-dir", str(run_dir)
    )
    pids: set[int] = set()
    deadline = time.monotonic() + 90
    seen_timed = False
    while time.monotonic() < deadline and not seen_timed:
        line = proc.stderr.readline()
        if not line:
            break
        seen_timed = " timed " in line
        for state in run_dir.glob("run-*.json"):
            try:
                pids |= {p["pid"] for p in json.loads(state.read_text()).get("procs", [])}
            except (ValueError, OSError):
                pass
    assert seen_timed, "the run never reached its timed iterations"
    assert pids, "no worker processes were recorded"
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "interrupted"
    assert 1 <= len(results["iterations"]) < 500
    assert (out / "report.md").exists()
    time.sleep(0.5)
    assert [p for p in pids if _alive(p)] == []
    assert _root_links() == before
    assert not list(run_dir.glob("run-*.json"))
