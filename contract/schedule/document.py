"""A whole schedule (`Schedule`): the ranks' programs with the buffers they allocate, the
checks a correct execution meets and the generator's parameters; its JSON document
(``{"format": SCHEDULE_FORMAT, ...}``, docs/schedules.md) both ways, the bytes it sends per
logical edge, and its validation (`Schedule.validate`: every rule checked on the programs'
arrays at once, the first op at fault named when one is broken).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .program import Program
from .records import COMPUTE, OP_KINDS, RECV, RECV_MODES, SEND, Buffer, Check, Op

SCHEDULE_FORMAT = "topolab.schedule/1"


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

    def send_lengths(self) -> np.ndarray:
        """The length of every message the ranks send, rank after rank (int64)."""
        parts = [np.asarray(p.length, np.int64)[np.asarray(p.kind) == SEND] for p in self.programs]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def send_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """The sender and the receiver of every message, in `send_lengths`' order (int64)."""
        sources, peers = [], []
        for rank, p in enumerate(self.programs):
            sends = np.asarray(p.kind) == SEND
            sources.append(np.full(int(sends.sum()), rank, np.int64))
            peers.append(np.broadcast_to(np.asarray(p.peer, np.int64), sends.shape)[sends])
        if not sources:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(sources), np.concatenate(peers)

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
