"""The schedule format: per-rank programs of send / recv / compute ops, as plain JSON data.

A schedule is what the planner decides about *how* bytes move in a collective (or in a
whole training iteration); the workers execute it, the data-level simulator
(`planner.collectives.simulate`) proves it reduces correctly, and the timing model predicts
it. Everything is plain data (``Schedule.to_dict()`` is JSON), so no component needs the
planner's objects. The format is documented for users of the JSON in docs/schedules.md.

Model
-----
- Every rank has named buffers (``grad`` of S bytes of float32, ``act`` for activations...).
- Every rank runs a program: named *streams* of ops. Ops of one stream run in order; streams
  run concurrently (one per ring, so multi-ring AllReduce keeps every interface busy). An op
  also waits for the ops listed in its ``after`` (ids of ops of the same rank, any stream).
- ``send(peer, buffer, offset, length, tag)`` is *eager*: it completes when the bytes are
  handed to the transport, the receiver need not have posted its recv. The data sent is the
  region's content at the time the send starts (workers enforce this with tracked zero-copy
  sends: a region is never overwritten while a send of it is in flight).
- ``recv(peer, buffer, offset, length, tag, mode)`` completes when ``length`` bytes have
  arrived and been reduced into (``mode="reduce"``: elementwise sum) or copied to
  (``mode="copy"``) the region.
- Matching: messages from ``src`` to ``dst`` with the same ``tag`` are matched first in,
  first out; the k-th send from src to dst with tag t pairs with the k-th recv at dst from
  src with tag t, and their lengths must be equal.
- ``compute(seconds)`` occupies its stream for that long (forward/backward compute of a
  training iteration).

Offsets and lengths are in bytes and must be multiples of the buffer's item size.

This module holds the format (`Op`, `Buffer`, `Check`, `Schedule` with its JSON round trip and
validation) and `ScheduleBuilder`, which every schedule generator uses to write it: one
module, because the builder's only job is to emit that format and the two change together.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

SCHEDULE_FORMAT = "topolab.schedule/1"
OP_KINDS = ("send", "recv", "compute")
RECV_MODES = ("reduce", "copy")


@dataclass(slots=True)
class Op:
    """One op of one rank's program. ``id`` is unique within the rank.

    Slotted, with ``after`` a tuple (the empty one shared by most ops): an iteration at a few
    hundred servers holds millions of ops, so an op is kept to a few dozen bytes of fields."""

    id: int
    kind: str
    peer: int = -1
    buffer: str = ""
    offset: int = 0
    length: int = 0
    tag: int = 0
    mode: str = ""
    seconds: float = 0.0
    after: tuple[int, ...] = ()
    plane: int = 0  # send only: 0 = the destination route, p >= 1 = the pair's p-th allocated path

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "op": self.kind}
        if self.kind in ("send", "recv"):
            d.update(peer=self.peer, buffer=self.buffer, offset=self.offset, length=self.length, tag=self.tag)
            if self.kind == "send" and self.plane:
                d["plane"] = self.plane
            if self.kind == "recv":
                d["mode"] = self.mode
        else:
            d["seconds"] = self.seconds
        if self.after:
            d["after"] = list(self.after)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Op:
        return cls(
            id=int(d["id"]),
            kind=sys.intern(str(d["op"])),
            peer=int(d.get("peer", -1)),
            buffer=sys.intern(str(d.get("buffer", ""))),
            offset=int(d.get("offset", 0)),
            length=int(d.get("length", 0)),
            tag=int(d.get("tag", 0)),
            mode=sys.intern(str(d.get("mode", ""))),
            seconds=float(d.get("seconds", 0.0)),
            after=tuple(int(a) for a in d.get("after", ())),
            plane=int(d.get("plane", 0)),
        )


@dataclass
class Buffer:
    """A named region every rank allocates (``bytes`` long, of ``dtype``)."""

    name: str
    bytes: int
    dtype: str = "float32"

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize


@dataclass
class Check:
    """What a correct execution leaves in a buffer region (the verification contract).

    ``kind == "allreduce"``: for every group in ``groups``, each member's region
    ``[offset, offset+length)`` ends as the elementwise sum of the members' inputs.
    ``kind == "copy"``: rank ``dst``'s region ends equal to rank ``src``'s input region.
    """

    kind: str
    buffer: str
    offset: int
    length: int
    groups: list[list[int]] = field(default_factory=list)
    src: int = -1
    dst: int = -1

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "buffer": self.buffer, "offset": self.offset, "length": self.length}
        if self.kind == "allreduce":
            d["groups"] = [list(g) for g in self.groups]
        else:
            d.update(src=self.src, dst=self.dst)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Check:
        return cls(
            kind=d["kind"],
            buffer=d["buffer"],
            offset=int(d["offset"]),
            length=int(d["length"]),
            groups=[[int(m) for m in g] for g in d.get("groups", ())],
            src=int(d.get("src", -1)),
            dst=int(d.get("dst", -1)),
        )

    def ranks(self) -> set[int]:
        """Ranks whose buffer this check constrains."""
        if self.kind == "allreduce":
            return {m for g in self.groups for m in g}
        return {self.dst}


SEND, RECV, COMPUTE = 0, 1, 2  # kind codes: the index in OP_KINDS
MODES = ("", *RECV_MODES)  # mode codes: the index (0: not a recv)
_INT_COLUMNS = ("stream", "kind", "peer", "buffer", "offset", "length", "tag", "mode", "plane")


def _int_dtype(lo: int, hi: int) -> np.dtype[Any]:
    """The smallest signed integer type that holds ``lo`` .. ``hi``."""
    for dt in (np.int8, np.int16, np.int32):
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return np.dtype(dt)
    return np.dtype(np.int64)


def _compact(values: Any) -> np.ndarray | int:
    """An integer column in its smallest type, or a plain int when every value is the same."""
    a = np.asarray(values)
    if a.size == 0:
        return 0
    lo, hi = int(a.min()), int(a.max())
    if lo == hi:
        return lo
    return a.astype(_int_dtype(lo, hi), copy=False)


@dataclass(slots=True)
class _Chunk:
    """Consecutive ops of one rank (consecutive ids), each column an array or one value for
    all of them; ``seconds`` holds one entry per op that is neither a send nor a recv."""

    rows: int
    columns: dict[str, np.ndarray | int]
    seconds: np.ndarray
    after: list[tuple[int, tuple[int, ...]]]  # (row in the chunk, ids it waits for)


class StreamOps(Sequence[Op]):
    """The ops of one stream of a `Program`, in order, read as `Op` objects (made on access:
    changing one does not change the schedule)."""

    __slots__ = ("_program", "_rows")

    def __init__(self, program: Program, rows: np.ndarray):
        self._program, self._rows = program, rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, i: int) -> Op: ...

    @overload
    def __getitem__(self, i: slice) -> list[Op]: ...

    def __getitem__(self, i: int | slice) -> Op | list[Op]:
        if isinstance(i, slice):
            return self._program.ops(self._rows[i])
        return self._program.ops(self._rows[i : i + 1] if i != -1 else self._rows[-1:])[0]

    def __iter__(self) -> Iterator[Op]:
        return iter(self._program.ops(self._rows))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"StreamOps({list(self)!r})"

    @property
    def rows(self) -> np.ndarray:
        """The ops' rows in the program's arrays."""
        return self._rows


class Program(Mapping[str, StreamOps]):
    """One rank's program as a struct of arrays: one row per op, in the order the ops were
    added (ids ascending for a built schedule), the ops of a stream in stream order.

    Columns (numpy arrays of the smallest integer type that holds them; a column whose
    values are all equal is a zero-stride view of one value): ``stream`` (index in
    ``streams``), ``kind`` (index in ``kinds``, which begins with `OP_KINDS`: `SEND`,
    `RECV`, `COMPUTE`), ``peer``, ``buffer`` (index in ``buffers``), ``offset``, ``length``,
    ``tag``, ``mode`` (index in ``modes``, which begins with `MODES`), ``plane``; ``ids``
    the op ids (None: an op's id is its row); ``seconds`` one float per op that is neither a
    send nor a recv, in row order; ``after`` in CSR form over the rows that wait
    (``after_rows`` ascending, their ids ``after_ids[after_ptr[i]:after_ptr[i+1]]``).

    About 16 bytes per op (an `Op` object takes about 170): an iteration at 1024 servers has
    100 million ops. As a mapping it reads like ``{stream: [Op, ...]}``."""

    __slots__ = (
        "streams",
        "kinds",
        "modes",
        "buffers",
        "ids",
        "stream",
        "kind",
        "peer",
        "buffer",
        "offset",
        "length",
        "tag",
        "mode",
        "plane",
        "seconds",
        "after_rows",
        "after_ptr",
        "after_ids",
        "_order",
        "_bounds",
    )

    def __init__(
        self,
        streams: Sequence[str],
        columns: Mapping[str, np.ndarray],
        seconds: np.ndarray,
        after_rows: np.ndarray,
        after_ptr: np.ndarray,
        after_ids: np.ndarray,
        ids: np.ndarray | None = None,
        kinds: Sequence[str] = OP_KINDS,
        modes: Sequence[str] = MODES,
        buffers: Sequence[str] = (),
    ):
        self.streams = tuple(streams)
        self.kinds, self.modes, self.buffers = tuple(kinds), tuple(modes), tuple(buffers)
        self.stream, self.kind, self.peer = columns["stream"], columns["kind"], columns["peer"]
        self.buffer, self.offset, self.length = columns["buffer"], columns["offset"], columns["length"]
        self.tag, self.mode, self.plane = columns["tag"], columns["mode"], columns["plane"]
        self.seconds, self.ids = seconds, ids
        self.after_rows, self.after_ptr, self.after_ids = after_rows, after_ptr, after_ids
        self._order: np.ndarray | None = None
        self._bounds: np.ndarray | None = None

    # ---- construction ------------------------------------------------------------------
    @classmethod
    def from_chunks(
        cls,
        streams: Sequence[str],
        chunks: Sequence[_Chunk],
        kinds: Sequence[str] = OP_KINDS,
        modes: Sequence[str] = MODES,
        buffers: Sequence[str] = (),
        ids: np.ndarray | None = None,
        extra_after: Mapping[int, tuple[int, ...]] | None = None,
    ) -> Program:
        """Concatenate ``chunks`` (rows in order); ``extra_after``: row -> more ids it waits
        for (after its own)."""
        total = sum(c.rows for c in chunks)
        columns: dict[str, np.ndarray] = {}
        for name in _INT_COLUMNS:
            parts = [c.columns[name] for c in chunks if c.rows]
            lo = min((int(p.min()) if isinstance(p, np.ndarray) else p for p in parts), default=0)
            hi = max((int(p.max()) if isinstance(p, np.ndarray) else p for p in parts), default=0)
            dtype = _int_dtype(lo, hi)
            if lo == hi:
                columns[name] = np.broadcast_to(np.array(lo, dtype), (total,))
                continue
            col = np.empty(total, dtype)
            pos = 0
            for c in chunks:
                col[pos : pos + c.rows] = c.columns[name]
                pos += c.rows
            columns[name] = col
        seconds = np.concatenate([c.seconds for c in chunks]) if chunks else np.zeros(0)
        waits: dict[int, tuple[int, ...]] = {}
        pos = 0
        for c in chunks:
            for row, after in c.after:
                waits[pos + row] = after
            pos += c.rows
        for row, more in (extra_after or {}).items():
            waits[row] = waits.get(row, ()) + tuple(more)
        rows = sorted(r for r, a in waits.items() if a)
        ptr = np.zeros(len(rows) + 1, np.int64)
        ptr[1:] = np.cumsum([len(waits[r]) for r in rows])
        flat = [a for r in rows for a in waits[r]]
        after_ids = np.array(flat, _int_dtype(min(flat, default=0), max(flat, default=0)))
        return cls(streams, columns, seconds, np.array(rows, np.int64), ptr, after_ids, ids, kinds, modes, buffers)

    @classmethod
    def from_streams(cls, streams: Mapping[str, Iterable[Op]]) -> Program:
        """A program from ``{stream: [Op, ...]}`` (ids as given)."""
        kinds, modes, buffers = _Table(OP_KINDS), _Table(MODES), _Table(())
        chunks: list[_Chunk] = []
        ids: list[int] = []
        for s, stream_ops in enumerate(streams.values()):
            ops = list(stream_ops)  # read twice: rows, then ids
            rows = [_op_row(s, o, kinds, modes, buffers) for o in ops]
            ids.extend(o.id for o in ops)
            if rows:
                chunks.append(_rows_chunk(rows))
        id_array = np.array(ids, _int_dtype(min(ids, default=0), max(ids, default=0)))
        implicit = np.array_equal(id_array, np.arange(len(ids)))  # an op's id is its row
        return cls.from_chunks(
            list(streams), chunks, kinds.names, modes.names, buffers.names, ids=None if implicit else id_array
        )

    # ---- reading -----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.streams)

    def __iter__(self) -> Iterator[str]:
        return iter(self.streams)

    def __getitem__(self, name: str) -> StreamOps:
        try:
            s = self.streams.index(name)
        except ValueError:
            raise KeyError(name) from None
        return StreamOps(self, self.stream_rows(s))

    @property
    def op_count(self) -> int:
        return len(self.kind)

    def stream_order(self, keep: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """The rows stream by stream (each stream's in order) and where each stream begins
        in it (``len(streams) + 1`` bounds); kept for the next call unless ``keep`` is off
        (4 bytes per op)."""
        if self._order is None:
            if not keep:
                order, bounds = self.stream_order()
                self._order = self._bounds = None
                return order, bounds
            n = self.op_count
            index = np.int32 if n < 2**31 else np.int64
            if len(self.streams) <= 1:
                self._order = np.arange(n, dtype=index)
            else:
                self._order = np.argsort(self.stream, kind="stable").astype(index, copy=False)
            counts = (
                np.bincount(np.asarray(self.stream, np.int64), minlength=len(self.streams))
                if n
                else np.zeros(len(self.streams), np.int64)
            )
            self._bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        assert self._bounds is not None
        return self._order, self._bounds

    def stream_rows(self, s: int) -> np.ndarray:
        order, bounds = self.stream_order()
        return order[bounds[s] : bounds[s + 1]]

    def op_ids(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The ids of ``rows`` (all rows by default)."""
        if self.ids is None:
            return np.arange(self.op_count) if rows is None else np.asarray(rows)
        return self.ids if rows is None else self.ids[rows]

    def after_map(self) -> dict[int, tuple[int, ...]]:
        """Row -> the ids it waits for (rows that wait for nothing left out)."""
        ptr, ids = self.after_ptr.tolist(), self.after_ids.tolist()
        return {r: tuple(ids[ptr[i] : ptr[i + 1]]) for i, r in enumerate(self.after_rows.tolist())}

    def seconds_index(self) -> np.ndarray:
        """Per row, its entry in ``seconds`` (meaningful for rows neither send nor recv)."""
        kind = np.asarray(self.kind)
        return np.cumsum((kind != SEND) & (kind != RECV)) - 1

    def ops(self, rows: np.ndarray) -> list[Op]:
        """The ops of ``rows`` as `Op` objects."""
        rows = np.asarray(rows)
        if not len(rows):
            return []
        kinds, modes, buffers = self.kinds, self.modes, self.buffers
        timed = self.seconds_index()[rows].tolist()
        seconds = self.seconds.tolist()
        after = self.after_map() if len(self.after_rows) else {}
        cols = [
            np.asarray(c)[rows].tolist()
            for c in (self.kind, self.peer, self.buffer, self.offset, self.length, self.tag, self.mode, self.plane)
        ]
        out = []
        for i, r, k, p, b, o, n, t, m, pl, ti in zip(self.op_ids(rows).tolist(), rows.tolist(), *cols, timed):
            kind = kinds[k]
            out.append(
                Op(i, kind, p, buffers[b], o, n, t, modes[m], seconds[ti] if k > RECV else 0.0, after.get(r, ()), pl)
            )
        return out

    def to_dict(self) -> dict[str, list[dict[str, Any]]]:
        """``{stream: [op dict, ...]}`` as in the JSON (`Op.to_dict` of every op)."""
        return {name: [op.to_dict() for op in self[name]] for name in self.streams}

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays (zero-stride columns count nothing)."""
        arrays = [
            self.stream,
            self.kind,
            self.peer,
            self.buffer,
            self.offset,
            self.length,
            self.tag,
            self.mode,
            self.plane,
        ]
        arrays += [self.seconds, self.after_rows, self.after_ptr, self.after_ids]
        arrays += [a for a in (self.ids, self._order, self._bounds) if a is not None]
        return sum(a.nbytes if a.strides != (0,) else a.itemsize for a in arrays)


class _Table:
    """Names and their codes (first come, first numbered), starting with ``names``."""

    def __init__(self, names: Sequence[str]):
        self.names = list(names)
        self.codes = {n: i for i, n in enumerate(names)}

    def code(self, name: str) -> int:
        c = self.codes.get(name)
        if c is None:
            c = self.codes[name] = len(self.names)
            self.names.append(sys.intern(str(name)))
        return c


Row = tuple[int, int, int, int, int, int, int, int, int, float, tuple[int, ...]]


def _op_row(stream: int, op: Op, kinds: _Table, modes: _Table, buffers: _Table) -> Row:
    """``op`` of stream index ``stream`` as a row, its names coded in the tables."""
    return (
        stream,
        kinds.code(op.kind),
        op.peer,
        buffers.code(op.buffer),
        op.offset,
        op.length,
        op.tag,
        modes.code(op.mode),
        op.plane,
        op.seconds,
        op.after,
    )


def _rows_chunk(rows: Sequence[Row]) -> _Chunk:
    """A chunk of rows (stream, kind, peer, buffer, offset, length, tag, mode, plane, seconds,
    after), codes already given."""
    cols = list(zip(*rows))
    columns = {name: _compact(cols[i]) for i, name in enumerate(_INT_COLUMNS)}
    seconds = np.array([s for k, s in zip(cols[1], cols[9]) if k != SEND and k != RECV], np.float64)
    after = [(i, tuple(a)) for i, a in enumerate(cols[10]) if a]
    return _Chunk(len(rows), columns, seconds, after)


def _program_chunk(p: Program) -> _Chunk:
    """``p``'s ops as one chunk that shares its arrays."""
    columns: dict[str, np.ndarray | int] = {}
    for name in _INT_COLUMNS:
        col = getattr(p, name)
        columns[name] = int(col[0]) if col.strides == (0,) and len(col) else col
    return _Chunk(p.op_count, columns, p.seconds, list(p.after_map().items()))


@dataclass
class Schedule:
    """Per-rank programs plus the buffers, checks and metadata that go with them.

    ``programs[rank]`` is a `Program` (compact arrays; it reads like ``{stream: [Op, ...]}``);
    a list of such dicts of `Op` lists is accepted and converted."""

    ranks: int
    algorithm: str
    buffers: dict[str, Buffer]
    programs: list[Program]  # programs[rank][stream] = ops in order
    checks: list[Check] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.programs = [p if isinstance(p, Program) else Program.from_streams(p) for p in self.programs]

    # ---- derived metadata for the timing model ---------------------------------------
    def edge_bytes(self) -> list[dict[str, Any]]:
        """Bytes each stream sends over each logical edge (src -> dst), summed over ops.

        The timing model maps a logical edge to its routed path; a stream is a serial
        sequence, so per-stream figures let it see which transfers overlap."""
        acc: dict[tuple[str, int, int], int] = defaultdict(int)
        for rank, prog in enumerate(self.programs):
            send = np.asarray(prog.kind) == SEND
            if not send.any():
                continue
            key = np.asarray(prog.stream, np.int64)[send] * self.ranks + np.asarray(prog.peer, np.int64)[send]
            order = np.argsort(key, kind="stable")
            key = key[order]
            starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
            sums = np.add.reduceat(np.asarray(prog.length, np.int64)[send][order], starts)
            for k, nbytes in zip(key[starts].tolist(), sums.tolist()):
                acc[(prog.streams[k // self.ranks], rank, k % self.ranks)] += nbytes
        return [{"stream": s, "src": a, "dst": b, "bytes": n} for (s, a, b), n in sorted(acc.items())]

    def bytes_sent(self) -> list[int]:
        """Total bytes each rank sends (all streams)."""
        return [int(np.asarray(p.length, np.int64)[np.asarray(p.kind) == SEND].sum()) for p in self.programs]

    def op_count(self) -> int:
        return sum(p.op_count for p in self.programs)

    # ---- JSON --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": SCHEDULE_FORMAT,
            "algorithm": self.algorithm,
            "ranks": self.ranks,
            "buffers": [{"name": b.name, "bytes": b.bytes, "dtype": b.dtype} for b in self.buffers.values()],
            "checks": [c.to_dict() for c in self.checks],
            "programs": [prog.to_dict() for prog in self.programs],
            "edges": self.edge_bytes(),
            "params": dict(self.params),
        }

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Schedule:
        if d.get("format", SCHEDULE_FORMAT) != SCHEDULE_FORMAT:
            raise ValueError(f"schedule format {d.get('format')!r} is not {SCHEDULE_FORMAT!r}")
        buffers = {b["name"]: Buffer(b["name"], int(b["bytes"]), b.get("dtype", "float32")) for b in d["buffers"]}
        programs = [
            Program.from_streams({s: [Op.from_dict(o) for o in ops] for s, ops in prog.items()})
            for prog in d["programs"]
        ]
        return cls(
            ranks=int(d["ranks"]),
            algorithm=d.get("algorithm", ""),
            buffers=buffers,
            programs=programs,
            checks=[Check.from_dict(c) for c in d.get("checks", ())],
            params=dict(d.get("params", {})),
        )

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        return cls.from_dict(json.loads(text))

    # ---- validation ------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ValueError naming the first structural problem (not a deadlock check:
        `planner.collectives.simulate.simulate_schedule` does that by executing the schedule).

        Every rule is checked on the program's arrays at once; a program that breaks one is
        then walked op by op to name the first op at fault (`_walk`)."""
        if len(self.programs) != self.ranks:
            raise ValueError(f"{len(self.programs)} programs for {self.ranks} ranks")
        for rank, program in enumerate(self.programs):
            if not self._sound(rank, program):
                self._walk(rank, program)

    def _sound(self, rank: int, p: Program) -> bool:
        """Whether ``p`` breaks none of `validate`'s rules."""
        n = p.op_count
        if p.ids is not None and len(np.unique(p.ids)) != n:
            return False
        kind = np.asarray(p.kind)
        if n and int(kind.max()) > COMPUTE:
            return False
        if (p.seconds < 0).any():
            return False
        comm = kind != COMPUTE
        if comm.any():
            sizes = [self.buffers.get(name) for name in p.buffers]
            known = np.array([b is not None for b in sizes])
            itemsize = np.array([b.itemsize if b else 1 for b in sizes], np.int64)
            nbytes = np.array([b.bytes if b else 0 for b in sizes], np.int64)
            peer = np.asarray(p.peer, np.int64)[comm]
            buf = np.asarray(p.buffer, np.int64)[comm]
            offset = np.asarray(p.offset, np.int64)[comm]
            length = np.asarray(p.length, np.int64)[comm]
            plane = np.asarray(p.plane, np.int64)[comm]
            k = kind[comm]
            mode = np.asarray(p.mode)[comm]
            size = itemsize[buf]
            bad = (peer < 0) | (peer >= self.ranks) | (peer == rank) | ~known[buf]
            bad |= (offset % size != 0) | (length % size != 0) | (offset < 0) | (length <= 0)
            bad |= offset + length > nbytes[buf]
            bad |= (plane != 0) & ((plane < 0) | (k != SEND))
            recv_mode = np.array([m in RECV_MODES for m in p.modes])
            bad |= (k == RECV) & ~recv_mode[mode]
            if bad.any():
                return False
        if len(p.after_ids):
            ids = np.asarray(p.after_ids, np.int64)
            if p.ids is None:
                return bool(((ids >= 0) & (ids < n)).all())
            return bool(np.isin(ids, p.ids).all())
        return True

    def _walk(self, rank: int, program: Program) -> None:
        """Raise the ValueError naming ``program``'s first op at fault, op by op."""
        regions = {name: (buf.itemsize, buf.bytes) for name, buf in self.buffers.items()}
        ranks = self.ranks
        ids: set[int] = set()
        waits = False
        for stream, ops in program.items():
            for op in ops:
                seen = len(ids)
                ids.add(op.id)
                kind = op.kind
                if len(ids) == seen:
                    raise ValueError(f"rank {rank} stream {stream!r} op {op.id}: duplicate op id")
                waits = waits or bool(op.after)
                if kind == "compute":
                    if op.seconds < 0:
                        raise ValueError(f"rank {rank} stream {stream!r} op {op.id}: negative compute time")
                    continue
                if kind not in OP_KINDS:
                    raise ValueError(f"rank {rank} stream {stream!r} op {op.id}: unknown op {kind!r}")
                peer, offset, length = op.peer, op.offset, op.length
                region = regions.get(op.buffer)
                if (
                    not 0 <= peer < ranks
                    or peer == rank
                    or region is None
                    or offset % region[0]
                    or length % region[0]
                    or offset < 0
                    or length <= 0
                    or offset + length > region[1]
                    or (op.plane and (op.plane < 0 or kind != "send"))
                    or (kind == "recv" and op.mode not in RECV_MODES)
                ):
                    raise ValueError(self._op_problem(rank, stream, op))
        if waits:
            for ops in program.values():
                for op in ops:
                    missing = [a for a in op.after if a not in ids]
                    if missing:
                        raise ValueError(f"rank {rank} op {op.id}: waits on unknown ops {missing}")

    def _op_problem(self, rank: int, stream: str, op: Op) -> str:
        """What is wrong with a send or recv `validate` rejected (the first rule it breaks)."""
        where = f"rank {rank} stream {stream!r} op {op.id}"
        if not 0 <= op.peer < self.ranks or op.peer == rank:
            return f"{where}: bad peer {op.peer}"
        buf = self.buffers.get(op.buffer)
        if buf is None:
            return f"{where}: unknown buffer {op.buffer!r}"
        if op.offset % buf.itemsize or op.length % buf.itemsize:
            return f"{where}: offset/length not aligned to {buf.dtype}"
        if op.offset < 0 or op.length <= 0 or op.offset + op.length > buf.bytes:
            return f"{where}: region [{op.offset}, +{op.length}) outside buffer {buf.name!r} of {buf.bytes} bytes"
        if op.plane < 0 or (op.plane and op.kind != "send"):
            return f"{where}: plane {op.plane} (only sends name a plane >= 0)"
        return f"{where}: recv mode {op.mode!r} not in {RECV_MODES}"


class ScheduleBuilder:
    """Accumulates ops rank by rank; generators compose into one builder.

    Generators take a builder plus the region to work on, so the end-to-end iteration can
    put several bucketed AllReduces, model-parallel transfers and compute into one schedule.
    Ops added one at a time (`send`, `recv`, `compute`) wait as rows until a rank has
    `FLUSH_ROWS` of them or a run of ops comes as arrays (`extend_columns`, the ring passes);
    both become compact chunks that `build` joins into each rank's `Program`.
    """

    FLUSH_ROWS = 4096

    def __init__(self, ranks: int, algorithm: str = "") -> None:
        if ranks < 1:
            raise ValueError(f"ranks must be >= 1, got {ranks}")
        self.ranks = ranks
        self.algorithm = algorithm
        self.buffers: dict[str, Buffer] = {}
        self.checks: list[Check] = []
        self.params: dict[str, Any] = {}
        self._next_id = [0] * ranks
        self._next_tag = 0
        self._streams: list[dict[str, int]] = [{} for _ in range(ranks)]
        self._rows: list[list[Row]] = [[] for _ in range(ranks)]
        self._chunks: list[list[_Chunk]] = [[] for _ in range(ranks)]
        self._extra_after: list[dict[int, tuple[int, ...]]] = [{} for _ in range(ranks)]
        self._kinds, self._modes, self._buffer_names = _Table(OP_KINDS), _Table(MODES), _Table(())

    def buffer(self, name: str, nbytes: int, dtype: str = "float32") -> Buffer:
        """Declare (or grow) a buffer every rank allocates."""
        buf = self.buffers.get(name)
        if buf is None:
            buf = self.buffers[name] = Buffer(name, int(nbytes), dtype)
        elif buf.dtype != dtype:
            raise ValueError(f"buffer {name!r} is {buf.dtype}, not {dtype}")
        else:
            buf.bytes = max(buf.bytes, int(nbytes))
        return buf

    def new_tag(self) -> int:
        """A tag no other channel of this schedule uses."""
        self._next_tag += 1
        return self._next_tag

    def _stream(self, rank: int, stream: str) -> int:
        streams = self._streams[rank]
        s = streams.get(stream)
        if s is None:
            s = streams[stream] = len(streams)
        return s

    def _flush(self, rank: int) -> None:
        rows = self._rows[rank]
        if rows:
            self._chunks[rank].append(_rows_chunk(rows))
            self._rows[rank] = []

    def _add(self, rank: int, row: Row) -> int:
        op_id = self._next_id[rank]
        self._next_id[rank] += 1
        rows = self._rows[rank]
        rows.append(row)
        if len(rows) >= self.FLUSH_ROWS:
            self._flush(rank)
        return op_id

    def extend(self, rank: int, stream: str, ops: list[Op]) -> int:
        """Append ``ops`` to ``stream`` of ``rank`` in order, numbering them (their ``id`` is
        overwritten) after the rank's ops so far; returns the first one's id (the others
        follow it by one)."""
        first = self._next_id[rank]
        s = self._stream(rank, stream)
        kinds, modes, names = self._kinds, self._modes, self._buffer_names
        for i, op in enumerate(ops, first):
            op.id = i
            self._add(rank, _op_row(s, op, kinds, modes, names))
        return first

    def extend_columns(
        self,
        rank: int,
        stream: str,
        kind: np.ndarray,
        peer: np.ndarray | int,
        buffer: str,
        offset: np.ndarray,
        length: np.ndarray,
        tag: int,
        mode: np.ndarray | int,
        after: Iterable[int] = (),
    ) -> int:
        """Append a run of sends and recvs given as arrays (``kind`` and ``mode`` as codes:
        `SEND` / `RECV`, the index in `MODES`) to ``stream`` of ``rank``; the first waits for
        ``after``. Returns the first one's id (the others follow it by one): what generators
        that write many ops use (a call per op costs more than the op)."""
        rows = len(kind)
        first = self._next_id[rank]
        if not rows:
            self._stream(rank, stream)
            return first
        self._flush(rank)
        columns = {
            "stream": self._stream(rank, stream),
            "kind": _compact(kind),
            "peer": _compact(peer),
            "buffer": self._buffer_names.code(buffer),
            "offset": _compact(offset),
            "length": _compact(length),
            "tag": int(tag),
            "mode": _compact(mode),
            "plane": 0,
        }
        deps = tuple(after)
        self._chunks[rank].append(_Chunk(rows, columns, np.zeros(0), [(0, deps)] if deps else []))
        self._next_id[rank] = first + rows
        return first

    def add_after(self, rank: int, op_id: int, after: Iterable[int]) -> None:
        """Make op ``op_id`` of ``rank`` (already added) also wait for ``after``."""
        extra = self._extra_after[rank]
        extra[op_id] = extra.get(op_id, ()) + tuple(after)

    def send(
        self,
        rank: int,
        stream: str,
        peer: int,
        buffer: str,
        offset: int,
        length: int,
        tag: int,
        after: Iterable[int] = (),
        plane: int = 0,
    ) -> int:
        s, b = self._stream(rank, stream), self._buffer_names.code(buffer)
        return self._add(rank, (s, SEND, peer, b, offset, length, tag, 0, plane, 0.0, tuple(after)))

    def recv(
        self,
        rank: int,
        stream: str,
        peer: int,
        buffer: str,
        offset: int,
        length: int,
        tag: int,
        mode: str = "reduce",
        after: Iterable[int] = (),
    ) -> int:
        s, b, m = self._stream(rank, stream), self._buffer_names.code(buffer), self._modes.code(mode)
        return self._add(rank, (s, RECV, peer, b, offset, length, tag, m, 0, 0.0, tuple(after)))

    def compute(self, rank: int, stream: str, seconds: float, after: Iterable[int] = ()) -> int:
        s, b = self._stream(rank, stream), self._buffer_names.code("")
        return self._add(rank, (s, COMPUTE, -1, b, 0, 0, 0, 0, 0, float(seconds), tuple(after)))

    def check(self, check: Check) -> None:
        self.checks.append(check)

    def build(self) -> Schedule:
        """The schedule, validated. The builder's ops move into it (rank by rank, so the
        memory of the ops is held about once): build once."""
        programs = []
        for rank in range(self.ranks):
            self._flush(rank)
            programs.append(
                Program.from_chunks(
                    list(self._streams[rank]),
                    self._chunks[rank],
                    self._kinds.names,
                    self._modes.names,
                    self._buffer_names.names,
                    extra_after=self._extra_after[rank],
                )
            )
            self._chunks[rank] = [_program_chunk(programs[-1])]  # the same arrays: no copy
            self._extra_after[rank] = {}
        sched = Schedule(self.ranks, self.algorithm, dict(self.buffers), programs, list(self.checks), dict(self.params))
        sched.validate()
        return sched


def split_region(offset: int, length: int, parts: int, itemsize: int = 4) -> list[tuple[int, int]]:
    """Cut ``[offset, offset+length)`` into ``parts`` consecutive item-aligned pieces whose
    sizes differ by at most one item (some may be empty when length is small)."""
    if parts < 1:
        raise ValueError("parts must be >= 1")
    items = length // itemsize
    base, extra = divmod(items, parts)
    out = []
    pos = offset
    for i in range(parts):
        n = (base + (1 if i < extra else 0)) * itemsize
        out.append((pos, n))
        pos += n
    return out
