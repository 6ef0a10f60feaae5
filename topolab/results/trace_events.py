"""Timelines of an iteration in the Chrome trace event format, which Perfetto and chrome://tracing open.

The format is Google's "Trace Event Format" (JSON object form): ``{"traceEvents": [...],
"displayTimeUnit": "ms", "otherData": {...}}`` with timestamps and durations in
microseconds. Of its phases this module writes four:

- ``M`` metadata: ``process_name`` and ``thread_name`` (the name in ``args.name``);
- ``X`` complete events (``name``, ``ph``, ``ts``, ``dur``, ``pid``, ``tid``, ``args``): one
  per op or message. Slices on one track (pid, tid) must nest or be disjoint (Perfetto drops
  partially overlapping ones), so a stream whose spans overlap gets more tracks
  (``stream #2``, ...): `trace_document` places each span on the first track of its stream
  where it nests or is disjoint;
- ``s`` / ``f`` flow events (version 1: ``id``, ``cat`` and ``name`` pair them), from a send to
  its receive: ``s`` inside the source slice just after its start, ``f`` with ``"bp": "e"``
  (bound to the enclosing slice) inside the target slice just before its end, so the arrow
  runs forward in time and each end binds to its own slice.

Layout: a process per server and timeline, a track per stream. The measured timeline's
rank r is process ``MEASURED_PID_BASE + r`` ("measured h<r>"), the predicted one's
``PREDICTED_PID_BASE + r`` ("predicted h<r>"), so both sit side by side in one file (pass
both groups to one `trace_document` call: track ids are numbered over the whole trace,
from ``TID_BASE``, so no track id is also a process id or another process's track). Times go
in as seconds and are written rounded to whole nanoseconds (the resolution Perfetto keeps):
both ends of a span are rounded, so spans that touch still touch and nesting is kept.

`predicted_group` turns the flow-level model's replay of a schedule
(`planner.cost.predict.predict_timeline`) into such a group: per rank, a track per schedule
stream (``compute``, ``mp>3``, ``ar0``: its ops) and one per connection (``wire to h3``: each
message from when it goes on the wire until its last byte has left; the messages of a
connection are first in, first out, so they never overlap). At scale the trace is capped to
the first ranks (`trace_ranks`), which `otherData` states.

`measured_side` turns the workers' report of one iteration (every op's start and end on the
rank's clock, `workers.coordinator.Coordinator.run_iteration` with ``timestamps = "ops"``, less
the rank's clock offset) into the measured group, named op for op as the predicted one, with
an arrow from each send to the recv that took it (`match_messages`). `iteration_trace` puts
both sides of one iteration in one trace, each side's critical path marked on its slices
(`critical_path`: the chain of ops that ends last, walked back through what each op waited
for). `topolab run --trace` and `topolab collective --trace` write it.

Over 300 lines: the two sides of one trace share the op naming, the layout and the checks,
and the critical path walks what both sides build.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from contract.schedule import RECV, SEND, Schedule
from planner.cost.predict import Timeline

from ..common.phases import phase_of

MEASURED_PID_BASE = 0  # measured rank r: process r
PREDICTED_PID_BASE = 1000  # predicted rank r: process 1000 + r (ranks shown stay below 1000)
TID_BASE = 1_000_000  # track ids: above every process id
TRACE_MAX_RANKS = 32  # a trace shows at most this many ranks ...
TRACE_MAX_OPS = 40_000  # ... and of them no more than fit this many ops (about 10 MB of JSON)
FLOW_CATEGORY = "message"
MAX_TRACE_BYTES = 64 << 20  # largest trace read back (the report's timeline.png): 2 x TRACE_MAX_OPS ops fit


@dataclass(eq=False)
class Span:
    """Something one rank did on one stream from ``start_s`` to ``end_s`` (seconds from the
    iteration's start): an ``X`` slice on the rank's track named ``stream``."""

    rank: int
    stream: str
    name: str
    start_s: float
    end_s: float
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class Flow:
    """An arrow from ``source`` to ``target`` (spans of the same `trace_document` call)."""

    source: Span
    target: Span
    name: str = "message"
    category: str = FLOW_CATEGORY


@dataclass
class ProcessGroup:
    """One timeline: its spans and flows, rank r drawn as process ``pid_base + r`` named
    ``"<label> h<r>"``; ``ranks``: processes to name even if they have no span."""

    label: str
    pid_base: int
    spans: list[Span]
    flows: list[Flow] = field(default_factory=list)
    ranks: Sequence[int] = ()


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _us(ns: int) -> int | float:
    """Nanoseconds as the format's microseconds (an integer when whole)."""
    return ns // 1000 if ns % 1000 == 0 else ns / 1000


@dataclass
class _Placed:
    """Where `trace_document` put a span: its track and its ends in nanoseconds."""

    pid: int
    tid: int
    start: int
    end: int

    def inside(self, at_start: bool) -> int:
        """A time just after its start or just before its end, strictly inside it when it
        lasts 2 ns or more (where a flow binds to it, not to a neighbour that touches it)."""
        inset = 1 if self.end - self.start >= 2 else 0
        return self.start + inset if at_start else self.end - inset


def _lanes(spans: list[tuple[int, int, int]]) -> list[int]:
    """For (start, end, index) of one stream's spans: the lane (0, 1, ...) of each, by index,
    such that the spans of one lane nest or are disjoint (a span goes to the first lane where
    it does; partial overlaps go to another)."""
    lane_of = [0] * len(spans)
    stacks: list[list[int]] = []  # per lane: ends of the spans open at the current start
    for start, end, index in sorted(spans, key=lambda s: (s[0], -s[1], s[2])):
        lane = 0
        while lane < len(stacks):
            stack = stacks[lane]
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or stack[-1] >= end:
                break
            lane += 1
        else:
            stacks.append([])
        stacks[lane].append(end)
        lane_of[index] = lane
    return lane_of


def trace_document(groups: Iterable[ProcessGroup], metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """The trace of ``groups`` (module docstring) as a JSON-ready dict; ``metadata`` goes to
    ``otherData``. Raises ValueError for a span that ends before it starts or starts before 0,
    or a flow whose spans are not among the groups'."""
    meta: list[dict[str, Any]] = []
    slices: list[dict[str, Any]] = []
    placed: dict[int, _Placed] = {}  # id(span) -> where it went
    flows: list[Flow] = []
    next_tid = TID_BASE
    for group in groups:
        names: dict[int, int] = {group.pid_base + r: r for r in group.ranks}
        streams: dict[tuple[int, str], list[tuple[int, int, int]]] = {}  # (pid, stream) -> spans
        for i, span in enumerate(group.spans):
            start, end = _ns(span.start_s), _ns(span.end_s)
            if not (0 <= start <= end):
                raise ValueError(
                    f"span {span.name!r} of rank {span.rank} ({span.stream}): {span.start_s} .. {span.end_s} s"
                )
            pid = group.pid_base + span.rank
            names.setdefault(pid, span.rank)
            streams.setdefault((pid, span.stream), []).append((start, end, i))
        for pid, rank in sorted(names.items()):
            meta.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"{group.label} h{rank}"}})
        for (pid, stream), members in sorted(streams.items(), key=lambda kv: kv[0][0]):  # stable: streams in order
            lanes = _lanes([(s, e, k) for k, (s, e, _) in enumerate(members)])
            tids = []
            for lane in range(max(lanes) + 1):
                tids.append(next_tid)
                name = stream if lane == 0 else f"{stream} #{lane + 1}"
                meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": next_tid, "args": {"name": name}})
                next_tid += 1
            for (start, end, i), lane in zip(members, lanes):
                span = group.spans[i]
                placed[id(span)] = _Placed(pid, tids[lane], start, end)
                event: dict[str, Any] = {
                    "name": span.name,
                    "ph": "X",
                    "ts": _us(start),
                    "dur": _us(end - start),
                    "pid": pid,
                    "tid": tids[lane],
                }
                if span.args:
                    event["args"] = span.args
                slices.append(event)
        flows.extend(group.flows)
    arrows: list[dict[str, Any]] = []
    for number, flow in enumerate(flows, start=1):
        ends = placed.get(id(flow.source)), placed.get(id(flow.target))
        if ends[0] is None or ends[1] is None:
            raise ValueError(
                f"flow {flow.name!r}: its {'source' if ends[0] is None else 'target'} span is not in the trace"
            )
        source, target = ends
        common = {"name": flow.name, "cat": flow.category, "id": number}
        arrows.append({**common, "ph": "s", "ts": _us(source.inside(True)), "pid": source.pid, "tid": source.tid})
        arrows.append(
            {**common, "ph": "f", "bp": "e", "ts": _us(target.inside(False)), "pid": target.pid, "tid": target.tid}
        )
    doc: dict[str, Any] = {"traceEvents": meta + slices + arrows, "displayTimeUnit": "ms"}
    if metadata:
        doc["otherData"] = metadata
    return doc


def trace_json(doc: dict[str, Any]) -> str:
    """``doc`` as JSON text, one event per line (compact, and still readable with grep)."""
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    lines = [json.dumps(e, separators=(",", ":")) for e in doc["traceEvents"]]
    top = json.dumps(head, separators=(",", ":"))[1:-1]
    return "{" + top + (',"traceEvents":[\n' if top else '"traceEvents":[\n') + ",\n".join(lines) + "\n]}\n"


def trace_ranks(schedule: Schedule, max_ranks: int | None = None, max_ops: int | None = None) -> int:
    """How many ranks (the first ones) a trace of ``schedule`` shows: at most ``max_ranks``
    (`TRACE_MAX_RANKS`), and no more than fit ``max_ops`` ops (`TRACE_MAX_OPS`; one rank at
    least)."""
    max_ranks = TRACE_MAX_RANKS if max_ranks is None else max_ranks
    max_ops = TRACE_MAX_OPS if max_ops is None else max_ops
    ops = np.cumsum([p.op_count for p in schedule.programs[:max_ranks]])
    return max(1, int(np.searchsorted(ops, max_ops, side="right")))


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} B"


@dataclass
class OpSide:
    """One side of an iteration's trace (measured or predicted) as built: its `ProcessGroup`,
    the span of each op drawn by (rank, row of its program), and each message between two
    drawn ranks as (src, send row, dst, recv row): what `critical_path` walks."""

    group: ProcessGroup
    ops: dict[tuple[int, int], Span]
    messages: list[tuple[int, int, int, int]]


def op_spans(schedule: Schedule, rank: int, start: np.ndarray, end: np.ndarray) -> dict[int, Span]:
    """The spans of rank ``rank``'s ops (``start`` and ``end`` per row of its program, in
    seconds), by row, stream by stream: named by kind, size, peer and stream (``send 1.5 MiB
    to h3 (ar0)``), so a measured and a predicted op of the same row read alike."""
    p = schedule.programs[rank]
    kind, peer = np.asarray(p.kind), np.asarray(p.peer)
    length, tag = np.asarray(p.length), np.asarray(p.tag)
    spans: dict[int, Span] = {}
    for s, stream in enumerate(p.streams):
        rows = p.stream_rows(s)
        phase = phase_of(stream)
        for row, k, q, n, t, a, b in zip(
            rows.tolist(),
            kind[rows].tolist(),
            peer[rows].tolist(),
            length[rows].tolist(),
            tag[rows].tolist(),
            start[rows].tolist(),
            end[rows].tolist(),
        ):
            op = p.kinds[k]
            args: dict[str, Any] = {"phase": phase}  # the op's kind is its name's first word, its stream its track
            if k == SEND:
                name = f"send {_size(n)} to h{q}"
                args.update(peer=q, bytes=n, tag=t)
            elif k == RECV:
                name = f"recv {_size(n)} from h{q}"
                args.update(peer=q, bytes=n, tag=t)
            else:
                name = op
            if stream != op:
                name += f" ({stream})"
            spans[row] = Span(rank, stream, name, a, b, args)
    return spans


def predicted_group(schedule: Schedule, timeline: Timeline, time_scale: float = 1.0) -> ProcessGroup:
    """The predicted timeline of ``schedule`` (its replay's `Timeline`, in the network's time
    unit, divided by ``time_scale``: emulated seconds to the real cluster's) as a
    `ProcessGroup`: the ranks the timeline recorded, a track per stream with its ops (named
    by kind, size, peer and stream), a track per connection with its messages on the wire, and
    an arrow from each message to the recv that takes it (both ends' ranks recorded)."""
    return predicted_side(schedule, timeline, time_scale).group


def predicted_side(schedule: Schedule, timeline: Timeline, time_scale: float = 1.0) -> OpSide:
    """`predicted_group`, with its ops by (rank, row) and its messages (`OpSide`)."""
    spans: list[Span] = []
    ops: dict[tuple[int, int], Span] = {}
    for r in range(timeline.ranks):
        start, end = timeline.op_start[r] / time_scale, timeline.op_end[r] / time_scale
        for row, span in op_spans(schedule, r, start, end).items():
            spans.append(span)
            ops[(r, row)] = span
    messages: list[tuple[int, int, int, int]] = []
    flows: list[Flow] = []
    wires: list[tuple[int, int, int, Span]] = []
    t = timeline
    lengths = [np.asarray(schedule.programs[r].length) for r in range(t.ranks)]
    for src, dst, plane, send_row, recv_row, a, b, arrival in zip(
        t.msg_src.tolist(),
        t.msg_dst.tolist(),
        t.msg_plane.tolist(),
        t.msg_send_row.tolist(),
        t.msg_recv_row.tolist(),
        (t.wire_start / time_scale).tolist(),
        (t.wire_end / time_scale).tolist(),
        (t.arrival / time_scale).tolist(),
    ):
        if src >= t.ranks:
            continue
        nbytes = int(lengths[src][send_row])
        track = f"wire to h{dst}" + (f" plane {plane}" if plane else "")
        args = {"peer": dst, "bytes": nbytes, "arrival_us": round(arrival * 1e6, 3)}
        if plane:
            args["plane"] = plane
        wire = Span(src, track, f"{_size(nbytes)} to h{dst}", a, b, args)
        wires.append((src, dst, plane, wire))
        target = ops.get((dst, recv_row))
        if target is not None:
            flows.append(Flow(wire, target))
            messages.append((src, send_row, dst, recv_row))
    wires.sort(key=lambda w: w[:3])  # each rank's connection tracks after its streams, by peer
    spans.extend(w[3] for w in wires)
    group = ProcessGroup("predicted", PREDICTED_PID_BASE, spans, flows, ranks=range(timeline.ranks))
    return OpSide(group, ops, messages)


# ---- the measured side ---------------------------------------------------------------------


def match_messages(schedule: Schedule, ranks: int, start: Sequence[np.ndarray]) -> list[tuple[int, int, int, int]]:
    """The messages between ranks ``0 .. ranks - 1`` as (src, send row, dst, recv row): the
    k-th send from src to dst with tag t, in the order the sends started, is taken by the k-th
    recv at dst from src with tag t, in the order the recvs were posted (``start`` per rank
    and row: when each op started), as the executor matches them (first in, first out per
    source and tag: docs/schedules.md)."""
    sends: dict[tuple[int, int, int], list[tuple[float, int]]] = {}
    recvs: dict[tuple[int, int, int], list[tuple[float, int]]] = {}
    for r in range(ranks):
        p = schedule.programs[r]
        kind, peer, tag = np.asarray(p.kind), np.asarray(p.peer), np.asarray(p.tag)
        for k, table in ((SEND, sends), (RECV, recvs)):
            rows = np.flatnonzero((kind == k) & (peer < ranks))
            for row, q, t, at in zip(rows.tolist(), peer[rows].tolist(), tag[rows].tolist(), start[r][rows].tolist()):
                key = (r, q, t) if k == SEND else (q, r, t)
                table.setdefault(key, []).append((at, row))
    pairs = []
    for key, out in sends.items():
        src, dst, _ = key
        taken = sorted(recvs.get(key, ()))
        pairs += [(src, s, dst, rr) for (_, s), (_, rr) in zip(sorted(out), taken)]
    return pairs


def measured_side(
    schedule: Schedule,
    reports: Sequence[Mapping[str, Any]],
    offsets: Mapping[int, float],
    time_scale: float,
    ranks: int,
) -> OpSide:
    """The measured timeline of one iteration of ``schedule`` as a group beside the predicted
    one: ``reports`` are the workers' results of that iteration, by rank (``t_start`` of every
    rank; ``ops``, ``[id, start, end]`` per op, of ranks ``0 .. ranks - 1``); ``offsets``
    (rank -> seconds its clock is ahead of the driver's) are taken off every time. Times are
    counted from the first rank's start and divided by ``time_scale`` (emulated seconds to the
    real cluster's). A track per stream, an arrow from each send to the recv that took it
    (`match_messages`). Raises ValueError when a drawn rank did not report every op once."""
    t0 = min(float(r["t_start"]) - offsets.get(i, 0.0) for i, r in enumerate(reports))
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    for r in range(ranks):
        p = schedule.programs[r]
        row_of = {op_id: row for row, op_id in enumerate(p.op_ids().tolist())}
        start, end = np.full(p.op_count, np.nan), np.full(p.op_count, np.nan)
        shift = t0 + offsets.get(r, 0.0)
        for op_id, a, b in reports[r].get("ops", ()):
            row = row_of.get(int(op_id))
            if row is None or not np.isnan(start[row]):
                raise ValueError(f"rank {r} reported op {op_id} {'twice' if row is not None else 'not in its program'}")
            start[row], end[row] = (a - shift) / time_scale, (b - shift) / time_scale
        missing = np.flatnonzero(np.isnan(start))
        if len(missing):
            raise ValueError(f"rank {r} reported no times for {len(missing)} of its {p.op_count} ops")
        starts.append(start)
        ends.append(end)
    spans: list[Span] = []
    ops: dict[tuple[int, int], Span] = {}
    for r in range(ranks):
        for row, span in op_spans(schedule, r, starts[r], ends[r]).items():
            spans.append(span)
            ops[(r, row)] = span
    messages = match_messages(schedule, ranks, starts)
    flows = [Flow(ops[(src, s)], ops[(dst, rr)]) for src, s, dst, rr in messages]
    return OpSide(ProcessGroup("measured", MEASURED_PID_BASE, spans, flows, ranks=range(ranks)), ops, messages)


# ---- the critical path -----------------------------------------------------------------------

CRITICAL_ARG = "critical_path"  # the args key (true) of the X slices on a side's critical path


def critical_path(spans: Sequence[Span], waits: Iterable[tuple[Span, Span]] = ()) -> list[Span]:
    """The chain of ``spans`` that ends last, in time order: from the span that ends last,
    step back to the span it waited for that ended latest, until it waited for none. A span
    waited for the span before it on its stream (same rank and stream, by start) and for
    every span ``waits`` pairs it with as (waiter, waited for): a recv's matching send, an
    op's ``after`` ops. Each span is taken once, so a malformed ``waits`` cannot loop."""
    if not spans:
        return []
    before: dict[int, list[Span]] = {}
    streams: dict[tuple[int, str], list[Span]] = {}
    for span in spans:
        streams.setdefault((span.rank, span.stream), []).append(span)
    for members in streams.values():
        members.sort(key=lambda s: (s.start_s, s.end_s))
        for previous, span in zip(members, members[1:]):
            before.setdefault(id(span), []).append(previous)
    for waiter, waited in waits:
        before.setdefault(id(waiter), []).append(waited)
    span = max(spans, key=lambda s: s.end_s)
    path, taken = [span], {id(span)}
    while True:
        options = [s for s in before.get(id(span), ()) if id(s) not in taken]
        if not options:
            break
        span = max(options, key=lambda s: s.end_s)
        path.append(span)
        taken.add(id(span))
    return path[::-1]


def side_waits(schedule: Schedule, side: OpSide) -> list[tuple[Span, Span]]:
    """What each op of ``side`` waited for besides its stream predecessor: its ``after`` ops
    and, for a recv, the send whose message it took."""
    waits = [(side.ops[(dst, rr)], side.ops[(src, s)]) for src, s, dst, rr in side.messages]
    for r in sorted({rank for rank, _ in side.ops}):
        p = schedule.programs[r]
        if not len(p.after_rows):
            continue
        row_of = {op_id: row for row, op_id in enumerate(p.op_ids().tolist())}
        for row, ids in p.after_map().items():
            waiter = side.ops.get((r, row))
            for op_id in ids:
                waited = side.ops.get((r, row_of[op_id]))
                if waiter is not None and waited is not None:
                    waits.append((waiter, waited))
    return waits


def mark_critical_path(schedule: Schedule, side: OpSide) -> dict[str, Any]:
    """Find ``side``'s critical path (`critical_path` over its ops), mark its slices
    (``args.critical_path``) and summarize it: ops, when it starts and ends, and its time
    split by phase: each op counts from where the path had got to (the ends before it) to its
    own end, so the parts add up to the path's length, less the gaps where it waited on
    nothing it names (ms)."""
    path = critical_path(list(side.ops.values()), side_waits(schedule, side))
    by_phase: dict[str, float] = {}
    reached = path[0].start_s if path else 0.0  # where the path had got to
    gaps = 0.0
    for span in path:
        span.args[CRITICAL_ARG] = True
        gaps += max(0.0, span.start_s - reached)
        phase = span.args.get("phase", "other")
        by_phase[phase] = by_phase.get(phase, 0.0) + max(0.0, span.end_s - max(span.start_s, reached))
        reached = max(reached, span.end_s)
    return {
        "ops": len(path),
        "starts_ms": path[0].start_s * 1e3 if path else 0.0,
        "ends_ms": reached * 1e3,
        "ms_by_phase": {k: round(v * 1e3, 6) for k, v in sorted(by_phase.items())},
        "gaps_ms": round(gaps * 1e3, 6),
        "last_op": f"h{path[-1].rank} {path[-1].name}" if path else "",
    }


# ---- one iteration, measured beside predicted ---------------------------------------------------


def iteration_trace(
    schedule: Schedule,
    reports: Sequence[Mapping[str, Any]],
    offsets: Mapping[int, float],
    timeline: Timeline,
    time_scale: float,
    metadata: dict[str, Any],
) -> dict[str, Any]:
    """The trace of one measured iteration (`measured_side` of ``reports``, ranks ``0 ..
    timeline.ranks - 1``) beside its prediction (`predicted_side` of ``timeline``, in the
    network's time unit), both in the real cluster's time (divided by ``time_scale``), each
    side's critical path marked; ``metadata`` goes to ``otherData`` with the measured and
    predicted iteration times, the critical paths and the pids added."""
    measured = measured_side(schedule, reports, offsets, time_scale, timeline.ranks)
    predicted = predicted_side(schedule, timeline, time_scale)
    t0 = min(float(r["t_start"]) - offsets.get(i, 0.0) for i, r in enumerate(reports))
    t1 = max(float(r["t_end"]) - offsets.get(i, 0.0) for i, r in enumerate(reports))
    predicted_ends = [float(e.max()) for e in timeline.op_end if len(e)]
    meta = {
        **metadata,
        "time": f"the real cluster's: emulated seconds / time scale {time_scale:g}",
        "measured_iteration_ms": (t1 - t0) / time_scale * 1e3,
        "predicted_ms_of_ranks_shown": max(predicted_ends, default=0.0) / time_scale * 1e3,
        "processes": f"measured rank r: pid {MEASURED_PID_BASE} + r; predicted rank r: pid {PREDICTED_PID_BASE} + r",
        "critical_path": {
            "measured": mark_critical_path(schedule, measured),
            "predicted": mark_critical_path(schedule, predicted),
            "marked": f"args.{CRITICAL_ARG} = true on the X slices of the chain of ops that ends last: from the "
            "op that ends last, back through the op each waited for that ended latest (its stream's previous "
            "op, its after ops, a recv's matching send)",
        },
    }
    return trace_document([measured.group, predicted.group], meta)


def ranks_note(shown: int, ranks: int) -> str:
    """What ``otherData.ranks_note`` says of the ranks a trace shows (`trace_ranks`)."""
    if shown == ranks:
        return "all"
    return (
        f"the first {shown} of {ranks}: a trace shows at most {TRACE_MAX_RANKS} ranks, and no more than fit "
        f"{TRACE_MAX_OPS} ops"
    )


def clock_metadata(readings: Iterable[Any]) -> dict[str, Any]:
    """``otherData`` of the ranks' clocks (`workers.coordinator.ClockReading` each): how they
    were put on the driver's clock, the largest offset applied and measured, each reading."""
    readings = sorted(readings, key=lambda c: c.rank)
    remote = [c for c in readings if not c.same_clock]
    how = (
        "every rank on the driver's machine: one CLOCK_MONOTONIC, no offset applied (the measured offsets are "
        "the ping-pong's own asymmetry, within half its round trip)"
        if not remote
        else f"{len(remote)} rank(s) on other machines: their times less the offset measured at start by the "
        "control protocol's ping-pong (shortest of several round trips; known to half of it)"
    )
    return {
        "clocks": how,
        "clock_max_applied_us": max((abs(c.applied_s) * 1e6 for c in readings), default=0.0),
        "clock_max_measured_us": max((abs(c.offset_s) * 1e6 for c in readings), default=0.0),
        "clock_max_rtt_us": max((c.rtt_s * 1e6 for c in readings), default=0.0),
        "clock_offsets": [c.to_dict() for c in readings],
    }


def measured_trace(
    schedule: Schedule,
    reports: Sequence[Mapping[str, Any]],
    readings: Mapping[int, Any],
    timeline: Timeline,
    time_scale: float,
    metadata: dict[str, Any],
) -> dict[str, Any]:
    """`iteration_trace` of one measured iteration, the ranks' clocks put on the driver's:
    ``readings`` (rank -> `workers.coordinator.ClockReading`) give the offsets taken off every
    time; ``otherData`` also says which ranks are shown of all and how the clocks were read."""
    n, shown = len(reports), timeline.ranks
    meta = {**metadata, "ranks": n, "ranks_shown": shown, "ranks_note": ranks_note(shown, n)}
    meta.update(clock_metadata(readings.values()))
    offsets = {rank: c.applied_s for rank, c in readings.items()}
    return iteration_trace(schedule, reports, offsets, timeline, time_scale, meta)


def trace_summary(doc: dict[str, Any], file: str) -> dict[str, Any]:
    """What a `measured_trace` written to ``file`` holds: ranks shown of all, events, the
    measured iteration and both sides' critical paths."""
    other = doc["otherData"]
    return {
        "file": file,
        "ranks": other["ranks"],
        "ranks_shown": other["ranks_shown"],
        "events": len(doc["traceEvents"]),
        "measured_iteration_ms": other["measured_iteration_ms"],
        "critical_path": {side: other["critical_path"][side] for side in ("measured", "predicted")},
    }


def write_iteration_trace(
    path: Any,
    schedule: Schedule,
    reports: Sequence[Mapping[str, Any]],
    readings: Mapping[int, Any],
    timeline: Timeline,
    time_scale: float,
    metadata: dict[str, Any],
) -> dict[str, Any]:
    """Write `measured_trace` to ``path`` (`contract.files.write_file`); its `trace_summary`."""
    from contract.files import write_file

    doc = measured_trace(schedule, reports, readings, timeline, time_scale, metadata)
    write_file(path, trace_json(doc))
    return trace_summary(doc, str(path))
