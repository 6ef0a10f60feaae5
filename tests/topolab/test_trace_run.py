"""The measured timeline: the critical-path walk and the send/recv pairing on hand-made spans,
the workers' one-iteration op timestamps and clock readings on loopback, the report's
timeline.png, and (root) `topolab run --trace` and `topolab collective --trace` end to end:
trace.json passes the format checks with a measured and a predicted process per server."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from planner import load_scenario
from planner.collectives.rings import multiring_allreduce, topoopt_rings
from planner.cost.predict import Network, predict_timeline
from tests.fixtures.sample_results import smoke_results
from tests.fixtures.trace_schema import check_trace, process_names
from topolab.results.trace_events import (
    CRITICAL_ARG,
    MEASURED_PID_BASE,
    PREDICTED_PID_BASE,
    Span,
    critical_path,
    match_messages,
    measured_trace,
    trace_json,
)

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ---- the critical path: hand-made spans ---------------------------------------------------


def _chain(b0_end: float) -> tuple[list[Span], list[tuple[Span, Span]], dict[str, Span]]:
    """Rank 0 computes (a0) then sends (a1, ends at 2); rank 1 computes (b0, ends at
    ``b0_end``) and posts the recv (b1) that takes a1's message, ending at 4."""
    a0 = Span(0, "s", "a0", 0.0, 1.0)
    a1 = Span(0, "s", "a1", 1.0, 2.0)
    b0 = Span(1, "s", "b0", 0.0, b0_end)
    b1 = Span(1, "s", "b1", b0_end, 4.0)
    other = Span(1, "t", "other", 0.0, 3.5)  # another stream of rank 1: nobody waits for it
    spans = [a0, a1, b0, b1, other]
    return spans, [(b1, a1)], {s.name: s for s in spans}


def test_critical_path_goes_back_through_the_matching_send_when_it_ended_later():
    spans, waits, by = _chain(b0_end=1.5)  # the recv's data came after its stream was free
    assert [s.name for s in critical_path(spans, waits)] == ["a0", "a1", "b1"]


def test_critical_path_goes_back_through_the_stream_when_it_ended_later():
    spans, waits, by = _chain(b0_end=3.0)  # the recv's stream was busy after the send was done
    assert [s.name for s in critical_path(spans, waits)] == ["b0", "b1"]


def test_critical_path_follows_after_dependencies_and_survives_a_loop():
    x = Span(0, "x", "x", 0.0, 5.0)
    y = Span(0, "y", "y", 5.0, 6.0)
    z = Span(0, "z", "z", 0.0, 1.0)
    assert [s.name for s in critical_path([x, y, z], [(y, x), (y, z)])] == ["x", "y"]  # y waited for x, the later
    assert [s.name for s in critical_path([x, y], [(y, x), (x, y)])] == ["x", "y"]  # a loop ends, once each
    assert critical_path([]) == []


def test_messages_pair_first_in_first_out_by_start_not_by_row():
    """Two sends 0 -> 1 with one tag: the one that started first is taken by the recv posted first."""
    from contract.schedule import ScheduleBuilder

    b = ScheduleBuilder(2)
    b.buffer("g", 64)
    b.send(0, "p", 1, "g", 0, 16, tag=7)  # row 0
    b.send(0, "q", 1, "g", 16, 16, tag=7)  # row 1
    b.recv(1, "p", 0, "g", 0, 16, tag=7, mode="copy")  # row 0
    b.recv(1, "q", 0, "g", 16, 16, tag=7, mode="copy")  # row 1
    sched = b.build()
    in_row_order = match_messages(sched, 2, [np.array([0.0, 1.0]), np.array([0.0, 1.0])])
    assert sorted(in_row_order) == [(0, 0, 1, 0), (0, 1, 1, 1)]
    swapped = match_messages(sched, 2, [np.array([1.0, 0.0]), np.array([0.0, 1.0])])  # row 1 sent first
    assert sorted(swapped) == [(0, 0, 1, 1), (0, 1, 1, 0)]
    assert match_messages(sched, 1, [np.array([0.0, 1.0])]) == []  # rank 1 not drawn: no pair


# ---- the workers: op timestamps of one iteration, clock readings (loopback, no root) ----------


@pytest.fixture(scope="module")
def loopback_iteration():
    """Four loopback workers run a two-ring AllReduce three times, the last with op timestamps
    from ranks 0..2; their clocks read once they are up."""
    from workers.coordinator import Coordinator

    sched = multiring_allreduce(4, 256 << 10, topoopt_rings(4, [1]))
    with Coordinator(sched.to_dict(), ["127.0.0.1"] * 4, chunk_bytes=64 << 10) as coord:
        clocks = coord.clock_offsets()
        results = [coord.run_iteration(i, {0: "ops", 1: "ops", 2: "ops"} if i == 2 else None) for i in range(3)]
    return sched, clocks, results


def _ring_network() -> Network:
    """The four ranks' ring (both directions) at 1 GB/s, 1 us a hop."""
    return Network({(i, (i + k) % 4): 1e9 for i in range(4) for k in (1, 3)}, lambda a, b: [a, b], 1e-6)


def test_only_the_traced_iteration_reports_ops_and_clocks_read_zero_on_one_machine(loopback_iteration):
    sched, clocks, results = loopback_iteration
    assert all(res.ok for res in results)
    assert [len(r["ops"]) for r in results[0].ranks] == [0, 0, 0, 0]  # the others run as before
    traced = results[2].ranks
    assert [len(r["ops"]) for r in traced] == [sched.programs[r].op_count for r in range(3)] + [0]
    assert sorted(clocks) == [0, 1, 2, 3]
    for c in clocks.values():
        # one CLOCK_MONOTONIC: the worker read its clock between our send and our receipt
        assert c.same_clock and c.applied_s == 0.0 and abs(c.offset_s) <= c.rtt_s / 2


def test_measured_side_holds_every_op_once_named_as_predicted_with_paired_flows(loopback_iteration):
    sched, clocks, results = loopback_iteration
    _, timeline = predict_timeline(sched, _ring_network(), ranks=3)
    doc = measured_trace(sched, results[2].ranks, clocks, timeline, 1.0, {"scenario": "loopback"})
    check_trace(doc)
    json.loads(trace_json(doc))
    names = process_names(doc)
    assert names == {
        **{MEASURED_PID_BASE + r: f"measured h{r}" for r in range(3)},
        **{PREDICTED_PID_BASE + r: f"predicted h{r}" for r in range(3)},
    }
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    for r in range(3):
        measured = Counter(e["name"] for e in slices if e["pid"] == MEASURED_PID_BASE + r)
        predicted = Counter(
            e["name"] for e in slices if e["pid"] == PREDICTED_PID_BASE + r and "phase" in e.get("args", {})
        )
        assert sum(measured.values()) == sched.programs[r].op_count
        assert measured == predicted  # every op once, named as the prediction names it
    measured_pids = set(range(MEASURED_PID_BASE, MEASURED_PID_BASE + 3))
    starts = [e for e in doc["traceEvents"] if e["ph"] == "s" and e["pid"] in measured_pids]
    sends_between_drawn = sum(
        int(((np.asarray(sched.programs[r].kind) == 0) & (np.asarray(sched.programs[r].peer) < 3)).sum())
        for r in range(3)
    )
    assert len(starts) == sends_between_drawn  # an arrow per message between drawn ranks
    other = doc["otherData"]
    assert other["ranks"] == 4 and other["ranks_shown"] == 3 and other["clock_max_applied_us"] == 0.0
    for side in ("measured", "predicted"):
        path = other["critical_path"][side]
        marked = [
            e for e in slices if e.get("args", {}).get(CRITICAL_ARG) and (e["pid"] < 1000) == (side == "measured")
        ]
        assert path["ops"] == len(marked) > 0
        assert path["ends_ms"] == pytest.approx(max(e["ts"] + e["dur"] for e in marked) / 1e3, abs=1e-6)


def test_a_rank_that_reports_an_op_twice_is_refused(loopback_iteration):
    sched, clocks, results = loopback_iteration
    reports = [dict(r) for r in results[2].ranks]
    reports[0]["ops"] = reports[0]["ops"] + reports[0]["ops"][:1]
    _, timeline = predict_timeline(sched, _ring_network(), ranks=1)
    with pytest.raises(ValueError, match="rank 0 reported op .* twice"):
        measured_trace(sched, reports, clocks, timeline, 1.0, {})


# ---- the report's timeline.png (no root: a measured side made from the prediction) -------------


def _stretched_reports(schedule, timeline, scale: float, stretch: float) -> list[dict]:
    """Worker reports of an iteration that ran ``stretch`` times as long as ``timeline`` predicts."""
    t0 = 100.0
    reports = []
    for r in range(schedule.ranks):
        p = schedule.programs[r]
        ops = []
        if r < timeline.ranks:
            ids = p.op_ids().tolist()
            for row, (a, b) in enumerate(zip(timeline.op_start[r].tolist(), timeline.op_end[r].tolist())):
                ops.append([ids[row], t0 + a * stretch, t0 + b * stretch])
        end = max((o[2] for o in ops), default=t0)
        reports.append({"t_start": t0, "t_end": end, "ops": ops})
    return reports


def test_report_draws_the_timeline_and_names_both_critical_paths(tmp_path):
    from planner.cost.predict import plan_network
    from topolab.common.prediction import network_args, prepare, scenario_rates
    from topolab.results.run_report import timeline_rows, write_report
    from topolab.results.run_results import TraceFacts
    from workers.coordinator import ClockReading

    s = load_scenario("scenarios/smoke-12.toml")
    prepared = prepare(s)
    plan, schedule, emulated = prepared.plan, prepared.schedule, prepared.emulated
    network = plan_network(plan, **network_args(plan, scenario_rates(plan, s), False))
    _, timeline = predict_timeline(schedule, network)
    scale = emulated["time_scale"]
    reports = _stretched_reports(schedule, timeline, scale, 2.0)
    clocks = {r: ClockReading(r, 0.0, 1e-4, True) for r in range(schedule.ranks)}
    doc = measured_trace(schedule, reports, clocks, timeline, scale, {})
    (tmp_path / "trace.json").write_text(trace_json(doc))
    results = smoke_results("complete", [1.0, 1.0], 0.5)
    results.trace = TraceFacts("trace.json", 1, 12, 12, "one machine")
    write_report(results, tmp_path)
    assert (tmp_path / "timeline.png").read_bytes()[:8] == PNG_MAGIC
    report = (tmp_path / "report.md").read_text()
    assert "## Timeline" in report and "![timeline](timeline.png)" in report
    assert "| measured |" in report and "| predicted |" in report
    rows = timeline_rows(doc)
    assert set(rows) == {"measured", "predicted"} and sorted(rows["measured"]) == list(range(12))
    ends = {
        side: max(a + d for lanes in rows[side].values() for bars in lanes.values() for a, d, _ in bars)
        for side in rows
    }
    assert ends["measured"] == pytest.approx(2 * ends["predicted"], abs=2e-6)  # the stretch, drawn (ns rounding)


def test_report_says_why_a_missing_trace_is_not_drawn(tmp_path):
    from topolab.results.run_report import write_report
    from topolab.results.run_results import TraceFacts

    results = smoke_results("complete", [1.0], 0.5)
    results.trace = TraceFacts("trace.json", 0, 12, 12, "one machine")
    write_report(results, tmp_path)
    assert not (tmp_path / "timeline.png").exists()
    assert "cannot be drawn: trace.json" in (tmp_path / "report.md").read_text()


def test_results_without_a_trace_read_as_before():
    from topolab.results.run_results import RunResults, TraceFacts

    results = smoke_results("complete", [1.0], 0.5)
    d = results.to_dict()
    assert "trace" not in d and RunResults.from_dict(d).trace is None
    results.trace = TraceFacts("trace.json", 0, 128, 32, "one machine", 0.0, 80.0)
    assert RunResults.from_dict(results.to_dict()).trace == results.trace


# ---- end to end (root) ----------------------------------------------------------------------


def _topolab(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "topolab", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.root
def test_run_trace_writes_measured_beside_predicted_and_the_timeline(tmp_path):
    from topolab.common.prediction import prepare

    out = tmp_path / "out"
    proc = _topolab(
        "run",
        "scenarios/smoke-12.toml",
        "--trace",
        "--iterations",
        "2",
        "--out",
        str(out),
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((out / "trace.json").read_text())
    check_trace(doc)
    names = process_names(doc)
    assert sorted(n for n in names.values() if n.startswith("measured")) == sorted(f"measured h{r}" for r in range(12))
    assert sorted(n for n in names.values() if n.startswith("predicted")) == sorted(
        f"predicted h{r}" for r in range(12)
    )
    schedule = prepare(load_scenario("scenarios/smoke-12.toml")).schedule
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    for r in range(12):
        measured = Counter(e["name"] for e in slices if e["pid"] == MEASURED_PID_BASE + r)
        assert sum(measured.values()) == schedule.programs[r].op_count  # every op of the iteration, once
        assert max(measured.values()) < schedule.programs[r].op_count
    flows = Counter((e["id"], e["ph"]) for e in doc["traceEvents"] if e["ph"] in "sf" and e["pid"] < PREDICTED_PID_BASE)
    sends = sum(int((np.asarray(p.kind) == 0).sum()) for p in schedule.programs)
    assert len({i for i, _ in flows}) == sends and all(c == 1 for c in flows.values())  # one s and one f each
    results = json.loads((out / "results.json").read_text())
    assert results["trace"]["file"] == "trace.json" and results["trace"]["iteration"] == 1
    assert doc["otherData"]["iteration"] == 1 and doc["otherData"]["clock_max_applied_us"] == 0.0
    assert (out / "timeline.png").read_bytes()[:8] == PNG_MAGIC
    assert "## Timeline" in (out / "report.md").read_text()


@pytest.mark.root
def test_collective_trace_writes_one_trace_per_algorithm_and_size(tmp_path):
    out = tmp_path / "out"
    proc = _topolab(
        "collective", "scenarios/smoke-12.toml", "--algorithm", "topoopt", "--bytes", "256K", "--repeat", "1",
        "--trace", "--out", str(out), "--run-dir", str(tmp_path / "run"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((out / "trace-topoopt-256K.json").read_text())
    check_trace(doc)
    assert len(process_names(doc)) == 24
    assert json.loads((out / "results.json").read_text())["results"][0]["trace"] == "trace-topoopt-256K.json"
