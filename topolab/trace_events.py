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
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from contract.schedule import RECV, SEND, Schedule
from planner.cost.predict import Timeline

from .prediction import phase_of

MEASURED_PID_BASE = 0  # measured rank r: process r
PREDICTED_PID_BASE = 1000  # predicted rank r: process 1000 + r (ranks shown stay below 1000)
TID_BASE = 1_000_000  # track ids: above every process id
TRACE_MAX_RANKS = 32  # a trace shows at most this many ranks ...
TRACE_MAX_OPS = 40_000  # ... and of them no more than fit this many ops (about 10 MB of JSON)
FLOW_CATEGORY = "message"


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


def predicted_group(schedule: Schedule, timeline: Timeline, time_scale: float = 1.0) -> ProcessGroup:
    """The predicted timeline of ``schedule`` (its replay's `Timeline`, in the network's time
    unit, divided by ``time_scale``: emulated seconds to the real cluster's) as a
    `ProcessGroup`: the ranks the timeline recorded, a track per stream with its ops (named
    by kind, size, peer and stream), a track per connection with its messages on the wire, and
    an arrow from each message to the recv that takes it (both ends' ranks recorded)."""
    spans: list[Span] = []
    recv_span: dict[tuple[int, int], Span] = {}  # (rank, row) -> its recv's span
    for r in range(timeline.ranks):
        p = schedule.programs[r]
        start, end = timeline.op_start[r] / time_scale, timeline.op_end[r] / time_scale
        kind, peer = np.asarray(p.kind), np.asarray(p.peer)
        length, tag = np.asarray(p.length), np.asarray(p.tag)
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
                span = Span(r, stream, name, a, b, args)
                spans.append(span)
                if k == RECV:
                    recv_span[(r, row)] = span
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
        target = recv_span.get((dst, recv_row))
        if target is not None:
            flows.append(Flow(wire, target))
    wires.sort(key=lambda w: w[:3])  # each rank's connection tracks after its streams, by peer
    spans.extend(w[3] for w in wires)
    return ProcessGroup("predicted", PREDICTED_PID_BASE, spans, flows, ranks=range(timeline.ranks))
