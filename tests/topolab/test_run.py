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
    assert results["emulation"]["mtu"] == results["predicted"]["mtu"] == 9000  # one machine: the scenario's
    env = results["environment"]
    assert env["cpus"] == os.cpu_count() and env["kernel"] and len(env["scenario_sha256"]) == 64
    assert results["tolerance"] == 1.0  # the smoke scenario's own
    for name in ("report.md", "topology.png", "iterations.png", "link_bytes.png"):
        assert (out / name).stat().st_size > 1000, name
    assert "verification passed" in stdout
    # the cables' tx counters carry what the schedule sends: same directed links, same bytes
    # give or take headers and ACKs (small messages here: ~9% on top of the payload)
    measured = {(r["src"], r["dst"]): r["bytes"] for r in results["measured"]["link_bytes"]}
    predicted = {(r["src"], r["dst"]): r["bytes"] for r in results["predicted"]["link_bytes"]}
    assert {k for k, v in measured.items() if v > 0.05 * max(predicted.values())} == set(predicted)
    assert sum(measured.values()) == pytest.approx(sum(predicted.values()), rel=0.15)
    assert "Bytes on the cables per timed iteration" in (out / "report.md").read_text()
    # when each phase ended, from the workers' stream timestamps: within the iteration, the
    # AllReduce last (it ends the smoke iteration), beside the prediction's phases
    for it in results["iterations"]:
        ends = it["phase_end_s"]
        assert set(ends) == set(results["predicted"]["phase_end_s"])
        assert 0 < min(ends.values()) and ends["AllReduce"] == pytest.approx(it["measured_s"], rel=0.05)
    assert "| AllReduce |" in (out / "report.md").read_text()
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


def _state_pids(run_dir: Path) -> set[int]:
    pids: set[int] = set()
    for state in run_dir.glob("run-*.json"):
        try:
            pids |= {p["pid"] for p in json.loads(state.read_text()).get("procs", [])}
        except (ValueError, OSError):
            pass
    return pids


def test_killed_run_keeps_its_iterations_and_clean_leaves_nothing(tmp_path, short_tmp):
    before = _root_links()
    out, run_dir, tmp = tmp_path / "out", tmp_path / "run", short_tmp
    env = {**os.environ, "TMPDIR": str(tmp)}  # where the workers' control folder goes
    proc = _topolab(
        "run", "scenarios/smoke-12.toml", "--out", str(out), "--iterations", "10", "--run-dir", str(run_dir), env=env
    )
    pids: set[int] = set()
    timed = 0
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and timed < 3:
        line = proc.stderr.readline()
        if not line:
            break
        timed += " timed " in line
        pids |= _state_pids(run_dir)
    assert timed == 3, "the run never reached its third timed iteration"
    proc.kill()  # SIGKILL: no handler runs, nothing is torn down or written at exit
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    lines = (out / "iterations.jsonl").read_text().splitlines()
    assert [json.loads(line)["index"] for line in lines] == [0, 1, 2]
    assert json.loads((out / "results.json").read_text())["status"] == "running"

    report = subprocess.run(
        [sys.executable, "-m", "topolab", "report", str(out)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert report.returncode == 0, report.stderr
    text = (out / "report.md").read_text()
    assert "Status: **incomplete**" in text and "3 iteration(s) were on disk" in text
    assert text.count("| yes |") == 3
    for name in ("topology.png", "iterations.png", "link_bytes.png"):
        assert (out / name).stat().st_size > 1000, name

    (workdir,) = tmp.iterdir()  # the killed coordinator's: its control socket and the ranks' logs
    assert workdir.name.startswith(f"topolab-coll-{proc.pid}-") and (workdir / "rank-0.log").exists()
    clean = subprocess.run(
        [sys.executable, "-m", "topolab", "clean", "--run-dir", str(run_dir), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert clean.returncode == 0, clean.stderr
    time.sleep(0.5)
    assert pids and [p for p in pids if _alive(p)] == []
    assert _root_links() == before
    assert not list(run_dir.glob("run-*.json"))
    assert json.loads(clean.stdout)["worker_dirs"] == [str(workdir)]
    assert list(tmp.iterdir()) == []


def test_run_blocked_by_another_runs_lock_is_one_line_and_writes_nothing(tmp_path, capsys):
    from contract.errors import UsageError
    from emulator.state import RunLock
    from planner import load_scenario
    from topolab.cli import main
    from topolab.run.measured_run import execute

    run_dir, out = tmp_path / "run", tmp_path / "out"
    run_dir.mkdir()
    lock = RunLock(str(run_dir))
    lock.acquire()
    try:
        code = main(["run", "scenarios/smoke-12.toml", "--out", str(out), "--run-dir", str(run_dir)])
    finally:
        lock.release()
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("topolab: another topolab network is up"), err
    assert not out.exists()
    # the same when the lock is taken between the check and the network's start
    lock.acquire()
    try:
        with pytest.raises(UsageError, match="another topolab network is up"):
            execute(load_scenario("scenarios/smoke-12.toml"), out, log=lambda msg: None, run_dir=str(run_dir))
    finally:
        lock.release()
    assert not out.exists()


def test_prediction_over_tolerance_is_called_out_and_exits_3(tmp_path):
    """A run that verifies but misses its scenario's tolerance says so: report and exit 3."""
    scenario = tmp_path / "strict.toml"
    text = (REPO / "scenarios" / "smoke-12.toml").read_text().replace("tolerance = 1.0", "tolerance = 0.0")
    scenario.write_text(text.replace("iterations = 2", "iterations = 1"))
    out = tmp_path / "out"
    proc = _topolab("run", str(scenario), "--out", str(out), "--run-dir", str(tmp_path / "run"))
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 3, stderr[-2000:]
    assert "verification passed" in stdout
    line = stderr.strip().splitlines()[-1]
    assert "run.tolerance" in line and "Traceback" not in stderr
    assert "is above the tolerance" in (out / "report.md").read_text()
