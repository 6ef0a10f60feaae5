"""Timelines in the Chrome trace event format: the writer (topolab.results.trace_events), the
predictor's recorded replay it draws (planner.cost.predict.predict_timeline), `topolab predict
--trace`, and the checker the traces are held to (tests/fixtures/trace_schema.py), which must
reject broken traces as well as pass good ones."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from planner import load_scenario
from planner.collectives.p2p import p2p_transfers
from planner.collectives.rings import multiring_allreduce, topoopt_rings
from planner.cost.predict import Network, plan_network, predict, predict_timeline
from tests.fixtures.trace_schema import check_trace, process_names, slices_by_track, trace_problems
from topolab.cli import main
from topolab.common.prediction import network_args, prepare, scenario_rates
from topolab.results import trace_events
from topolab.results.trace_events import (
    PREDICTED_PID_BASE,
    TID_BASE,
    Flow,
    ProcessGroup,
    Span,
    predicted_group,
    trace_document,
    trace_json,
    trace_ranks,
)

REPO = Path(__file__).resolve().parents[2]
TOPOOPT = REPO / "scenarios" / "topoopt-12.toml"


def _line_network(alpha: float = 0.0) -> Network:
    """0 - 1 - 2 at 1 MB/s per direction; paths go through 1."""

    def path(a: int, b: int) -> list[int]:
        step = 1 if b > a else -1
        return list(range(a, b + step, step))

    cap = 1e6
    return Network({(0, 1): cap, (1, 0): cap, (1, 2): cap, (2, 1): cap}, path, alpha, reduce_bytes_per_s=1e18)


def _small_trace() -> dict:
    """Two ranks, a send and the recv it feeds, a flow between them: a valid trace."""
    send = Span(0, "ring", "send", 0.0, 1e-6, {"bytes": 4})
    recv = Span(1, "ring", "recv", 0.5e-6, 3e-6, {"bytes": 4})
    compute = Span(0, "compute", "compute", 0.0, 2e-6)
    group = ProcessGroup("measured", 0, [send, recv, compute], [Flow(send, recv)])
    return trace_document([group])


# ---- the checker: passes a good trace, rejects broken ones ---------------------------------


def test_checker_passes_a_good_trace():
    doc = _small_trace()
    assert trace_problems(doc) == []
    assert json.loads(trace_json(doc)) == doc  # the text is the document


def _first(doc: dict, ph: str) -> dict:
    return next(e for e in doc["traceEvents"] if e["ph"] == ph)


def _drop_dur(doc: dict) -> None:
    del _first(doc, "X")["dur"]


def _negative_ts(doc: dict) -> None:
    _first(doc, "X")["ts"] = -1


def _string_dur(doc: dict) -> None:
    _first(doc, "X")["dur"] = "1"


def _overlap(doc: dict) -> None:
    x = _first(doc, "X")  # a second slice on its track that starts inside it and ends after it
    doc["traceEvents"].append({**x, "name": "late", "ts": x["ts"] + x["dur"] / 2, "dur": x["dur"]})


def _unpaired(doc: dict) -> None:
    doc["traceEvents"].remove(_first(doc, "f"))


def _twice(doc: dict) -> None:
    doc["traceEvents"].append(dict(_first(doc, "s")))


def _unbound(doc: dict) -> None:
    del _first(doc, "f")["bp"]


def _outside(doc: dict) -> None:
    _first(doc, "s")["ts"] = 1000.0  # no slice of its track there


def _thread_without_tid(doc: dict) -> None:
    del next(e for e in doc["traceEvents"] if e.get("name") == "thread_name")["tid"]


@pytest.mark.parametrize(
    "break_it, says",
    [
        (_drop_dur, "'dur' is a required property"),
        (_negative_ts, "less than the minimum of 0"),
        (_string_dur, "is not of type 'number'"),
        (_overlap, "without nesting"),
        (_unpaired, "1 start(s) and 0 end(s)"),
        (_twice, "2 start(s) and 1 end(s)"),
        (_unbound, "not bound to the enclosing slice"),
        (_outside, "in no slice"),
        (_thread_without_tid, "'tid' is a required property"),
    ],
)
def test_checker_rejects_a_broken_trace(break_it, says):
    doc = _small_trace()
    break_it(doc)
    problems = trace_problems(doc)
    assert any(says in p for p in problems), problems
    with pytest.raises(AssertionError):
        check_trace(doc)


# ---- the writer --------------------------------------------------------------------------


def test_overlapping_spans_of_one_stream_go_to_tracks_of_their_own():
    spans = [
        Span(0, "conn", "a", 0.0, 2e-6),
        Span(0, "conn", "b", 1e-6, 3e-6),  # overlaps a partially: another track
        Span(0, "conn", "c", 0.5e-6, 1e-6),  # inside a: a's track
        Span(0, "conn", "d", 2e-6, 4e-6),  # touches a's end: a's track
    ]
    doc = trace_document([ProcessGroup("measured", 0, spans)])
    check_trace(doc)
    tid_of = {e["name"]: e["tid"] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert tid_of["a"] == tid_of["c"] == tid_of["d"] != tid_of["b"]
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert names[tid_of["a"]] == "conn" and names[tid_of["b"]] == "conn #2"


def test_spans_that_follow_each_other_stay_on_one_track_whatever_the_rounding():
    rng = np.random.default_rng(0)
    ends = np.cumsum(rng.uniform(0, 3e-6, 2000))  # float boundaries, many not whole nanoseconds
    starts = np.r_[0.0, ends[:-1]]
    spans = [Span(0, "s", f"op{i}", a, b) for i, (a, b) in enumerate(zip(starts.tolist(), ends.tolist()))]
    doc = trace_document([ProcessGroup("measured", 0, spans)])
    check_trace(doc)
    assert len(slices_by_track(doc)) == 1


def test_measured_and_predicted_sit_side_by_side_with_tracks_apart():
    measured = ProcessGroup("measured", 0, [Span(r, "compute", "compute", 0.0, 1e-6) for r in range(3)])
    predicted = ProcessGroup(
        "predicted", PREDICTED_PID_BASE, [Span(r, "compute", "compute", 0.0, 2e-6) for r in range(3)]
    )
    doc = trace_document([measured, predicted])
    check_trace(doc)
    assert process_names(doc) == {
        **{r: f"measured h{r}" for r in range(3)},
        **{PREDICTED_PID_BASE + r: f"predicted h{r}" for r in range(3)},
    }
    tids = {(e["pid"], e["tid"]) for e in doc["traceEvents"] if e["ph"] == "X"}
    assert len({tid for _, tid in tids}) == 6 and min(tid for _, tid in tids) >= TID_BASE


def test_writer_refuses_what_it_cannot_draw():
    with pytest.raises(ValueError, match="span 'x'"):
        trace_document([ProcessGroup("measured", 0, [Span(0, "s", "x", 2e-6, 1e-6)])])  # ends before it starts
    inside = Span(0, "s", "in", 0.0, 1e-6)
    elsewhere = Span(1, "s", "out", 0.0, 1e-6)
    with pytest.raises(ValueError, match="target span is not in the trace"):
        trace_document([ProcessGroup("measured", 0, [inside], [Flow(inside, elsewhere)])])


def test_flows_bind_inside_their_slices_and_run_forward():
    doc = _small_trace()
    s, f = _first(doc, "s"), _first(doc, "f")
    assert f["bp"] == "e" and s["id"] == f["id"] and s["ts"] < f["ts"]
    assert 0 < s["ts"] < 1.0 and 0.5 < f["ts"] < 3.0  # strictly inside send [0, 1] us and recv [0.5, 3] us


# ---- the recorded replay -----------------------------------------------------------------


def test_timeline_of_one_transfer_is_the_closed_form():
    sched = p2p_transfers(3, [(0, 2, 400_000)])  # 0.4 s at 1 MB/s, 2 hops of 1 ms
    for events in (False, True):
        pred, tl = predict_timeline(sched, _line_network(alpha=1e-3), events=events)
        assert pred == predict(sched, _line_network(alpha=1e-3), events=events)
        assert tl.msg_src.tolist() == [0] and tl.msg_dst.tolist() == [2]
        assert tl.wire_start[0] == 0.0
        assert tl.wire_end[0] == pytest.approx(0.4, rel=1e-6)
        assert tl.arrival[0] == pytest.approx(0.402, rel=1e-6)
        recv_end = tl.op_end[2][tl.msg_recv_row[0]]
        assert recv_end == pytest.approx(0.402, rel=1e-6) and recv_end == pytest.approx(pred.seconds, rel=1e-12)
        send = tl.msg_send_row[0]
        assert tl.op_start[0][send] == tl.op_end[0][send] == 0.0  # eager: handed over at once


def test_messages_of_one_connection_follow_each_other_on_the_wire():
    sched = p2p_transfers(3, [(0, 1, 100_000), (0, 1, 100_000)])
    _, tl = predict_timeline(sched, _line_network(), events=True)
    order = np.argsort(tl.wire_start)
    assert tl.wire_start[order].tolist() == pytest.approx([0.0, 0.1])
    assert tl.wire_end[order].tolist() == pytest.approx([0.1, 0.2])


def test_timeline_charges_the_processor_time_of_each_op():
    sched = p2p_transfers(3, [(0, 1, 100_000), (0, 1, 100_000)])
    for cores in (None, 1):
        net = _line_network()
        net.op_overhead_s, net.cores = 1e-5, cores
        pred, tl = predict_timeline(sched, net)
        assert pred == predict(sched, net)
        sends = tl.msg_send_row
        assert (tl.op_end[0][sends] - tl.op_start[0][sends] >= 1e-5 * (1 - 1e-9)).all()  # each send takes its time
        assert (tl.op_end[0][sends] <= tl.wire_start + 1e-15).all()  # and only then goes on the wire
        assert max(float(e.max()) for e in tl.op_end if len(e)) == pred.seconds


def test_both_replays_record_the_same_timeline():
    n = 8
    sched = multiring_allreduce(n, 1 << 20, topoopt_rings(n, [1, 3]))
    cap = 1e8
    links = {(i, (i + k) % n): cap for i in range(n) for k in (1, 3, n - 1, n - 3)}
    net = Network(links, lambda a, b: [a, b], 1e-6, reduce_bytes_per_s=1e10)
    fast, tl_fast = predict_timeline(sched, net)
    slow, tl_slow = predict_timeline(sched, net, events=True)
    assert fast == predict(sched, net) and slow == predict(sched, net, events=True)
    for a, b in zip(tl_fast.op_end, tl_slow.op_end):
        assert a == pytest.approx(b, rel=1e-6)
    key = lambda t: np.lexsort((t.msg_send_row, t.msg_src))  # noqa: E731
    for name in ("wire_start", "wire_end", "arrival", "msg_recv_row"):
        fa, sl = getattr(tl_fast, name), getattr(tl_slow, name)
        assert fa[key(tl_fast)] == pytest.approx(sl[key(tl_slow)], rel=1e-6), name


def test_timeline_of_the_first_ranks_only():
    n = 6
    sched = multiring_allreduce(n, 1 << 16, topoopt_rings(n, [1]))
    net = Network({(i, (i + k) % n): 1e8 for i in range(n) for k in (1, n - 1)}, lambda a, b: [a, b], 0.0)
    for events in (False, True):
        pred, tl = predict_timeline(sched, net, ranks=2, events=events)
        assert pred == predict(sched, net, events=events)
        assert tl.ranks == 2 and len(tl.op_start) == 2
        assert ((tl.msg_src < 2) | (tl.msg_dst < 2)).all() and len(tl.msg_src)
        check_trace(trace_document([predicted_group(sched, tl)]))  # flows only where both ends are drawn


# ---- topolab predict --trace ---------------------------------------------------------------


def test_predict_trace_of_topoopt_12(tmp_path, capsys):
    out = tmp_path / "trace.json"
    assert main(["predict", str(TOPOOPT), "--trace", str(out), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    doc = json.loads(out.read_text())
    check_trace(doc)
    assert process_names(doc) == {PREDICTED_PID_BASE + r: f"predicted h{r}" for r in range(12)}
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    last_end_ms = max(e["ts"] + e["dur"] for e in slices) / 1e3
    assert last_end_ms == pytest.approx(shown["prediction"]["iteration_ms"], abs=1e-5)  # ns rounding
    assert sum(e["ph"] == "s" for e in doc["traceEvents"]) > 0
    tracks = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert {"compute", "ar0", "mp>1", "wire to h1"} <= tracks
    assert out.stat().st_size < 3e6
    assert doc["otherData"]["ranks_shown"] == 12 and shown["trace"]["ranks_shown"] == 12


def test_predict_trace_caps_the_ranks_and_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(trace_events, "TRACE_MAX_RANKS", 4)
    out = tmp_path / "trace.json"
    assert main(["predict", str(TOPOOPT), "--trace", str(out)]) == 0
    assert "the first 4 of 12 servers" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    check_trace(doc)
    assert sorted(process_names(doc)) == [PREDICTED_PID_BASE + r for r in range(4)]
    assert doc["otherData"]["ranks_shown"] == 4 and "first 4 of 12" in doc["otherData"]["ranks_note"]


def test_trace_ranks_fit_the_op_budget():
    s = load_scenario(TOPOOPT)
    schedule = prepare(s).schedule
    ops = [p.op_count for p in schedule.programs]
    assert trace_ranks(schedule) == 12
    assert trace_ranks(schedule, max_ops=ops[0] + ops[1]) == 2
    assert trace_ranks(schedule, max_ops=1) == 1  # one rank at least
    assert trace_ranks(schedule, max_ranks=5) == 5


def test_predicted_trace_is_the_replay_predict_prints(tmp_path):
    s = load_scenario(TOPOOPT)
    prepared = prepare(s)
    plan, schedule, predicted = prepared.plan, prepared.schedule, prepared.predicted
    net = plan_network(plan, **network_args(plan, scenario_rates(plan, s), False))
    pred, tl = predict_timeline(schedule, net)
    assert pred.seconds == predicted["emulated_s"]
    assert max(float(e.max()) for e in tl.op_end if len(e)) == pred.seconds


def test_predict_trace_into_a_missing_folder_is_one_line_exit_2(tmp_path, capsys):
    assert main(["predict", str(TOPOOPT), "--trace", str(tmp_path / "nowhere" / "t.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--trace" in err


def test_checker_rejects_a_copy_of_the_predicted_trace_with_one_overlap(tmp_path, capsys):
    out = tmp_path / "trace.json"
    assert main(["predict", str(TOPOOPT), "--trace", str(out)]) == 0
    doc = json.loads(out.read_text())
    broken = copy.deepcopy(doc)
    by_track: dict[tuple[int, int], list[dict]] = {}
    for e in broken["traceEvents"]:
        if e["ph"] == "X":
            by_track.setdefault((e["pid"], e["tid"]), []).append(e)
    a, b = next(
        (a, b)
        for slices in by_track.values()
        for a, b in zip(slices, slices[1:])
        if a["ts"] < b["ts"] and b["dur"] >= 0.002
    )
    a["dur"] = b["ts"] + b["dur"] / 2 - a["ts"]  # ends inside the next op of its stream
    assert any("without nesting" in p for p in trace_problems(broken))
    assert trace_problems(doc) == []
