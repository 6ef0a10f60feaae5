"""`ScheduleBuilder`, which every schedule generator writes with (rank by rank, op by op or a
run of ops as arrays), and `split_region`, which cuts a buffer region into item-aligned
parts for them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from .document import Schedule
from .program import Program, Row, _Chunk, _compact, _op_row, _program_chunk, _rows_chunk, _Table
from .records import COMPUTE, MODES, OP_KINDS, RECV, SEND, Buffer, Check, Op


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
