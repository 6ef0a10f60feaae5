"""The worker spec: the only input a worker process reads (plain JSON, no planner objects).

Format ``topolab.worker/1`` (documented in docs/schedules.md):

    rank, ranks            this worker's rank and the number of ranks
    listen                 "host:port" of this worker's data-plane socket (port 0: any free
                           port; the real one is announced to the coordinator)
    peers                  {rank: "host:port"} of the ranks this worker exchanges data with
                           (ports may be 0: the coordinator's ``connect`` message carries the
                           bound addresses)
    control                ipc:// endpoint of the coordinator
    buffers, checks        as in the schedule (topolab.schedule/1)
    streams                this rank's program: {stream: [op, ...]}
    chunk_bytes            wire chunk size for pipelined sends: MIN_CHUNK .. MAX_CHUNK
                           (4 KiB .. 64 MiB) is accepted; 64 KiB .. 4 MiB reach the TCP
                           floor (docs/emulation.md, pyzmq); a send of L bytes goes as
                           max(1, L // chunk_bytes) nearly equal chunks
    timeout_s              a peer that sends nothing for this long while data from it is
                           awaited (or accepts nothing while a send to it is pending) fails
                           the iteration with an error naming the peer
    idle_timeout_s         the worker exits if the coordinator is silent for this long
    timestamps             "none" | "streams" | "ops": timing detail reported per iteration
                           (one iteration's ``start`` may ask for another: `TIMESTAMPS`)
    log                    optional path; the worker appends its stderr there
    plane_sources          optional {plane: "IP"}: this host's source address for plane p >= 1;
                           a send with ``plane`` p goes over its own PUSH connection to the
                           peer, connected from that address (docs/schedules.md)
    largest_send           optional: the longest send (bytes) of any rank of the schedule; the
                           data socket refuses a frame longer than the largest chunk such a
                           send goes out as (`WorkerSpec.largest_chunk`); absent or null: the
                           protocol's bound alone, under twice ``chunk_bytes``
"""

from __future__ import annotations

import ipaddress
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from contract.errors import UsageError
from contract.schedule import OP_KINDS

from .program import Op, op_record

WORKER_FORMAT = "topolab.worker/1"
MIN_CHUNK, MAX_CHUNK = 4 << 10, 64 << 20
DEFAULT_CHUNK = 1 << 20  # 1 MiB: inside the 64 KiB .. 4 MiB range that reaches the TCP floor
DEFAULT_TIMEOUT_S = 10.0  # longer than any legitimate wait for a peer in the loopback tests
DEFAULT_IDLE_TIMEOUT_S = 300.0  # a worker outlives a silent coordinator by at most 5 minutes
TIMESTAMPS = ("none", "streams", "ops")  # timing detail a result reports: nothing, per stream, per op


class SpecError(UsageError):
    """A worker spec is malformed; the message names the field (a ValueError, exit 2)."""


class OpFields(NamedTuple):
    """What `WorkerSpec.validate` checks of an op, whichever form it is held in."""

    id: Any
    kind: Any  # "send" | "recv" | "compute" when valid
    peer: int
    buffer: Any
    plane: int


@dataclass
class WorkerSpec:
    rank: int
    ranks: int
    listen: str
    peers: dict[int, str]
    control: str
    buffers: list[dict[str, Any]]
    checks: list[dict[str, Any]]
    streams: dict[str, list[dict[str, Any]]] | dict[str, list[Op]]  # a worker's: records (`load_spec`)
    chunk_bytes: int = DEFAULT_CHUNK
    timeout_s: float = DEFAULT_TIMEOUT_S
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    timestamps: str = "streams"
    log: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    plane_sources: dict[int, str] = field(default_factory=dict)
    largest_send: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": WORKER_FORMAT,
            "rank": self.rank,
            "ranks": self.ranks,
            "listen": self.listen,
            "peers": {str(k): v for k, v in self.peers.items()},
            "control": self.control,
            "buffers": self.buffers,
            "checks": self.checks,
            "streams": self.streams,
            "chunk_bytes": self.chunk_bytes,
            "timeout_s": self.timeout_s,
            "idle_timeout_s": self.idle_timeout_s,
            "timestamps": self.timestamps,
            "log": self.log,
            "extra": self.extra,
            "plane_sources": {str(k): v for k, v in self.plane_sources.items()},
            "largest_send": self.largest_send,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WorkerSpec:
        def need(key: str) -> Any:
            if key not in d:
                raise SpecError(f"worker spec: missing field {key!r}")
            return d[key]

        if d.get("format", WORKER_FORMAT) != WORKER_FORMAT:
            raise SpecError(f"worker spec: format {d.get('format')!r} is not {WORKER_FORMAT!r}")
        try:
            spec = cls(
                rank=int(need("rank")),
                ranks=int(need("ranks")),
                listen=str(need("listen")),
                peers={int(k): str(v) for k, v in need("peers").items()},
                control=str(need("control")),
                buffers=list(need("buffers")),
                checks=list(d.get("checks", [])),
                streams=dict(need("streams")),
                chunk_bytes=int(d.get("chunk_bytes", DEFAULT_CHUNK)),
                timeout_s=float(d.get("timeout_s", DEFAULT_TIMEOUT_S)),
                idle_timeout_s=float(d.get("idle_timeout_s", DEFAULT_IDLE_TIMEOUT_S)),
                timestamps=str(d.get("timestamps", "streams")),
                log=str(d.get("log", "")),
                extra=dict(d.get("extra", {})),
                plane_sources={int(k): str(v) for k, v in d.get("plane_sources", {}).items()},
                largest_send=None if d.get("largest_send") is None else int(d["largest_send"]),
            )
        except (TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, SpecError):
                raise
            raise SpecError(f"worker spec: bad value ({exc})") from None
        spec.validate()
        return spec

    def ops(self) -> Iterator[tuple[str, OpFields]]:
        """(stream, what the checks read of the op) for every op, read as a JSON object (the
        coordinator's spec) or as the record it became while the spec was read (a worker's,
        `load_spec`)."""
        for stream, ops in self.streams.items():
            for op in ops:
                if isinstance(op, Op):
                    yield stream, OpFields(op.id, OP_KINDS[op.kind], op.peer, op.buffer, op.plane)
                else:
                    peer = op.get("peer")
                    yield (
                        stream,
                        OpFields(
                            op.get("id"),
                            op.get("op"),
                            -1 if peer is None else int(peer),
                            op.get("buffer"),
                            int(op.get("plane", 0)),
                        ),
                    )

    def send_planes(self) -> set[tuple[int, int]]:
        """Every (peer, plane >= 1) this rank sends on: each gets its own PUSH connection."""
        return {(op.peer, op.plane) for _, op in self.ops() if op.kind == "send" and op.plane}

    def largest_chunk(self) -> int:
        """The longest data frame a peer of this rank may send it: a send of L bytes goes as
        chunks of at most L bytes, each under twice ``chunk_bytes`` (`workers.engine.send_pieces`)."""
        protocol_bound = 2 * self.chunk_bytes
        return protocol_bound if self.largest_send is None else min(self.largest_send, protocol_bound)

    def validate(self) -> None:
        if not 0 <= self.rank < self.ranks:
            raise SpecError(f"worker spec: rank {self.rank} outside 0..{self.ranks - 1}")
        split_address(self.listen, "listen")
        for r, addr in self.peers.items():
            if not 0 <= r < self.ranks or r == self.rank:
                raise SpecError(f"worker spec: bad peer rank {r}")
            split_address(addr, f"peers[{r}]")
        if not self.control.startswith(("ipc://", "tcp://")):
            raise SpecError(f"worker spec: control {self.control!r} is not an ipc:// endpoint")
        if not MIN_CHUNK <= self.chunk_bytes <= MAX_CHUNK:
            raise SpecError(f"worker spec: chunk_bytes {self.chunk_bytes} outside {MIN_CHUNK}..{MAX_CHUNK}")
        if self.largest_send is not None and self.largest_send < 1:
            raise SpecError(f"worker spec: largest_send must be >= 1 byte, got {self.largest_send}")
        if self.timeout_s <= 0:
            raise SpecError(f"worker spec: timeout_s must be > 0, got {self.timeout_s}")
        if self.timestamps not in TIMESTAMPS:
            raise SpecError(f"worker spec: timestamps {self.timestamps!r} not in none|streams|ops")
        for plane, source in self.plane_sources.items():
            if plane < 1:
                raise SpecError(f"worker spec: rank {self.rank}: plane_sources has plane {plane} (planes are >= 1)")
            try:
                ipaddress.ip_address(source)
            except ValueError:
                raise SpecError(
                    f"worker spec: rank {self.rank}: plane_sources[{plane}] {source!r} is not an IP address"
                ) from None
        names = set()
        for b in self.buffers:
            names.add(b["name"])
            if int(b["bytes"]) < 0:
                raise SpecError(f"worker spec: buffer {b['name']!r} has negative size")
        for stream, op in self.ops():
            if op.plane and op.kind != "send":
                raise SpecError(f"worker spec: stream {stream!r} op {op.id}: only a send names a plane")
            if op.plane and op.plane not in self.plane_sources:
                raise SpecError(
                    f"worker spec: rank {self.rank} sends on plane {op.plane} (stream {stream!r} op "
                    f"{op.id}) but plane_sources has no source address for plane {op.plane}"
                )
            if op.kind in ("send", "recv"):
                if op.buffer not in names:
                    raise SpecError(f"worker spec: stream {stream!r} op {op.id} uses unknown buffer {op.buffer!r}")
                if op.peer not in self.peers:
                    raise SpecError(
                        f"worker spec: stream {stream!r} op {op.id} talks to rank {op.peer}, which is not in peers"
                    )
            elif op.kind != "compute":
                raise SpecError(f"worker spec: stream {stream!r} has unknown op {op.kind!r}")


def split_address(addr: str, what: str = "address") -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise SpecError(f"worker spec: {what} {addr!r} is not host:port")
    return host, int(port)


def load_spec(path: str) -> WorkerSpec:
    """The spec in file ``path``, or on standard input for ``-`` (a worker on another machine
    gets its spec that way: that machine does not share the coordinator's files)."""
    try:
        if path == "-":
            data = json.load(sys.stdin, object_hook=_op_as_record)
        else:
            with open(path) as f:
                data = json.load(f, object_hook=_op_as_record)
    except json.JSONDecodeError as exc:
        raise SpecError(f"worker spec: {'stdin' if path == '-' else path} is not JSON ({exc})") from None
    except ValueError as exc:  # an op the parser's hook could not read (`op_record`)
        raise SpecError(f"worker spec: {exc}") from None
    except OSError as exc:
        raise SpecError(f"worker spec: cannot read {path}: {exc.strerror}") from None
    return WorkerSpec.from_dict(data)


def _op_as_record(obj: dict[str, Any]) -> Any:
    """The JSON parser's hook: an op object (it has ``op`` and ``id``; no other object of the
    spec has both) becomes its `workers.program.Op` record as soon as it is read, so a worker
    never holds its program as JSON objects (three times the memory: `workers.program.op_record`)."""
    return op_record(obj) if "op" in obj and "id" in obj else obj


def specs_for_schedule(
    schedule: dict[str, Any],
    hosts: list[str],
    control: str,
    *,
    port: int = 0,
    chunk_bytes: int = DEFAULT_CHUNK,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    timestamps: str = "streams",
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
    log_dir: str = "",
    plane_sources: Sequence[dict[int, str]] | None = None,
) -> list[WorkerSpec]:
    """One spec per rank from a schedule dict (``Schedule.to_dict()``) and each rank's host
    address (e.g. 127.0.0.1 for loopback, the emulated host's IPv4 in the emulator);
    ``plane_sources[rank]``: that rank's {plane: source address} (default: none)."""
    n = int(schedule["ranks"])
    largest = largest_send(schedule)
    if len(hosts) != n:
        raise SpecError(f"{len(hosts)} host addresses for {n} ranks")
    if plane_sources is not None and len(plane_sources) != n:
        raise SpecError(f"{len(plane_sources)} plane_sources entries for {n} ranks")
    specs = []
    for rank in range(n):
        streams = schedule["programs"][rank]
        peers = sorted({int(op["peer"]) for ops in streams.values() for op in ops if op["op"] in ("send", "recv")})
        specs.append(
            WorkerSpec(
                rank=rank,
                ranks=n,
                listen=f"{hosts[rank]}:{port}",
                peers={p: f"{hosts[p]}:{port}" for p in peers},
                control=control,
                buffers=schedule["buffers"],
                checks=schedule.get("checks", []),
                streams=streams,
                chunk_bytes=chunk_bytes,
                timeout_s=timeout_s,
                idle_timeout_s=idle_timeout_s,
                timestamps=timestamps,
                log=f"{log_dir}/rank-{rank}.log" if log_dir else "",
                plane_sources=dict(plane_sources[rank]) if plane_sources else {},
                largest_send=largest,
            )
        )
        specs[-1].validate()  # e.g. a send on a plane without a source: one line before any start
    return specs


def largest_send(schedule: dict[str, Any]) -> int | None:
    """The longest send (bytes) of any rank of ``schedule`` (a ``Schedule.to_dict()``); None
    when it sends nothing."""
    return max(
        (
            int(op["length"])
            for streams in schedule["programs"]
            for ops in streams.values()
            for op in ops
            if op["op"] == "send"
        ),
        default=None,
    )
