"""MSCCL XML out: a plan's collectives as the XML msccl-executor runs on GPUs.

The XML is written from the *schedule program* of the plan's own algorithm
(`contract.schedule`), the program the workers run and the predictor replays, so the XML is
that algorithm, step for step, not a second rendering of it (`schedule_to_msccl`):

- every op of a rank becomes a step of a threadblock: a stream with one send peer and one
  receive peer (a ring) is one threadblock; a stream with several peers (a tree's parent
  receiving from each child, a direct exchange) gets a threadblock per peer and direction,
  its order kept by dependencies; ``after`` edges become dependencies too (a step names one,
  extra ones are ``nop`` steps before it, as msccl-tools' ``ir_to_xml`` writes them);
- a receive followed on its stream by a send of the same region is one fused step, as the
  MSCCL kernel pipelines it: ``rrcs`` (reduce, keep, send on), ``rrs`` (reduce and send on,
  nothing kept, where nothing reads the sum again), ``rcs`` (copy, keep, send on); a lone
  reducing receive is ``rrc``, a copying one ``r``, a send ``s``;
- the buffer is cut into equal chunks, the coarsest grid every op's region falls on
  (``nchunksperloop``), and a step moves ``cnt`` consecutive chunks;
- buffers: a step reads the input ``i`` until its chunk was written, the output ``o`` after;
  results are written to ``o`` (scratch ``s`` only for a partial sum kept where the
  collective has no output chunk), so one XML serves the out-of-place call and the in-place
  one (``inplace="1" outofplace="1"``: in place the two buffers are one and every read still
  finds its value); an allgather copies its own piece into the output with a ``cpy``;
- a threadblock holds at most `MAX_STEPS` steps (``MSCCL_MAX_NUM_STEPS``): where a ring is
  longer, every connection's messages are cut at the same points into *phases* and each
  phase gets threadblocks of its own on another channel (a phase's first step waits for the
  previous phase's last), so a sender and its receiver always change channel at the same
  message;
- channels: the threadblocks the messages of a connection tie together share a channel, and
  each such group gets a channel of its own (a ring its channel) when there are at most
  `MAX_CHANNELS`; otherwise groups that share no (GPU, peer, direction) share channels.

What a plan exports (`plan_msccl_exports`): the full-group AllReduce its iteration runs
(`planner.collectives.from_plan.choose_allreduce`): TopoOpt's multi-ring over the plan's
rings in both directions, rate-weighted on cables of different rates; the forest's packed
trees; the hierarchical AllReduce dimension by dimension (sequential: the executor's loop
over slices of the buffer pipelines the dimensions). Weights become whole chunks: every
ring (tree) gets ``m`` chunks per member, the integer split closest to the plan's weights
(`integer_shares`; its rate against the plan's split is in the export's notes). On a plan
with rings, the allgather and reduce-scatter halves over the same rings and weights; where
the plan's model-parallel traffic is an all-to-all (every server sends to every other), a
direct alltoall (one message per pair, routed by the network as the plan routes it).

The export reads itself back with `planner.collectives.msccl_xml` (the executor's parser
rules, strict) before it is returned; `MscclExportError` says why a schedule or plan cannot
be written (a compute op, a threadblock that cannot be cut under the step cap, more
channels than the executor has).

References: msccl-tools ``msccl/language/ir.py`` (``ir_to_xml``: attribute order, nops for
extra dependencies) and msccl-executor-nccl ``src/misc/msccl/msccl_parser.cc`` (the
grammar), ``msccl_lifecycle.cc`` (an algorithm is chosen when the count is a multiple of
``nchunksperloop`` and the size in ``[minBytes, maxBytes]``, ``maxBytes="0"`` unbounded).
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from math import gcd
from typing import Any

import numpy as np

from contract.schedule import RECV, SEND, Schedule, ScheduleBuilder

from .msccl_xml import (
    MAX_CHANNELS,
    MAX_COUNT,
    MAX_NODES,
    MAX_STEPS,
    MAX_TBS_PER_CHANNEL,
    MscclXmlError,
    check_algorithm,
    parse_msccl_xml,
)

MAX_WEIGHT_CHUNKS = 64  # the most chunks per member a ring (tree) gets when weights are rounded (cnt < 72)
WEIGHT_EFFICIENCY = 0.99  # rounding stops at the first split within 1% of the plan's rate
MAX_PHASES = 32  # a connection's messages are cut into at most this many phases
CHOICE_BYTES = 64 << 20  # the AllReduce size the plan's algorithm is chosen for (nccl-tests' largest)
ITEMSIZE = 4  # float32
PROTOCOL = "Simple"


class MscclExportError(ValueError):
    """A schedule or plan collective the MSCCL XML grammar (or its executor's limits) cannot
    state; the message is one line saying why."""


@dataclass(frozen=True)
class MscclExport:
    """One collective as MSCCL XML: the text, its figures, and the program it was written
    from (``schedule``, at ``unit_bytes``; `schedule_at` builds it at any multiple)."""

    coll: str
    name: str
    xml: str
    algorithm: str  # what it runs, in words
    ngpus: int
    nchannels: int
    nchunksperloop: int
    threadblocks: int  # the most threadblocks of one GPU
    steps: int  # the most steps of one threadblock
    total_steps: int
    unit_bytes: int  # the smallest size it runs: nchunksperloop float32 items (times the chunk grid)
    schedule: Schedule
    notes: tuple[str, ...] = ()
    build: Callable[[int], Schedule] | None = field(default=None, repr=False, compare=False)

    def schedule_at(self, nbytes: int) -> Schedule:
        """The program the XML states, moving ``nbytes`` (a multiple of ``unit_bytes``)."""
        if nbytes <= 0 or nbytes % self.unit_bytes:
            raise ValueError(f"{nbytes} bytes is not a positive multiple of the export's {self.unit_bytes}")
        if self.build is None:
            raise ValueError("this export has no program builder")
        return self.build(nbytes)


# ---- integer shares ------------------------------------------------------------------------
def share_efficiency(units: Sequence[int], weights: Sequence[float]) -> float:
    """The rate of splitting a buffer by ``units`` over parallel paths of rates ``weights``,
    as a fraction of the rate of splitting it by the weights themselves (1: as good)."""
    total_units, total = sum(units), float(sum(weights))
    slowest = max(u / total_units / w for u, w in zip(units, weights) if u)
    return (1.0 / total) / slowest


def integer_shares(
    weights: Sequence[float], max_units: int = MAX_WEIGHT_CHUNKS, target: float = WEIGHT_EFFICIENCY
) -> tuple[tuple[int, ...], float]:
    """Whole chunks per path, in proportion to ``weights`` (each path's rate): the fewest
    chunks (at most ``max_units`` for the fastest path) whose split reaches ``target`` of the
    weights' rate (`share_efficiency`), else the best; and that fraction."""
    if not weights or any(not w > 0 for w in weights):
        raise ValueError(f"weights must be positive, got {list(weights)}")
    top = max(weights)
    best: tuple[tuple[int, ...], float] | None = None
    for q in range(1, max_units + 1):
        units = tuple(int(round(q * w / top)) for w in weights)
        efficiency = share_efficiency(units, weights)
        if best is None or efficiency > best[1] + 1e-12:
            best = (units, efficiency)
        if efficiency >= target:
            break
    assert best is not None
    return best


# ---- the converter -------------------------------------------------------------------------
@dataclass(eq=False)
class _Op:
    """One send or receive of the schedule, in chunks."""

    rank: int
    stream: str
    index: int  # position in its stream
    id: int
    kind: str  # send / recv
    peer: int
    first: int  # first chunk
    count: int  # chunks
    tag: int
    mode: str
    after: tuple[int, ...]
    message: int = 0  # index of its message on its connection
    messages: int = 0  # messages on its connection
    order: int = 0  # position in an order every dependency respects
    lane: tuple[Any, ...] = ()
    phase: int = 0


@dataclass(eq=False)
class _Step:
    ops: list[_Op]
    type: str = ""
    srcbuf: str = "i"
    srcoff: int = 0
    dstbuf: str = "i"
    dstoff: int = 0
    pos: int = 0  # position in its threadblock, nops not counted
    deps: list[tuple[int, int]] = field(default_factory=list)  # (tb, step before nops)
    hasdep: bool = False
    index: int = 0  # final step number (nops counted)


@dataclass(eq=False)
class _Tb:
    rank: int
    lane: tuple[Any, ...]
    phase: int
    send: int = -1
    recv: int = -1
    steps: list[_Step] = field(default_factory=list)
    id: int = 0
    channel: int = 0
    nops: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # step -> extra deps before it
    local: list[tuple[str, int, str, int, int]] = field(default_factory=list)  # cpy steps


class _Layout:
    """Where chunk ``c`` of the schedule's buffer is in MSCCL's input and output buffers for
    ``coll`` on GPU ``g`` (None: nowhere), with ``m`` chunks per GPU for the gather/scatter
    collectives."""

    def __init__(self, coll: str, ngpus: int, nchunks: int):
        if coll not in ("allreduce", "allgather", "reducescatter"):
            raise MscclExportError(f"schedules convert to allreduce, allgather or reducescatter, not {coll!r}")
        if coll != "allreduce" and nchunks % ngpus:
            raise MscclExportError(f"a {coll} of {ngpus} GPUs needs a multiple of {ngpus} chunks, not {nchunks}")
        self.coll, self.ngpus, self.nchunks = coll, ngpus, nchunks
        self.m = nchunks // ngpus if coll != "allreduce" else nchunks

    def input_index(self, g: int, c: int) -> int | None:
        if self.coll == "allgather":
            return c - g * self.m if g * self.m <= c < (g + 1) * self.m else None
        return c

    def output_index(self, g: int, c: int) -> int | None:
        if self.coll == "reducescatter":
            return c - g * self.m if g * self.m <= c < (g + 1) * self.m else None
        return c

    @property
    def input_chunks(self) -> int:
        return self.m if self.coll == "allgather" else self.nchunks

    @property
    def output_chunks(self) -> int:
        return self.m if self.coll == "reducescatter" else self.nchunks


def _read_ops(schedule: Schedule, buffer: str) -> tuple[list[list[_Op]], int]:
    """Every op of every rank (stream by stream, each in order), in chunks of the coarsest
    grid; read from the programs' arrays, not op by op."""
    if buffer not in schedule.buffers:
        raise MscclExportError(f"the schedule has no buffer {buffer!r}")
    itemsize = schedule.buffers[buffer].itemsize
    grid = schedule.buffers[buffer].bytes // itemsize
    for rank, program in enumerate(schedule.programs):
        kind = np.asarray(program.kind)
        other = np.flatnonzero((kind != SEND) & (kind != RECV))
        if len(other):
            stream = program.streams[int(np.asarray(program.stream)[other[0]])]
            raise MscclExportError(
                f"rank {rank} stream {stream!r}: a {program.kinds[kind[other[0]]]} op; MSCCL XML states transfers only"
            )
        used = {program.buffers[b] for b in np.unique(np.asarray(program.buffer)).tolist()} if len(kind) else set()
        if used - {buffer}:
            raise MscclExportError(f"rank {rank}: ops on buffer {sorted(used - {buffer})[0]!r}, not {buffer!r}")
        if len(kind):
            items = (
                np.concatenate([np.asarray(program.offset), np.asarray(program.length)]).astype(np.int64) // itemsize
            )
            grid = gcd(grid, int(np.gcd.reduce(items)))
    if grid == 0:
        raise MscclExportError("the schedule moves no data")
    out: list[list[_Op]] = []
    for rank, program in enumerate(schedule.programs):
        order, bounds = program.stream_order()
        rows = order.tolist()
        ids = program.op_ids(order).tolist()
        after = program.after_map() if len(program.after_rows) else {}
        stream, kind, peer, offset, length, tag, mode = (
            np.asarray(c)[order].tolist()
            for c in (
                program.stream,
                program.kind,
                program.peer,
                program.offset,
                program.length,
                program.tag,
                program.mode,
            )
        )
        starts = bounds.tolist()
        unit = itemsize * grid
        out.append(
            [
                _Op(rank, program.streams[stream[i]], i - starts[stream[i]], ids[i], program.kinds[kind[i]], peer[i],
                    offset[i] // unit, length[i] // unit, tag[i], program.modes[mode[i]], after.get(rows[i], ()))
                for i in range(len(rows))
            ]
        )  # fmt: skip
    return out, grid


def _match(ops: list[list[_Op]]) -> dict[int, _Op]:
    """Number every message on its connection (src, dst, tag); each send's receive, by
    ``id()`` of the send. One stream per (rank, peer, tag, direction)."""
    sends: dict[tuple[int, int, int], list[_Op]] = defaultdict(list)
    recvs: dict[tuple[int, int, int], list[_Op]] = defaultdict(list)
    streams: dict[tuple[int, int, int, str], str] = {}
    for rank_ops in ops:
        for op in rank_ops:
            key = (op.rank, op.peer, op.tag, op.kind)
            if streams.setdefault(key, op.stream) != op.stream:
                raise MscclExportError(
                    f"rank {op.rank}: streams {streams[key]!r} and {op.stream!r} both {op.kind} tag {op.tag} "
                    f"with {op.peer}: their messages have no order an MSCCL connection could keep"
                )
            conn = (op.rank, op.peer, op.tag) if op.kind == "send" else (op.peer, op.rank, op.tag)
            (sends if op.kind == "send" else recvs)[conn].append(op)
    receiver: dict[int, _Op] = {}
    for conn in set(sends) | set(recvs):
        out, into = sends.get(conn, []), recvs.get(conn, [])
        if len(out) != len(into):
            raise MscclExportError(
                f"connection {conn[0]} -> {conn[1]} tag {conn[2]}: {len(out)} sends, {len(into)} receives"
            )
        for k, (s, r) in enumerate(zip(out, into)):
            if s.count != r.count:
                raise MscclExportError(
                    f"connection {conn[0]} -> {conn[1]}: message {k} sent {s.count} chunks, received {r.count}"
                )
            s.message = r.message = k
            s.messages = r.messages = len(out)
            receiver[id(s)] = r
    return receiver


def _order(ops: list[list[_Op]], receiver: dict[int, _Op]) -> None:
    """Number the ops in an order that respects stream order, ``after`` and send before
    receive (``_Op.order``); the schedule is race-free, so every such order sees each
    chunk's accesses in the same sequence."""
    flat = [op for rank_ops in ops for op in rank_ops]
    for g, op in enumerate(flat):
        op.order = g  # for now: its index
    succ: list[list[int]] = [[] for _ in flat]
    indegree = [0] * len(flat)
    for rank_ops in ops:
        index = {op.id: op.order for op in rank_ops}
        previous: dict[str, int] = {}
        for op in rank_ops:  # stream by stream, each in order
            before = [index[a] for a in op.after if a in index]
            if op.stream in previous:
                before.append(previous[op.stream])
            previous[op.stream] = op.order
            for p in before:
                succ[p].append(op.order)
            indegree[op.order] += len(before)
    for op in flat:
        if op.kind == "send":
            r = receiver[id(op)].order
            succ[op.order].append(r)
            indegree[r] += 1
    ready = deque(g for g in range(len(flat)) if indegree[g] == 0)
    position = [0] * len(flat)
    n = 0
    while ready:
        g = ready.popleft()
        position[g] = n
        n += 1
        for nxt in succ[g]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
    if n != len(flat):
        raise MscclExportError("the schedule's dependencies have a cycle")
    for g, op in enumerate(flat):
        op.order = position[g]


def _lanes(ops: list[list[_Op]]) -> None:
    """A stream with one send peer and one receive peer is one lane (threadblock); a stream
    with more peers gets a lane per (direction, peer)."""
    peers: dict[tuple[int, str, str], set[int]] = defaultdict(set)
    for rank_ops in ops:
        for op in rank_ops:
            peers[(op.rank, op.stream, op.kind)].add(op.peer)
    for rank_ops in ops:
        for op in rank_ops:
            single = len(peers[(op.rank, op.stream, "send")]) <= 1 and len(peers[(op.rank, op.stream, "recv")]) <= 1
            op.lane = (op.stream,) if single else (op.stream, op.kind, op.peer)


@dataclass
class _Lowered:
    tbs: list[list[_Tb]]  # per rank
    scratch: list[int]  # per rank: scratch chunks used
    nchannels: int


def _fusable(recv: _Op, send: _Op) -> bool:
    """Is ``send`` the next op of ``recv``'s stream, in its threadblock, of the same region,
    waiting for nothing else (one fused step)?"""
    return (
        recv.kind == "recv"
        and send.kind == "send"
        and send.index == recv.index + 1
        and send.first == recv.first
        and send.count == recv.count
        and send.phase == recv.phase
        and send.stream == recv.stream
        and send.lane == recv.lane
        and all(a == recv.id for a in send.after)
    )


def _lower(ops: list[list[_Op]], layout: _Layout, phases: int) -> _Lowered:
    """Threadblocks, steps, buffers and dependencies for ``phases`` phases per connection."""
    for rank_ops in ops:
        for op in rank_ops:
            op.phase = op.message * phases // op.messages
    tbs: list[list[_Tb]] = []
    scratch: list[int] = []
    for rank, rank_ops in enumerate(ops):
        by_stream: dict[str, list[_Op]] = defaultdict(list)
        for op in rank_ops:
            by_stream[op.stream].append(op)
        lanes: dict[tuple[Any, ...], list[_Op]] = {}
        for stream_ops in by_stream.values():
            stream_ops.sort(key=lambda o: o.index)
            for op in stream_ops:
                lanes.setdefault(op.lane, []).append(op)
        # segments: a threadblock per (lane, phase); phases must not go back along a lane
        rank_tbs: list[_Tb] = []
        step_of: dict[int, tuple[_Tb, _Step]] = {}
        for lane, lane_ops in lanes.items():
            tb = None
            for op in lane_ops:
                if tb is None or op.phase != tb.phase:
                    if tb is not None and op.phase < tb.phase:
                        raise MscclExportError(
                            f"rank {rank} stream {op.stream!r}: its messages cannot be cut into phases in step "
                            f"(a threadblock would exceed {MAX_STEPS} steps)"
                        )
                    tb = _Tb(rank, lane, op.phase)
                    rank_tbs.append(tb)
                if op.kind == "send":
                    tb.send = op.peer
                else:
                    tb.recv = op.peer
                last = tb.steps[-1] if tb.steps else None
                if last is not None and len(last.ops) == 1 and _fusable(last.ops[0], op):
                    last.ops.append(op)
                else:
                    tb.steps.append(_Step([op], pos=len(tb.steps)))
                step_of[id(op)] = (tb, tb.steps[-1])
        for t, tb in enumerate(rank_tbs):
            tb.id = t
        _buffers(rank, rank_ops, step_of, layout)
        scratch.append(
            max((s.dstoff + s.ops[0].count for tb in rank_tbs for s in tb.steps if s.dstbuf == "s"), default=0)
        )
        _dependencies(rank_ops, rank_tbs, step_of)
        if layout.coll == "allgather":  # the GPU's own piece into the output: a copy in a threadblock of its own
            own = layout.m
            local = _Tb(rank, ("copy",), 0, id=len(rank_tbs))
            for start in range(0, own, MAX_COUNT - 1):
                count = min(MAX_COUNT - 1, own - start)
                local.local.append(("i", start, "o", rank * own + start, count))
            rank_tbs.append(local)
        tbs.append(rank_tbs)
    nchannels = _channels(ops, tbs)
    return _Lowered(tbs, scratch, nchannels)


def _buffers(rank: int, rank_ops: list[_Op], step_of: dict[int, tuple[_Tb, _Step]], layout: _Layout) -> None:
    """Each step's type and buffers: reads from where the chunk's value is (the input until
    written), results into the output (scratch where the collective has none)."""
    accesses: dict[int, list[_Op]] = defaultdict(list)
    ordered = sorted(rank_ops, key=lambda o: o.order)
    for op in ordered:
        for c in range(op.first, op.first + op.count):
            accesses[c].append(op)

    def live_after(step: _Step) -> bool:
        """Is the sum a fused receive-and-send computes read again (or a result)?"""
        recv, send = step.ops
        for c in range(recv.first, recv.first + recv.count):
            chunk = accesses[c]
            later = [o for o in chunk[chunk.index(recv) + 1 :] if o is not send]
            if later:
                if later[0].kind == "send" or later[0].mode == "reduce":
                    return True
            elif layout.output_index(rank, c) is not None:
                return True
        return False

    where: dict[int, str] = {}  # chunk -> "o" or "s" once written
    done: set[int] = set()
    for op in ordered:
        tb, step = step_of[id(op)]
        if id(step) in done:
            continue
        done.add(id(step))
        first, count = op.first, op.count
        places = {where.get(c, "i") for c in range(first, first + count)}
        if len(places) > 1:
            raise MscclExportError(
                f"rank {rank}: an op reads chunks {first}..{first + count - 1} from different buffers"
            )
        place = places.pop()

        def index(buf: str, c: int) -> int:
            i = layout.input_index(rank, c) if buf == "i" else layout.output_index(rank, c) if buf == "o" else c
            if i is None:
                raise MscclExportError(f"rank {rank}: chunk {c} is read before anything put it there")
            return i

        recv = step.ops[0] if step.ops[0].kind == "recv" else None
        sends = len(step.ops) == 2 or step.ops[0].kind == "send"
        if recv is None or recv.mode == "reduce":  # it reads the chunk here
            step.srcbuf, step.srcoff = place, index(place, first)
        if recv is None:  # a send
            step.type = "s"
            step.dstbuf, step.dstoff = step.srcbuf, step.srcoff
            continue
        keep = not sends or live_after(step)
        if recv.mode == "reduce" and not keep:
            step.type = "rrs"
            step.dstbuf, step.dstoff = step.srcbuf, step.srcoff
            continue
        out = "o" if all(layout.output_index(rank, c) is not None for c in range(first, first + count)) else "s"
        step.dstbuf, step.dstoff = out, index(out, first)
        for c in range(first, first + count):
            where[c] = out
        if recv.mode == "reduce":
            step.type = "rrcs" if sends else "rrc"
        else:
            step.type = "rcs" if sends else "r"
            step.srcbuf, step.srcoff = step.dstbuf, step.dstoff


def _dependencies(rank_ops: list[_Op], tbs: list[_Tb], step_of: dict[int, tuple[_Tb, _Step]]) -> None:
    """Each step's dependencies (threadblock, step): its ops' ``after`` and stream
    predecessor in other threadblocks; the latest per threadblock, none a step before
    already waited for; extra ones become nops."""
    by_id = {op.id: op for op in rank_ops}
    previous: dict[str, _Op] = {}
    for op in sorted(rank_ops, key=lambda o: (o.stream, o.index)):
        tb, step = step_of[id(op)]
        before = [by_id[a] for a in op.after if a in by_id]
        prev = previous.get(op.stream)
        if prev is not None and prev.index == op.index - 1:
            before.append(prev)
        previous[op.stream] = op
        for p in before:
            ptb, pstep = step_of[id(p)]
            if ptb is tb:
                continue
            step.deps.append((ptb.id, pstep.pos))
    for tb in tbs:
        waited: dict[int, int] = {}
        for s, step in enumerate(tb.steps):
            latest: dict[int, int] = {}
            for t, k in step.deps:
                latest[t] = max(latest.get(t, -1), k)
            step.deps = sorted((t, k) for t, k in latest.items() if k > waited.get(t, -1))
            for t, k in step.deps:
                waited[t] = k
                tbs[t].steps[k].hasdep = True
            if len(step.deps) > 1:
                tb.nops[s] = step.deps[:-1]
    for tb in tbs:  # final step numbers: nops before the step they serve
        n = 0
        for s, step in enumerate(tb.steps):
            n += len(tb.nops.get(s, ()))
            step.index = n
            n += 1


def _channels(ops: list[list[_Op]], tbs: list[list[_Tb]]) -> int:
    """Give each group of threadblocks tied by messages a channel (module docstring)."""
    tb_of: dict[int, _Tb] = {}
    for rank_tbs in tbs:
        for tb in rank_tbs:
            for step in tb.steps:
                for op in step.ops:
                    tb_of[id(op)] = tb
    parent: dict[int, int] = {}
    index = {id(tb): i for i, tb in enumerate(t for rank_tbs in tbs for t in rank_tbs)}
    flat = [t for rank_tbs in tbs for t in rank_tbs]

    def find(i: int) -> int:
        while parent.get(i, i) != i:
            parent[i] = parent.get(parent[i], parent[i])
            i = parent[i]
        return i

    receivers: dict[tuple[int, int, int, int], _Tb] = {}
    for rank_ops in ops:
        for op in rank_ops:
            if op.kind == "recv":
                receivers[(op.peer, op.rank, op.tag, op.message)] = tb_of[id(op)]
    for rank_ops in ops:
        for op in rank_ops:
            if op.kind == "send":
                a, b = (
                    find(index[id(tb_of[id(op)])]),
                    find(index[id(receivers[(op.rank, op.peer, op.tag, op.message)])]),
                )
                if a != b:
                    parent[max(a, b)] = min(a, b)
    groups: dict[int, list[_Tb]] = defaultdict(list)
    for i, tb in enumerate(flat):
        if tb.send >= 0 or tb.recv >= 0:
            groups[find(i)].append(tb)
    ordered = [groups[g] for g in sorted(groups)]
    ends: list[set[tuple[int, str, int]]] = []  # per group: (rank, direction, peer) it uses
    for members in ordered:
        used: set[tuple[int, str, int]] = set()
        for tb in members:
            for direction, peer in (("send", tb.send), ("recv", tb.recv)):
                if peer < 0:
                    continue
                if (tb.rank, direction, peer) in used:
                    raise MscclExportError(
                        f"rank {tb.rank}: two threadblocks {direction} with {peer} on one channel (a connection "
                        "the schedule uses from two streams)"
                    )
                used.add((tb.rank, direction, peer))
        ends.append(used)
    colour: list[int] = []
    if len(ordered) <= MAX_CHANNELS:
        colour = list(range(len(ordered)))
    else:
        taken: list[set[tuple[int, str, int]]] = []
        count: list[dict[tuple[int, str], int]] = []
        for g in range(len(ordered)):
            per: dict[tuple[int, str], int] = defaultdict(int)
            for r, direction, _ in ends[g]:
                per[(r, direction)] += 1
            c = 0
            while True:
                if c == len(taken):
                    taken.append(set())
                    count.append(defaultdict(int))
                fits = all(count[c][k] + v <= MAX_TBS_PER_CHANNEL for k, v in per.items())
                if fits and not (taken[c] & ends[g]):
                    break
                c += 1
            if c >= MAX_CHANNELS:
                raise MscclExportError(
                    f"{len(ordered)} groups of threadblocks need more than the executor's {MAX_CHANNELS} channels"
                )
            taken[c] |= ends[g]
            for k, v in per.items():
                count[c][k] += v
            colour.append(c)
    for members, c in zip(ordered, colour):
        for tb in members:
            tb.channel = c
    return max(colour, default=0) + 1


def _xml(name: str, coll: str, lowered: _Lowered, layout: _Layout, ngpus: int, min_bytes: int, max_bytes: int) -> str:
    lines = [
        f'<algo name="{name}" proto="{PROTOCOL}" nchannels="{lowered.nchannels}" nchunksperloop="{layout.nchunks}" '
        f'ngpus="{ngpus}" coll="{coll}" inplace="1" outofplace="1" minBytes="{min_bytes}" maxBytes="{max_bytes}">'
    ]

    def step_line(
        s: int, kind: str, sb: str, so: int, db: str, do: int, cnt: int, dep: tuple[int, int] | None, has: bool
    ) -> str:
        depid, deps = dep if dep is not None else (-1, -1)
        return (
            f'      <step s="{s}" type="{kind}" srcbuf="{sb}" srcoff="{so}" dstbuf="{db}" dstoff="{do}" cnt="{cnt}" '
            f'depid="{depid}" deps="{deps}" hasdep="{int(has)}"/>'
        )

    for rank, rank_tbs in enumerate(lowered.tbs):
        lines.append(
            f'  <gpu id="{rank}" i_chunks="{layout.input_chunks}" o_chunks="{layout.output_chunks}" '
            f's_chunks="{lowered.scratch[rank]}">'
        )
        for tb in rank_tbs:
            lines.append(f'    <tb id="{tb.id}" send="{tb.send}" recv="{tb.recv}" chan="{tb.channel}">')
            n = 0
            for src, so, dst, do, cnt in tb.local:
                lines.append(step_line(n, "cpy", src, so, dst, do, cnt, None, False))
                n += 1
            for s, step in enumerate(tb.steps):
                for t, k in tb.nops.get(s, ()):
                    lines.append(step_line(n, "nop", "i", -1, "o", -1, 0, (t, rank_tbs[t].steps[k].index), False))
                    n += 1
                last = step.deps[-1] if step.deps else None
                dep = (last[0], rank_tbs[last[0]].steps[last[1]].index) if last else None
                cnt = step.ops[0].count
                lines.append(
                    step_line(n, step.type, step.srcbuf, step.srcoff, step.dstbuf, step.dstoff, cnt, dep, step.hasdep)
                )
                n += 1
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


def _too_long(lowered: _Lowered) -> int:
    """The most steps of one threadblock."""
    return max(
        (
            len(tb.local) + len(tb.steps) + sum(len(v) for v in tb.nops.values())
            for rank_tbs in lowered.tbs
            for tb in rank_tbs
        ),
        default=0,
    )


def schedule_to_msccl(
    schedule: Schedule,
    coll: str = "allreduce",
    name: str | None = None,
    *,
    buffer: str | None = None,
    min_bytes: int = 0,
    max_bytes: int = 0,
    algorithm: str = "",
    notes: Sequence[str] = (),
    build: Callable[[int], Schedule] | None = None,
) -> MscclExport:
    """``schedule`` (sends and receives on one buffer, every rank a GPU) as MSCCL XML of
    ``coll`` (module docstring), checked by the executor's parser rules before it is
    returned. ``buffer``: the schedule's buffer (default: its only one)."""
    if buffer is None:
        if len(schedule.buffers) != 1:
            raise MscclExportError(f"the schedule has buffers {sorted(schedule.buffers)}: name the collective's")
        buffer = next(iter(schedule.buffers))
    name = name or schedule.algorithm or coll
    ops, grid = _read_ops(schedule, buffer)
    itemsize = schedule.buffers[buffer].itemsize
    nchunks = schedule.buffers[buffer].bytes // itemsize // grid
    layout = _Layout(coll, schedule.ranks, nchunks)
    if any(op.count >= MAX_COUNT for rank_ops in ops for op in rank_ops):
        raise MscclExportError(f"a message of {MAX_COUNT} chunks or more (the executor's cnt < {MAX_COUNT})")
    receiver = _match(ops)
    _order(ops, receiver)
    _lanes(ops)
    per_lane = Counter((op.rank, op.lane) for rank_ops in ops for op in rank_ops)
    longest = max(per_lane.values(), default=1)
    phases = max(1, -(-longest // (2 * (MAX_STEPS - 2))))  # fused steps: about two ops a step
    while True:
        lowered = _lower(ops, layout, phases)
        if _too_long(lowered) <= MAX_STEPS:
            break
        if phases >= MAX_PHASES:
            raise MscclExportError(
                f"a threadblock keeps more than {MAX_STEPS} steps even cut into {MAX_PHASES} phases "
                f"({schedule.ranks} GPUs: too long a ring for the executor's step cap)"
            )
        phases += 1
    xml = _xml(name, coll, lowered, layout, schedule.ranks, min_bytes, max_bytes)
    try:
        algo = parse_msccl_xml(xml, f"<{name}>", strict=True)
        problems = check_algorithm(algo)
    except MscclXmlError as err:
        problems = err.problems
    if problems:
        raise MscclExportError(f"the XML written does not pass the executor's rules: {problems[0]}")
    return MscclExport(
        coll=coll,
        name=name,
        xml=xml,
        algorithm=algorithm or schedule.algorithm,
        ngpus=schedule.ranks,
        nchannels=lowered.nchannels,
        nchunksperloop=nchunks,
        threadblocks=max(len(t) for t in lowered.tbs),
        steps=_too_long(lowered),
        total_steps=algo.step_count(),
        unit_bytes=schedule.buffers[buffer].bytes,
        schedule=schedule,
        notes=tuple(notes)
        + ((f"{phases} phases per connection (threadblocks of at most {MAX_STEPS} steps)",) if phases > 1 else ()),
        build=build,
    )


def to_msccl_xml(schedule: Schedule, coll: str = "allreduce", name: str | None = None, **options: Any) -> str:
    """The MSCCL XML text of ``schedule`` (`schedule_to_msccl`)."""
    return schedule_to_msccl(schedule, coll, name, **options).xml


# ---- a plan's collectives --------------------------------------------------------------------
def _name(plan: Any, coll: str) -> str:
    return f"topolab-{plan.topology}-{int(plan.servers)}-{coll}"


def _check_ring_size(n: int, rings: int, messages: int) -> None:
    """Refuse at once (before a program of millions of ops is built) rings the executor
    cannot hold: each connection's ``messages`` cut into phases of at most ``MAX_STEPS - 1``
    (a phase's fused steps and its last receive), every phase of a ring on a channel of its
    own, and every GPU's steps and threadblocks among the parser's ``MAX_NODES`` elements."""
    phases = -(-messages // (MAX_STEPS - 1))
    elements = 1 + n + rings * phases + rings * (messages + phases)
    if phases > MAX_CHANNELS or elements >= MAX_NODES:
        raise MscclExportError(
            f"{rings} rings of {n} GPUs: {messages} messages per connection need {phases} channels per ring "
            f"(the executor has {MAX_CHANNELS}) and about {elements} elements per GPU (its parser holds "
            f"{MAX_NODES - 1}); too large for MSCCL's executor"
        )


def _ring_units(choice: Any) -> tuple[list[tuple[list[int], int]], list[str]]:
    """The rings of a ring-shaped AllReduce choice with their whole chunks per member
    (rings that round to none dropped), and a note on the rounding of weighted rings."""
    rings = [list(r) for r in choice.rings[0]]
    weights = choice.weights[0]
    if weights is None:
        return [(r, 1) for r in rings], []
    units, efficiency = integer_shares(weights)
    kept = [(r, m) for r, m in zip(rings, units) if m]
    note = (
        f"rate-weighted rings in whole chunks per member ({', '.join(map(str, units))}): "
        f"{efficiency:.1%} of the rate of the plan's split ({', '.join(f'{w:g}' for w in weights)} Gbit/s)"
    )
    return kept, [note]


def plan_allreduce(plan: Any, algorithm: str = "auto", choice_bytes: int = CHOICE_BYTES) -> MscclExport:
    """The full-group AllReduce ``plan`` runs (`choose_allreduce`; ``algorithm`` one of its
    names, ``auto`` the iteration's rule) as MSCCL XML, written from its schedule program."""
    from .forest import forest_schedule
    from .from_plan import choose_allreduce
    from .hierarchical import hierarchical_allreduce
    from .rings import multiring_allreduce

    n = int(plan.servers)
    choice = choose_allreduce(plan, choice_bytes, algorithm=algorithm)
    why = ("the plan's iteration runs it: " if algorithm == "auto" else f"{algorithm}, as asked: ") + choice.reason
    if choice.shape == "msccl":
        assert choice.msccl is not None
        return _recorded_export(plan, choice.msccl.algorithm, choice.msccl.gpus_per_server, why)
    if choice.shape == "rings":
        kept, notes = _ring_units(choice)
        _check_ring_size(n, len(kept), 2 * (n - 1))
        rings, units = [r for r, _ in kept], [float(m) for _, m in kept]
        unit = ITEMSIZE * n * sum(m for _, m in kept)

        def build(nbytes: int) -> Schedule:
            return multiring_allreduce(n, nbytes, rings, algorithm=choice.algorithm, weights=units)

        what = f"{choice.algorithm}: {len(rings)} rings of {n} (the plan's rings, both directions)"
    elif choice.shape == "trees":
        assert choice.trees is not None and choice.packing is not None
        trees, packing = choice.trees, choice.packing
        tree_units, efficiency = integer_shares([t.rate for t in trees])
        kept_trees = [(t, m) for t, m in zip(trees, tree_units) if m]
        unit = ITEMSIZE * sum(m for _, m in kept_trees)
        notes = [
            f"the forest's {len(kept_trees)} trees in whole chunks ({', '.join(map(str, tree_units))}): "
            f"{efficiency:.1%} of the rate of the packing's split",
            "one message per tree edge: the executor's loop over slices of the buffer pipelines the trees",
        ]

        def build(nbytes: int) -> Schedule:
            scale, offset, forest = nbytes // unit, 0, []
            for tree, m in kept_trees:
                length = m * ITEMSIZE * scale
                forest.append(replace(tree, offset=offset, length=length))
                offset += length
            top = max(t.length for t in forest)
            return forest_schedule(forest, packing, n, nbytes, segment_bytes=top, path=plan.path)

        what = f"{choice.algorithm}: {len(kept_trees)} packed spanning trees, each reduced up and broadcast down"
    else:
        hierarchical = plan.topology == "hierarchical"
        dims = list(plan.extra["dims"]) if hierarchical else [n]
        blocks = list(plan.extra["blocks"]) if hierarchical else ["ring"]
        unit = ITEMSIZE * 2 * n
        notes = ["the dimensions one after the other per slice: the executor's loop over slices pipelines them"]

        def build(nbytes: int) -> Schedule:
            return hierarchical_allreduce(dims, blocks, nbytes, chunks=1)

        what = f"hierarchical: reduce-scatter and all-gather per dimension, dims {' x '.join(map(str, dims))} ({', '.join(blocks)})"
    export = schedule_to_msccl(
        build(unit), "allreduce", _name(plan, "allreduce"), algorithm=what, notes=[why, *notes], build=build
    )
    return export


def _recorded_export(plan: Any, algo: Any, gpus_per_server: int, why: str) -> MscclExport:
    """The MSCCL XML a plan records as its AllReduce (its scenario's ``[collectives]
    allreduce = "msccl:FILE"``), written out as given."""
    from .from_plan import MSCCL_EXTRA
    from .msccl_xml import translate

    record = plan.extra[MSCCL_EXTRA]
    n = int(plan.servers)
    unit = algo.nchunksperloop * ITEMSIZE

    def build(nbytes: int) -> Schedule:
        return translate(algo, n, nbytes, gpus_per_server)

    return MscclExport(
        coll=algo.coll,
        name=algo.name,
        xml=str(record["xml"]),
        algorithm=f"the MSCCL XML the scenario names ({record['file']}), as given",
        ngpus=algo.ngpus,
        nchannels=algo.nchannels,
        nchunksperloop=algo.nchunksperloop,
        threadblocks=max(len(g.tbs) for g in algo.gpus),
        steps=max((len(tb.steps) for g in algo.gpus for tb in g.tbs), default=0),
        total_steps=algo.step_count(),
        unit_bytes=unit,
        schedule=build(unit),
        notes=(why,),
        build=build,
    )


def plan_ring_half(plan: Any, coll: str, choice_bytes: int = CHOICE_BYTES) -> MscclExport:
    """The allgather or reducescatter (``coll``) over the rings and weights of the plan's ring
    AllReduce: the two halves it is made of, for frameworks that call them on their own."""
    from .from_plan import choose_allreduce
    from .rings import add_ring_all_gather, add_ring_reduce_scatter

    if coll not in ("allgather", "reducescatter"):
        raise ValueError(f"a ring half is allgather or reducescatter, not {coll!r}")
    n = int(plan.servers)
    choice = choose_allreduce(plan, choice_bytes)
    if choice.shape != "rings":
        raise MscclExportError(
            f"the plan's AllReduce is the {choice.algorithm} ({choice.shape}), not rings: no ring {coll} to export"
        )
    kept, notes = _ring_units(choice)
    _check_ring_size(n, len(kept), n - 1)
    per_gpu = sum(m for _, m in kept)  # chunks of each GPU's piece
    unit = ITEMSIZE * n * per_gpu
    add = add_ring_all_gather if coll == "allgather" else add_ring_reduce_scatter

    def build(nbytes: int) -> Schedule:
        scale = nbytes // unit
        b = ScheduleBuilder(n, f"{coll} rings")
        b.buffer("data", nbytes)
        start = 0
        for i, (ring, m) in enumerate(kept):
            pieces = [(ITEMSIZE * scale * (ring[j] * per_gpu + start), ITEMSIZE * scale * m) for j in range(n)]
            add(b, ring, "data", pieces, f"ring{i}", b.new_tag(), {})
            start += m
        b.params.update(nbytes=nbytes, collective=coll, rings=[r for r, _ in kept])
        return b.build()

    what = f"{coll} over the {len(kept)} rings of the plan's AllReduce ({choice.algorithm})"
    return schedule_to_msccl(build(unit), coll, _name(plan, coll), algorithm=what, notes=notes, build=build)


def alltoall_schedule(n: int, nbytes: int) -> Schedule:
    """A direct all-to-all of ``nbytes`` per GPU (``nbytes / n`` to each): every pair one
    message, a stream per peer; laid out as `planner.collectives.msccl_xml` lays out an
    alltoall (the piece GPU h sends GPU g at region ``h n + g`` of a buffer of ``n`` pieces per
    pair... on both), which the workers and the predictor run as they run the XML read back."""
    piece = nbytes // n
    if nbytes <= 0 or nbytes % (n * ITEMSIZE):
        raise ValueError(f"an alltoall of {n} GPUs moves a multiple of {n * ITEMSIZE} bytes, not {nbytes}")
    b = ScheduleBuilder(n, "alltoall direct")
    b.buffer("data", n * nbytes)
    tag = b.new_tag()
    for g in range(n):
        for k in range(1, n):
            h = (g + k) % n
            b.send(g, f"a2a{h}", h, "data", (g * n + h) * piece, piece, tag)
            b.recv(g, f"a2a{h}", h, "data", (h * n + g) * piece, piece, tag, "copy")
    b.params.update(nbytes=nbytes, collective="alltoall")
    return b.build()


def alltoall_msccl(n: int, name: str = "topolab-alltoall") -> MscclExport:
    """A direct alltoall of ``n`` GPUs as MSCCL XML: a threadblock per peer that sends the
    peer's piece, then receives the peer's piece for it (in place the send has read the chunk
    before the receive writes it), and a copy of the GPU's own piece; peer ``h`` of GPU ``g``
    on channel ``((g + h) mod n) // 32`` so no channel has more than the executor's 32
    threadblocks per GPU."""
    if n < 2:
        raise MscclExportError("an alltoall needs at least 2 GPUs")
    nchannels = -(-n // MAX_TBS_PER_CHANNEL)
    lines = [
        f'<algo name="{name}" proto="{PROTOCOL}" nchannels="{nchannels}" nchunksperloop="{n}" ngpus="{n}" '
        'coll="alltoall" inplace="1" outofplace="1" minBytes="0" maxBytes="0">'
    ]
    step = (
        '      <step s="{s}" type="{t}" srcbuf="{sb}" srcoff="{so}" dstbuf="{db}" dstoff="{do}" cnt="1" '
        'depid="-1" deps="-1" hasdep="0"/>'
    )
    for g in range(n):
        lines.append(f'  <gpu id="{g}" i_chunks="{n}" o_chunks="{n}" s_chunks="0">')
        lines.append('    <tb id="0" send="-1" recv="-1" chan="0">')
        lines.append(step.format(s=0, t="cpy", sb="i", so=g, db="o", do=g))
        lines.append("    </tb>")
        for t, k in enumerate(range(1, n), start=1):
            h = (g + k) % n
            lines.append(f'    <tb id="{t}" send="{h}" recv="{h}" chan="{((g + h) % n) // MAX_TBS_PER_CHANNEL}">')
            lines.append(step.format(s=0, t="s", sb="i", so=h, db="o", do=g))
            lines.append(step.format(s=1, t="r", sb="o", so=h, db="o", do=h))
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    xml = "\n".join(lines) + "\n"
    algo = parse_msccl_xml(xml, f"<{name}>", strict=True)
    problems = check_algorithm(algo)
    if problems:
        raise MscclExportError(f"the XML written does not pass the executor's rules: {problems[0]}")
    unit = n * ITEMSIZE
    return MscclExport(
        coll="alltoall",
        name=name,
        xml=xml,
        algorithm=f"alltoall: direct, one message per ordered pair of the {n} servers (routed as the plan routes it)",
        ngpus=n,
        nchannels=nchannels,
        nchunksperloop=n,
        threadblocks=n,
        steps=2,
        total_steps=algo.step_count(),
        unit_bytes=unit,
        schedule=alltoall_schedule(n, unit),
        build=lambda nbytes: alltoall_schedule(n, nbytes),
    )


def has_alltoall(plan: Any) -> bool:
    """Does the plan's model-parallel traffic include an all-to-all: a flow between every
    ordered pair of servers (DLRM's embedding exchange)?"""
    n = int(plan.servers)
    pairs = {(f.src, f.dst) for f in plan.demand.mp if f.src != f.dst and f.src < n and f.dst < n}
    return n > 1 and len(pairs) == n * (n - 1)


COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall")


def plan_msccl_exports(plan: Any) -> dict[str, MscclExport | str]:
    """Every collective of ``plan`` as MSCCL XML (module docstring), or why it is not exported."""
    out: dict[str, MscclExport | str] = {}
    for coll in COLLECTIVES:
        try:
            if coll == "allreduce":
                out[coll] = plan_allreduce(plan)
            elif coll == "alltoall":
                out[coll] = (
                    alltoall_msccl(int(plan.servers), _name(plan, coll))
                    if has_alltoall(plan)
                    else "the plan's traffic has no all-to-all (no flow between every pair of servers)"
                )
            else:
                out[coll] = plan_ring_half(plan, coll)
        except MscclExportError as err:
            out[coll] = str(err)
    return out
