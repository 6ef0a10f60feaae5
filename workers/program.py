"""One rank's program, parsed once from the worker spec into flat op records.

The schedule format (contract/schedule/, docs/schedules.md) gives each rank named streams
of ops with integer ids; ``after`` names op ids. Here every op gets a dense ``index`` (its
position in `Program.ops`) and ``after`` becomes indices; `Program.packed` lays it out as
the arrays the compiled loop runs (`workers.engine`).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .engine import COMPUTE, RECV, SEND, PackedProgram

KINDS = {"send": SEND, "recv": RECV, "compute": COMPUTE}


@dataclass(slots=True)
class Op:
    index: int
    id: int
    kind: int
    stream: int
    peer: int = -1
    buffer: str = ""
    offset: int = 0
    length: int = 0
    tag: int = 0
    reduce: bool = False
    seconds: float = 0.0
    plane: int = 0  # send only: 0 = the destination route, p >= 1 = from the plane-p source address
    after: tuple[int, ...] = ()


def op_record(d: dict[str, Any]) -> Op:
    """One op of the schedule format (docs/schedules.md) as the executor keeps it, before a
    `Program` places it (``index`` and ``stream`` -1, ``after`` still op ids). An op read this
    way as the spec is parsed (`workers.spec.load_spec`) replaces its JSON object at once: a
    worker of a large schedule holds 100,000 ops and more, and the object form takes about
    three times the record's memory (``python -m tests.workers.test_op_memory`` measures both)."""
    if d.get("op") not in KINDS:
        raise ValueError(f"op {d.get('id')!r}: unknown op {d.get('op')!r}")
    try:
        return Op(
            index=-1,
            id=int(d["id"]),
            kind=KINDS[d["op"]],
            stream=-1,
            peer=int(d.get("peer", -1)),
            buffer=sys.intern(str(d.get("buffer", ""))),
            offset=int(d.get("offset", 0)),
            length=int(d.get("length", 0)),
            tag=int(d.get("tag", 0)),
            reduce=d.get("mode") == "reduce",
            seconds=float(d.get("seconds", 0.0)),
            plane=int(d.get("plane", 0)),
            after=tuple(int(a) for a in d.get("after", ())),
        )
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"op {d.get('id')!r}: bad value ({exc})") from None


class Program:
    """``streams[i]``: the ops of stream ``stream_names[i]`` in order; ``ops``: all, by index;
    ``ops_per_peer``: how many send/recv ops each peer takes part in; ``wakes``: see below.

    ``streams`` holds each op as its JSON object or as the `Op` `op_record` made of it while
    the spec was read (`workers.spec.load_spec`); the program takes such records over (sets
    their ``index``, ``stream`` and ``after``) instead of copying them."""

    def __init__(self, streams: Mapping[str, Sequence[dict[str, Any] | Op]]) -> None:
        self.stream_names = list(streams)
        self.streams: list[list[Op]] = []
        index_of: dict[int, int] = {}
        ops: list[Op] = []
        for si, name in enumerate(self.stream_names):
            stream_ops = []
            for d in streams[name]:
                op = d if isinstance(d, Op) else op_record(d)
                if op.index != -1:
                    raise ValueError(f"op {op.id} of stream {name!r} already belongs to a program")
                op.index = len(ops)
                op.stream = si
                index_of[op.id] = op.index
                ops.append(op)
                stream_ops.append(op)
            self.streams.append(stream_ops)
        for op in ops:
            op.after = tuple(index_of[a] for a in op.after)
        self.ops = ops
        waiting: defaultdict[int, set[int]] = defaultdict(set)  # only the ops something waits on
        for op in ops:
            for a in op.after:
                waiting[a].add(op.stream)
        alone = [(si,) for si in range(len(self.streams))]  # shared by the ops nothing waits on
        self.wakes: list[tuple[int, ...]] = [
            (op.stream, *sorted(others)) if (others := waiting.get(op.index, set()) - {op.stream}) else alone[op.stream]
            for op in ops
        ]
        """``wakes[i]``: the streams whose head op ``i`` completing can make startable: its
        own, and every stream with an op waiting on it (``after``)."""
        self.ops_per_peer: dict[int, int] = defaultdict(int)
        self.sends_per_peer: dict[int, int] = defaultdict(int)
        """How many of ``ops_per_peer`` are sends (a peer gone with none left may still deliver)."""
        for op in ops:
            if op.kind != COMPUTE:
                self.ops_per_peer[op.peer] += 1
            if op.kind == SEND:
                self.sends_per_peer[op.peer] += 1
        self._packed: dict[tuple, PackedProgram] = {}

    def packed(self, buffer_index: dict[str, int], push_index: dict[tuple[int, int], int]) -> PackedProgram:
        """This program as the compiled loop's arrays (`workers.engine.PackedProgram`), made
        once per mapping of buffer names and (peer, plane) sockets to indices."""
        key = (tuple(buffer_index.items()), tuple(push_index.items()))
        if key not in self._packed:
            self._packed[key] = PackedProgram(self, buffer_index, push_index)
        return self._packed[key]
