"""One rank's program as a struct of arrays: `Program`, a row per op and a column per field
(each of the smallest integer type that holds it), which reads like ``{stream: [Op, ...]}``
(`StreamOps`). A program is joined from chunks of consecutive ops (`_Chunk`,
`Program.from_chunks`), each made of rows whose names (kind, mode, buffer) are numbered in
tables (`_Table`, `_op_row`, `_rows_chunk`); `builder.ScheduleBuilder` writes its ops so too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from .records import MODES, OP_KINDS, RECV, SEND, Op

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
