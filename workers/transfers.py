"""Moving one iteration's bytes: pipelined sends and chunk-by-chunk receives (the hot path).

Sends: a send op is cut into nearly equal chunks of ``chunk_bytes`` to twice that
(`send_pieces`); each goes out as header + chunk, the chunk zero-copy and tracked
(`workers.channels`) unless smaller than ``ZERO_COPY_MIN``. A peer whose PUSH queue is full
stops the op (``blocked_push``) until the socket is writable again.

Receives: FIFO matching per (src, tag) (docs/schedules.md). A chunk for a posted recv goes
straight into place: copy mode with ``recv_into`` the target region; reduce mode with
``np.add(target, chunk, out=target)`` straight from libzmq's message (a zero-copy frame; a
chunk under `FRAME_REDUCE_MIN` goes through a preallocated scratch chunk). A chunk that
arrives before its recv is posted, or while a send of its target region is still in flight,
is kept as a zmq frame (no copy) in ``stash`` and applied once allowed; so is a chunk of a
later iteration where the channels keep them (``Channels.keep_early``). Costs and profile:
docs/dataplane.md.

Nothing here blocks: the scheduler (`workers.scheduler`) polls and calls in. ``complete`` is
its callback for an op whose last byte went out or came in.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import zmq

from .channels import HEADER, ZERO_COPY_MIN, Channels
from .program import Op
from .protocol import PeerFailure, now

CHUNK_ALIGN = 64
"""Chunk boundaries within an op fall on multiples of this (of every dtype's item size, and
a cache line), so a reduce chunk is always whole items."""
RECEIVE_BUDGET = 64  # messages taken per poll, so sends and faults get their turn
FRAME_REDUCE_MIN = zmq.COPY_THRESHOLD
"""A reduce chunk at least this big is added straight from libzmq's message (a zero-copy
frame): one memcpy per byte less than ``recv_into`` the scratch chunk, for a frame object's
few microseconds (pyzmq's own copy/zero-copy threshold, 64 KiB)."""
# plain ints: arithmetic on pyzmq's enum constants builds an enum object per chunk
SEND_MORE = int(zmq.SNDMORE | zmq.NOBLOCK)
EVENTS, POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)


@dataclass(slots=True)
class Active:
    """An op in progress: a send being chunked, a posted recv, or a compute wait."""

    op: Op
    pos: int = 0  # bytes sent / received so far
    deadline: float = 0.0  # compute
    pieces: int = 1  # send: how many wire chunks (`send_pieces`)
    chunks: int = 0  # send: chunks queued so far


def send_pieces(length: int, chunk_bytes: int) -> int:
    """How many wire chunks a send of ``length`` bytes goes out as: ``length // chunk_bytes``
    (at least 1) nearly equal chunks (`chunk_end`), i.e. each at least ``chunk_bytes`` (or
    the whole op) and under twice that. Cutting ``chunk_bytes`` pieces off instead leaves a
    short tail: a 1.33 MiB ring piece went as 1 MiB + 0.33 MiB, two messages, the tail
    copied; as one message the 12-server multi-ring used less CPU per GB (docs/dataplane.md)."""
    return max(1, length // chunk_bytes)


def chunk_end(length: int, pieces: int, k: int) -> int:
    """End (relative to the op) of chunk ``k`` (1-based) of ``pieces``: on a `CHUNK_ALIGN`
    boundary, except the last."""
    return length if k >= pieces else k * length // pieces // CHUNK_ALIGN * CHUNK_ALIGN


class Transfers:
    """The sends, posted recvs and early chunks of one iteration, with their byte counts."""

    def __init__(
        self,
        channels: Channels,
        raw: dict[str, np.ndarray],
        arrays: dict[str, np.ndarray],
        scratch: np.ndarray,
        chunk_bytes: int,
        iteration: int,
        complete: Callable[[Op], None],
    ) -> None:
        self.channels = channels
        self.rank = channels.rank
        self.raw = raw
        self.arrays = arrays
        self.scratch = scratch
        self.chunk_bytes = chunk_bytes
        self.iteration = iteration
        self.complete = complete
        self.sends: list[Active] = []
        self.posted: dict[tuple[int, int], deque[Active]] = defaultdict(deque)
        self.stash: dict[tuple[int, int], deque] = defaultdict(deque)
        self.stashed = 0  # frames in ``stash``: the scheduler's loop skips the stash when none
        self.blocked_push: set[tuple[int, int]] = set()  # (peer, plane) whose PUSH queue is full
        self.last_heard: dict[int, float] = {}
        self.last_progress = now()
        self.bytes_sent = 0
        self.bytes_received = 0
        for src, tag, frame in channels.early.pop(iteration, ()):  # kept by an earlier iteration
            self.stash[(src, tag)].append(frame)
            self.stashed += 1

    # ---- sending ---------------------------------------------------------------------
    def start_send(self, act: Active) -> None:
        act.pieces = send_pieces(act.op.length, self.chunk_bytes)
        if not self.pump_send(act):
            self.sends.append(act)

    def pump_send(self, act: Active) -> bool:
        """Queue as many chunks of ``act`` as the peer's socket takes; True when all are."""
        op = act.op
        channels = self.channels
        sock = channels.push[(op.peer, op.plane)]
        raw = self.raw[op.buffer]
        while act.pos < op.length:
            lo = op.offset + act.pos
            n = chunk_end(op.length, act.pieces, act.chunks + 1) - act.pos
            try:
                sock.send(HEADER.pack(self.iteration, self.rank, op.tag, n), SEND_MORE)
            except zmq.Again:
                self.blocked_push.add((op.peer, op.plane))
                return False
            if n < ZERO_COPY_MIN:
                sock.send(raw[lo : lo + n], copy=True)  # copied now: nothing to track
            else:
                tracker = sock.send(raw[lo : lo + n], copy=False, track=True)
                channels.trackers.append((op.buffer, lo, lo + n, tracker, op.peer))
            act.pos += n
            act.chunks += 1
            self.bytes_sent += n
            self.last_progress = now()
        self.complete(op)
        return True

    def pump_sends(self) -> None:
        if not self.sends:
            return
        self.blocked_push.clear()
        self.sends = [a for a in self.sends if not self.pump_send(a)]

    # ---- receiving -------------------------------------------------------------------
    def post_recv(self, act: Active) -> None:
        key = (act.op.peer, act.op.tag)
        self.posted[key].append(act)
        self.drain_stash(key)

    def stash_pending(self) -> list[tuple[int, int]]:
        """Keys with a posted recv and early chunks waiting (for a tracked send to finish)."""
        if not self.stashed:
            return []
        return [k for k, q in self.posted.items() if q and self.stash.get(k)]

    def stash_waiting(self) -> bool:
        return bool(self.stashed) and any(q and self.stash.get(k) for k, q in self.posted.items())

    def _apply(self, act: Active, data: np.ndarray | None, n: int) -> None:
        """Account ``n`` received bytes of ``act`` (``data`` given: reduce/copy it first)."""
        op = act.op
        lo = op.offset + act.pos
        if data is not None:
            target = self.raw[op.buffer][lo : lo + n]
            dtype = self.arrays[op.buffer].dtype
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

    def _check_fits(self, act: Active, n: int, src: int, tag: int) -> None:
        if act.pos + n > act.op.length:
            raise PeerFailure(
                f"rank {self.rank}: {self.channels.describe(src)} sent more bytes "
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
            if not self.channels.region_free(act.op.buffer, lo, lo + n):
                return
            stash.popleft()
            self.stashed -= 1
            self._apply(act, data, n)

    def receive(self, budget: int = RECEIVE_BUDGET) -> None:
        """Take up to ``budget`` messages off the PULL socket (stops when it has none ready)."""
        channels = self.channels
        pull = channels.pull
        for _ in range(budget):
            if not pull.get(EVENTS) & POLLIN:  # cheaper than a NOBLOCK recv raising Again
                return
            header = pull.recv()
            if len(header) != HEADER.size:
                raise PeerFailure(f"rank {self.rank}: malformed message header ({len(header)} bytes)")
            iteration, src, tag, n = HEADER.unpack(header)
            if iteration > self.iteration and channels.keep_early:
                channels.early.setdefault(iteration, []).append((src, tag, pull.recv(copy=False)))
                continue
            if iteration != self.iteration:
                raise PeerFailure(
                    f"rank {self.rank}: {channels.describe(src)} sent data of iteration "
                    f"{iteration} during iteration {self.iteration}",
                    src,
                )
            key = (src, tag)
            posted = self.posted.get(key)
            if posted and not self.stash.get(key):
                act = posted[0]
                self._check_fits(act, n, src, tag)
                lo = act.op.offset + act.pos
                if channels.region_free(act.op.buffer, lo, lo + n):
                    self._receive_in_place(act, n, src, lo)
                    continue
            frame = pull.recv(copy=False)
            self.stash[key].append(frame)
            self.stashed += 1
            self.last_heard[src] = self.last_progress = now()

    def _receive_in_place(self, act: Active, n: int, src: int, lo: int) -> None:
        """The data frame of a chunk for posted recv ``act``: copy mode lands it in the region
        with ``recv_into`` (the one unavoidable copy); reduce mode adds it from libzmq's own
        message (a zero-copy frame) or, below `FRAME_REDUCE_MIN`, from the scratch chunk."""
        pull = self.channels.pull
        if act.op.reduce and n >= FRAME_REDUCE_MIN:
            frame = pull.recv(copy=False)
            got = len(frame)
            data = np.frombuffer(frame, dtype=np.uint8)
        elif act.op.reduce:
            got = pull.recv_into(self.scratch[:n])
            data = self.scratch[:n]
        else:
            got = pull.recv_into(self.raw[act.op.buffer][lo : lo + n])
            data = None
        if got != n:
            raise PeerFailure(
                f"rank {self.rank}: chunk from {self.channels.describe(src)} has {got} bytes, header said {n}",
                src,
            )
        self._apply(act, data, n)
