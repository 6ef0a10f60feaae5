"""The executor: runs one rank's program (streams of send / recv / compute ops) over pyzmq.

One executor runs every schedule; it knows nothing about rings or trees. Semantics are the
schedule format's (contract/schedule.py, docs/schedules.md): ops of a stream in
order, ``after`` dependencies, eager sends, FIFO matching per (src, dst, tag).

Data plane (emulation-facts.md, pyzmq section):
- one PULL socket bound on this rank's address; one PUSH socket connected to every peer;
  every message is two frames, a 16-byte header (iteration, src, tag, nbytes) and one chunk
  of at most ``chunk_bytes`` (pipelined 64 KB - 4 MB chunks reach the TCP floor; one big
  message is slower);
- sends are zero-copy *and tracked* (``copy=False, track=True``): a region is never
  overwritten (by a recv or the next iteration's inputs) until every send reading it has
  been released by libzmq. Untracked zero-copy corrupted AllReduce results at >= 5 Gbit/s;
- a chunk for a posted recv goes straight into place with ``recv_into`` (copy mode: into
  the target region; reduce mode: into a preallocated scratch chunk, then ``np.add`` in
  place); a chunk that arrives before its recv is posted is kept as a zmq frame (no copy)
  and applied when the recv is posted.

Faults: a PUSH socket's monitor reports a peer's TCP connection dropping (its process
ended): if ops with that peer remain, the iteration fails at once naming it. A peer that is
alive but silent fails the iteration after ``timeout_s`` without progress, naming the peers
whose data is awaited. An ``abort`` from the coordinator ends the iteration too.
"""

from __future__ import annotations

import json
import struct
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq
from zmq.utils.monitor import recv_monitor_message

from . import patterns
from .spec import WorkerSpec

HEADER = struct.Struct("<IIII")  # iteration, src rank, tag, chunk bytes
SEND, RECV, COMPUTE = 0, 1, 2
_KINDS = {"send": SEND, "recv": RECV, "compute": COMPUTE}
# Below this a copy is cheaper than a tracked zero-copy frame (pyzmq's own COPY_THRESHOLD)
ZERO_COPY_MIN = zmq.COPY_THRESHOLD
HEARTBEAT_S = 0.5  # progress message period during an iteration (silence detection)
now = time.monotonic  # CLOCK_MONOTONIC: one clock for every process and namespace


class PeerFailure(RuntimeError):
    """A peer died, went silent, or broke the protocol. ``peer`` names it when known."""

    def __init__(self, message: str, peer: int | None = None) -> None:
        super().__init__(message)
        self.peer = peer


class Aborted(RuntimeError):
    """The coordinator aborted the run (another rank failed)."""


@dataclass(slots=True)
class _Op:
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
    after: tuple[int, ...] = ()


@dataclass(slots=True)
class _Active:
    """An op in progress: a send being chunked, a posted recv, or a compute wait."""

    op: _Op
    pos: int = 0  # bytes sent / received so far
    deadline: float = 0.0  # compute


@dataclass
class IterationReport:
    iteration: int
    ok: bool
    t_start: float
    t_end: float
    mismatches: list[str] = field(default_factory=list)
    streams: dict[str, list[float]] = field(default_factory=dict)
    ops: list[list[float]] = field(default_factory=list)
    bytes_sent: int = 0
    bytes_received: int = 0
    cpu_s: float = 0.0  # CPU time of this worker process (all threads) during the program

    def to_dict(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "ok": self.ok,
            "t_start": self.t_start,
            "t_end": self.t_end,
            "mismatches": self.mismatches,
            "streams": self.streams,
            "ops": self.ops,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "cpu_s": self.cpu_s,
        }


class Executor:
    """Owns this rank's buffers and data-plane sockets; runs one iteration at a time."""

    def __init__(self, spec: WorkerSpec, ctx: zmq.Context) -> None:
        self.spec = spec
        self.rank = spec.rank
        self.ctx = ctx
        self.arrays: dict[str, np.ndarray] = {}
        self.raw: dict[str, np.ndarray] = {}
        self.buffer_index: dict[str, int] = {}
        for i, b in enumerate(spec.buffers):
            dtype = np.dtype(b.get("dtype", "float32"))
            raw = np.zeros(int(b["bytes"]), dtype=np.uint8)
            self.raw[b["name"]] = raw
            self.arrays[b["name"]] = raw[: len(raw) - len(raw) % dtype.itemsize].view(dtype)
            self.buffer_index[b["name"]] = i
        self.scratch = np.empty(spec.chunk_bytes, dtype=np.uint8)
        self.stream_names = list(spec.streams)
        self.streams: list[list[_Op]] = []
        index_of: dict[int, int] = {}
        ops: list[_Op] = []
        for si, name in enumerate(self.stream_names):
            stream_ops = []
            for d in spec.streams[name]:
                op = _Op(
                    index=len(ops),
                    id=int(d["id"]),
                    kind=_KINDS[d["op"]],
                    stream=si,
                    peer=int(d.get("peer", -1)),
                    buffer=str(d.get("buffer", "")),
                    offset=int(d.get("offset", 0)),
                    length=int(d.get("length", 0)),
                    tag=int(d.get("tag", 0)),
                    reduce=d.get("mode") == "reduce",
                    seconds=float(d.get("seconds", 0.0)),
                    after=tuple(int(a) for a in d.get("after", ())),
                )
                index_of[op.id] = op.index
                ops.append(op)
                stream_ops.append(op)
            self.streams.append(stream_ops)
        for op in ops:
            op.after = tuple(index_of[a] for a in op.after)
        self.ops = ops
        self.ops_per_peer: dict[int, int] = defaultdict(int)
        for op in ops:
            if op.kind != COMPUTE:
                self.ops_per_peer[op.peer] += 1

        self.pull = ctx.socket(zmq.PULL)
        self.pull.setsockopt(zmq.RCVHWM, 4096)
        self.pull.setsockopt(zmq.LINGER, 0)
        host, _, port = spec.listen.rpartition(":")
        self.pull.bind(f"tcp://{host}:{port}")
        endpoint = self.pull.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.address = endpoint.removeprefix("tcp://")
        self.push: dict[int, zmq.Socket] = {}
        self.monitors: dict[zmq.Socket, int] = {}
        self.peer_address: dict[int, str] = dict(spec.peers)
        self.peer_down: dict[int, float] = {}
        self.trackers: deque = deque()  # (buffer, lo, hi, MessageTracker) of sends in flight

    # ---- set-up ------------------------------------------------------------------------
    def connect(self, peers: dict[int, str]) -> None:
        """Connect a PUSH socket (and its monitor) to every peer, at the bound addresses."""
        self.peer_address.update(peers)
        for peer in sorted(self.spec.peers):
            addr = self.peer_address[peer]
            sock = self.ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDHWM, 4096)
            sock.setsockopt(zmq.LINGER, 0)
            mon = sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
            sock.connect(f"tcp://{addr}")
            self.push[peer] = sock
            self.monitors[mon] = peer

    def close(self) -> None:
        for sock in self.push.values():
            sock.disable_monitor()
        for mon in self.monitors:
            mon.close(linger=0)
        for sock in self.push.values():
            sock.close(linger=0)
        self.pull.close(linger=0)

    def describe(self, peer: int) -> str:
        return f"rank {peer} ({self.peer_address.get(peer, '?')})"

    # ---- inputs and verification -----------------------------------------------------
    def wait_sends(self, timeout: float) -> None:
        """Block until libzmq has released every zero-copy send (before buffers change)."""
        deadline = now() + timeout
        while self.trackers:
            buf, lo, hi, tracker, peer = self.trackers[0]
            if not tracker.done:
                left = deadline - now()
                if left <= 0:
                    raise PeerFailure(
                        f"rank {self.rank}: a send to {self.describe(peer)} was "
                        f"not taken by the network within {timeout:.1f} s",
                        peer,
                    )
                try:
                    tracker.wait(min(left, 0.2))
                except zmq.NotDone:
                    continue
            self.trackers.popleft()

    def fill_inputs(self, iteration: int) -> None:
        self.wait_sends(self.spec.timeout_s)
        for name, arr in self.arrays.items():
            patterns.fill_input(arr, self.rank, self.buffer_index[name], iteration)

    def verify(self, iteration: int) -> list[str]:
        """Compare every region this rank's checks constrain with the exact expected sum."""
        problems = []
        for c in self.spec.checks:
            name = c["buffer"]
            arr = self.arrays[name]
            item = arr.itemsize
            lo, hi = int(c["offset"]) // item, (int(c["offset"]) + int(c["length"])) // item
            if c["kind"] == "allreduce":
                group = next((g for g in c["groups"] if self.rank in g), None)
                if group is None:
                    continue
                vec = patterns.expected_vector("allreduce", group, -1, self.buffer_index[name], iteration, lo)
                what = f"sum over ranks {group}"
            elif c["kind"] == "copy":
                if int(c["dst"]) != self.rank:
                    continue
                vec = patterns.expected_vector("copy", [], int(c["src"]), self.buffer_index[name], iteration, lo)
                what = f"rank {c['src']}'s input"
            else:
                problems.append(f"unknown check kind {c['kind']!r}")
                continue
            region = arr[lo:hi]
            if not patterns.region_matches(region, vec):
                bad, got, exp = patterns.first_mismatch(region, vec)
                problems.append(f"rank {self.rank}: {name}[{lo + bad}] = {got:g}, expected {exp:g} ({what})")
        return problems

    # ---- one iteration -----------------------------------------------------------------
    def run_iteration(
        self, iteration: int, control: zmq.Socket | None = None, heartbeat: Callable[[int, int], None] | None = None
    ) -> IterationReport:
        """Fill inputs, run the program to completion, verify. Raises PeerFailure/Aborted."""
        self.fill_inputs(iteration)
        run = _Run(self, iteration, control, heartbeat)
        cpu0 = time.process_time()
        t_start = now()
        run.execute()
        t_end = now()
        cpu = time.process_time() - cpu0
        mismatches = self.verify(iteration)
        report = IterationReport(
            iteration,
            not mismatches,
            t_start,
            t_end,
            mismatches,
            bytes_sent=run.bytes_sent,
            bytes_received=run.bytes_received,
            cpu_s=cpu,
        )
        if self.spec.timestamps in ("streams", "ops"):
            for si, name in enumerate(self.stream_names):
                ops = self.streams[si]
                if ops:
                    report.streams[name] = [run.started[ops[0].index], run.ended[ops[-1].index]]
        if self.spec.timestamps == "ops":
            report.ops = [[op.id, run.started[op.index], run.ended[op.index]] for op in self.ops]
        return report


class _Run:
    """State of one iteration's execution (kept apart so a new iteration starts clean)."""

    def __init__(
        self, ex: Executor, iteration: int, control: zmq.Socket | None, heartbeat: Callable[[int, int], None] | None
    ) -> None:
        self.ex = ex
        self.iteration = iteration
        self.control = control
        self.heartbeat = heartbeat
        n = len(ex.ops)
        self.done = [False] * n
        self.started = [0.0] * n
        self.ended = [0.0] * n
        self.ndone = 0
        self.cursor = [0] * len(ex.streams)
        self.busy = [False] * len(ex.streams)  # stream's head op is in progress
        self.sends: list[_Active] = []
        self.computes: list[_Active] = []
        self.posted: dict[tuple[int, int], deque[_Active]] = defaultdict(deque)
        self.stash: dict[tuple[int, int], deque] = defaultdict(deque)
        self.remaining_with = dict(ex.ops_per_peer)
        self.last_heard: dict[int, float] = {}
        self.bytes_sent = 0
        self.bytes_received = 0
        self.blocked_push: set[int] = set()
        self.poller = zmq.Poller()
        self.poller.register(ex.pull, zmq.POLLIN)
        for mon in ex.monitors:
            self.poller.register(mon, zmq.POLLIN)
        if control is not None:
            self.poller.register(control, zmq.POLLIN)
        self.last_progress = now()

    # ---- op life cycle ---------------------------------------------------------------
    def complete(self, op: _Op) -> None:
        self.done[op.index] = True
        self.ended[op.index] = now()
        self.ndone += 1
        self.cursor[op.stream] += 1
        self.busy[op.stream] = False
        if op.kind != COMPUTE:
            self.remaining_with[op.peer] -= 1
        self.last_progress = self.ended[op.index]

    def advance(self) -> None:
        """Start every stream head whose dependencies are done, until nothing changes."""
        ex = self.ex
        changed = True
        while changed:
            changed = False
            for si, ops in enumerate(ex.streams):
                if self.busy[si] or self.cursor[si] >= len(ops):
                    continue
                op = ops[self.cursor[si]]
                if not all(self.done[a] for a in op.after):
                    continue
                self.busy[si] = True
                self.started[op.index] = now()
                act = _Active(op)
                if op.kind == SEND:
                    if not self.pump_send(act):
                        self.sends.append(act)
                elif op.kind == RECV:
                    key = (op.peer, op.tag)
                    self.posted[key].append(act)
                    self.drain_stash(key)
                else:
                    act.deadline = self.started[op.index] + op.seconds
                    if op.seconds <= 0:
                        self.complete(op)
                    else:
                        self.computes.append(act)
                changed = changed or not self.busy[si]

    # ---- sending ---------------------------------------------------------------------
    def pump_send(self, act: _Active) -> bool:
        """Queue as many chunks of ``act`` as the peer's socket takes; True when all are."""
        ex, op = self.ex, act.op
        sock = ex.push[op.peer]
        raw = ex.raw[op.buffer]
        chunk = ex.spec.chunk_bytes
        end = op.offset + op.length
        while act.pos < op.length:
            lo = op.offset + act.pos
            n = min(chunk, end - lo)
            try:
                sock.send(HEADER.pack(self.iteration, ex.rank, op.tag, n), zmq.SNDMORE | zmq.NOBLOCK)
            except zmq.Again:
                self.blocked_push.add(op.peer)
                return False
            if n < ZERO_COPY_MIN:
                sock.send(raw[lo : lo + n], copy=True)  # copied now: nothing to track
            else:
                tracker = sock.send(raw[lo : lo + n], copy=False, track=True)
                ex.trackers.append((op.buffer, lo, lo + n, tracker, op.peer))
            act.pos += n
            self.bytes_sent += n
            self.last_progress = now()
        self.complete(op)
        return True

    def pump_sends(self) -> None:
        if not self.sends:
            return
        self.blocked_push.clear()
        self.sends = [a for a in self.sends if not self.pump_send(a)]

    def region_free(self, buffer: str, lo: int, hi: int) -> bool:
        """No tracked send of an overlapping region is still held by libzmq."""
        trackers = self.ex.trackers
        while trackers and trackers[0][3].done:
            trackers.popleft()
        for buf, a, b, tracker, _ in trackers:
            if buf == buffer and a < hi and lo < b and not tracker.done:
                return False
        return True

    # ---- receiving -------------------------------------------------------------------
    def _apply(self, act: _Active, data: np.ndarray | None, n: int) -> None:
        """Account ``n`` received bytes of ``act`` (``data`` given: reduce/copy it first)."""
        op = act.op
        ex = self.ex
        lo = op.offset + act.pos
        if data is not None:
            target = ex.raw[op.buffer][lo : lo + n]
            dtype = ex.arrays[op.buffer].dtype
            if op.reduce:
                tv = target.view(dtype)
                np.add(tv, data.view(dtype), out=tv)
            else:
                target[:] = data
        act.pos += n
        self.bytes_received += n
        t = now()
        self.last_progress = self.last_heard[op.peer] = t
        if act.pos == op.length:
            self.posted[(op.peer, op.tag)].popleft()
            self.complete(op)

    def _check_fits(self, act: _Active, n: int, src: int, tag: int) -> None:
        if act.pos + n > act.op.length:
            raise PeerFailure(
                f"rank {self.ex.rank}: {self.ex.describe(src)} sent more bytes "
                f"on tag {tag} than op {act.op.id} expects ({act.op.length}): "
                f"the peers run different schedules",
                src,
            )

    def drain_stash(self, key: tuple[int, int]) -> None:
        """Apply early chunks of ``key`` to its posted recvs, in order, where allowed."""
        stash, posted = self.stash.get(key), self.posted.get(key)
        while stash and posted:
            act = posted[0]
            frame = stash[0]
            data = np.frombuffer(frame.buffer, dtype=np.uint8)
            n = len(data)
            self._check_fits(act, n, key[0], key[1])
            lo = act.op.offset + act.pos
            if not self.region_free(act.op.buffer, lo, lo + n):
                return
            stash.popleft()
            self._apply(act, data, n)

    def receive(self, budget: int = 64) -> None:
        """Take up to ``budget`` messages off the PULL socket."""
        ex = self.ex
        pull = ex.pull
        for _ in range(budget):
            try:
                header = pull.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(header) != HEADER.size:
                raise PeerFailure(f"rank {ex.rank}: malformed message header ({len(header)} bytes)")
            iteration, src, tag, n = HEADER.unpack(header)
            if iteration != self.iteration:
                raise PeerFailure(
                    f"rank {ex.rank}: {ex.describe(src)} sent data of iteration "
                    f"{iteration} during iteration {self.iteration}",
                    src,
                )
            key = (src, tag)
            posted = self.posted.get(key)
            if posted and not self.stash.get(key):
                act = posted[0]
                self._check_fits(act, n, src, tag)
                lo = act.op.offset + act.pos
                if self.region_free(act.op.buffer, lo, lo + n):
                    if act.op.reduce:
                        got = pull.recv_into(self.ex.scratch[:n])
                        data = self.ex.scratch[:n]
                    else:
                        got = pull.recv_into(ex.raw[act.op.buffer][lo : lo + n])
                        data = None
                    if got != n:
                        raise PeerFailure(
                            f"rank {ex.rank}: chunk from {ex.describe(src)} has {got} bytes, header said {n}", src
                        )
                    self._apply(act, data, n)
                    continue
            frame = pull.recv(copy=False)
            self.stash[key].append(frame)
            self.last_heard[src] = self.last_progress = now()

    # ---- faults ------------------------------------------------------------------------
    def check_monitors(self, mon: zmq.Socket) -> None:
        while True:
            try:
                event = recv_monitor_message(mon, zmq.NOBLOCK)
            except zmq.Again:
                return
            peer = self.ex.monitors[mon]
            if event["event"] == zmq.EVENT_DISCONNECTED:
                self.ex.peer_down[peer] = now()
            elif event["event"] == zmq.EVENT_CONNECTED:
                self.ex.peer_down.pop(peer, None)

    def check_faults(self) -> None:
        ex = self.ex
        for peer in ex.peer_down:
            if self.remaining_with.get(peer, 0) > 0:
                # a peer that went down because the coordinator aborted everyone is not
                # the culprit: report the abort (already queued) rather than the peer
                if self.control is not None:
                    self.check_control()
                raise PeerFailure(
                    f"rank {ex.rank}: peer {ex.describe(peer)} disconnected "
                    f"(its process ended?) with {self.remaining_with[peer]} ops "
                    f"still to exchange with it",
                    peer,
                )
        idle = now() - self.last_progress
        if idle < ex.spec.timeout_s or self.computes:
            return
        waiting = {}
        for (src, _tag), q in self.posted.items():
            for act in q:
                waiting.setdefault(src, 0)
                waiting[src] += act.op.length - act.pos
        if waiting:
            peer = min(waiting, key=lambda p: self.last_heard.get(p, 0.0))
            others = ", ".join(f"rank {p}" for p in sorted(waiting) if p != peer)
            raise PeerFailure(
                f"rank {ex.rank}: no data from peer {ex.describe(peer)} for {idle:.1f} s "
                f"(timeout {ex.spec.timeout_s:g} s; {waiting[peer]} bytes still awaited"
                + (f"; also waiting on {others}" if others else "")
                + ")",
                peer,
            )
        if self.blocked_push:
            peer = min(self.blocked_push)
            raise PeerFailure(
                f"rank {ex.rank}: peer {ex.describe(peer)} accepted no data for "
                f"{idle:.1f} s (timeout {ex.spec.timeout_s:g} s)",
                peer,
            )
        raise PeerFailure(
            f"rank {ex.rank}: no progress for {idle:.1f} s with "
            f"{len(ex.ops) - self.ndone} ops left (schedule deadlock?)"
        )

    def check_control(self) -> None:
        while True:
            try:
                msg = json.loads(self.control.recv(zmq.NOBLOCK))
            except zmq.Again:
                return
            if msg.get("type") == "abort":
                raise Aborted(f"rank {self.ex.rank}: aborted by the coordinator: {msg.get('reason', '')}")

    # ---- the loop --------------------------------------------------------------------
    def execute(self) -> None:
        ex = self.ex
        total = len(ex.ops)
        next_beat = now() + HEARTBEAT_S
        while True:
            self.advance()
            if self.ndone == total:
                return
            self.pump_sends()
            for key in [k for k, q in self.posted.items() if q and self.stash.get(k)]:
                self.drain_stash(key)
            self.advance()
            if self.ndone == total:
                return
            t = now()
            wait = 0.05
            if self.computes:
                wait = min(wait, max(0.0, min(a.deadline for a in self.computes) - t))
            waiting_on_trackers = any(q and self.stash.get(k) for k, q in self.posted.items())
            if waiting_on_trackers:
                wait = min(wait, 0.0005)
            for peer in self.blocked_push:
                self.poller.register(ex.push[peer], zmq.POLLOUT)
            events = dict(self.poller.poll(wait * 1000))
            for peer in self.blocked_push:
                self.poller.unregister(ex.push[peer])
            if ex.pull in events:
                self.receive()
            for mon in ex.monitors:
                if mon in events:
                    self.check_monitors(mon)
            if self.control is not None and self.control in events:
                self.check_control()
            if self.computes:
                t = now()
                due = [a for a in self.computes if a.deadline <= t]
                if due:
                    self.computes = [a for a in self.computes if a.deadline > t]
                    for a in due:
                        self.complete(a.op)
            self.check_faults()
            if self.heartbeat is not None and now() >= next_beat:
                self.heartbeat(self.ndone, total)
                next_beat = now() + HEARTBEAT_S
