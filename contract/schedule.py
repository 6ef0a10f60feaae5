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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

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


@dataclass
class Schedule:
    """Per-rank programs plus the buffers, checks and metadata that go with them."""

    ranks: int
    algorithm: str
    buffers: dict[str, Buffer]
    programs: list[dict[str, list[Op]]]  # programs[rank][stream] = ops in order
    checks: list[Check] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)

    # ---- derived metadata for the timing model ---------------------------------------
    def edge_bytes(self) -> list[dict[str, Any]]:
        """Bytes each stream sends over each logical edge (src -> dst), summed over ops.

        The timing model maps a logical edge to its routed path; a stream is a serial
        sequence, so per-stream figures let it see which transfers overlap."""
        acc: dict[tuple[str, int, int], int] = defaultdict(int)
        for rank, program in enumerate(self.programs):
            for stream, ops in program.items():
                per_peer: dict[int, int] = defaultdict(int)
                for op in ops:
                    if op.kind == "send":
                        per_peer[op.peer] += op.length
                for peer, nbytes in per_peer.items():
                    acc[(stream, rank, peer)] += nbytes
        return [{"stream": s, "src": a, "dst": b, "bytes": n} for (s, a, b), n in sorted(acc.items())]

    def bytes_sent(self) -> list[int]:
        """Total bytes each rank sends (all streams)."""
        return [sum(op.length for ops in prog.values() for op in ops if op.kind == "send") for prog in self.programs]

    def op_count(self) -> int:
        return sum(len(ops) for prog in self.programs for ops in prog.values())

    # ---- JSON --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": SCHEDULE_FORMAT,
            "algorithm": self.algorithm,
            "ranks": self.ranks,
            "buffers": [{"name": b.name, "bytes": b.bytes, "dtype": b.dtype} for b in self.buffers.values()],
            "checks": [c.to_dict() for c in self.checks],
            "programs": [{s: [op.to_dict() for op in ops] for s, ops in prog.items()} for prog in self.programs],
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
        programs = [{s: [Op.from_dict(o) for o in ops] for s, ops in prog.items()} for prog in d["programs"]]
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

        One pass over the ops with the buffers' sizes looked up once: it runs on every
        schedule built, millions of ops for an iteration at a few hundred servers."""
        if len(self.programs) != self.ranks:
            raise ValueError(f"{len(self.programs)} programs for {self.ranks} ranks")
        regions = {name: (buf.itemsize, buf.bytes) for name, buf in self.buffers.items()}
        ranks = self.ranks
        for rank, program in enumerate(self.programs):
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
    """

    def __init__(self, ranks: int, algorithm: str = "") -> None:
        if ranks < 1:
            raise ValueError(f"ranks must be >= 1, got {ranks}")
        self.ranks = ranks
        self.algorithm = algorithm
        self.buffers: dict[str, Buffer] = {}
        self.programs: list[dict[str, list[Op]]] = [dict() for _ in range(ranks)]
        self.checks: list[Check] = []
        self.params: dict[str, Any] = {}
        self._next_id = [0] * ranks
        self._next_tag = 0

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

    def _add(self, rank: int, stream: str, op: Op) -> int:
        op.id = self._next_id[rank]
        self._next_id[rank] += 1
        program = self.programs[rank]
        ops = program.get(stream)
        if ops is None:
            ops = program[stream] = []
        ops.append(op)
        return op.id

    def extend(self, rank: int, stream: str, ops: list[Op]) -> int:
        """Append ``ops`` to ``stream`` of ``rank`` in order, numbering them (their ``id`` is
        overwritten) after the rank's ops so far; returns the first one's id (the others
        follow it by one). For generators that write many ops at once: a call per op costs
        more than the op."""
        first = self._next_id[rank]
        for i, op in enumerate(ops, first):
            op.id = i
        self._next_id[rank] = first + len(ops)
        program = self.programs[rank]
        if stream in program:
            program[stream].extend(ops)
        else:
            program[stream] = list(ops)
        return first

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
        return self._add(rank, stream, Op(0, "send", peer, buffer, offset, length, tag, "", 0.0, tuple(after), plane))

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
        return self._add(rank, stream, Op(0, "recv", peer, buffer, offset, length, tag, mode, 0.0, tuple(after)))

    def compute(self, rank: int, stream: str, seconds: float, after: Iterable[int] = ()) -> int:
        return self._add(rank, stream, Op(0, "compute", seconds=float(seconds), after=tuple(after)))

    def check(self, check: Check) -> None:
        self.checks.append(check)

    def build(self) -> Schedule:
        sched = Schedule(
            self.ranks,
            self.algorithm,
            dict(self.buffers),
            [dict(p) for p in self.programs],
            list(self.checks),
            dict(self.params),
        )
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
