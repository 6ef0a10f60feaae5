"""The records of the schedule format: an op (`Op`), a buffer every rank allocates
(`Buffer`), what a correct execution leaves in a buffer (`Check`), and the codes a
`program.Program` stores an op's kind and a recv's mode as (`SEND`, `RECV`, `COMPUTE`: the
index in `OP_KINDS`; `MODES`: the index, 0 for no recv). An op and a check read and write
their JSON objects (`to_dict`, `from_dict`); docs/schedules.md describes them for users of
the JSON.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

OP_KINDS = ("send", "recv", "compute")
RECV_MODES = ("reduce", "copy")
SEND, RECV, COMPUTE = 0, 1, 2  # kind codes: the index in OP_KINDS
MODES = ("", *RECV_MODES)  # mode codes: the index (0: not a recv)


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
