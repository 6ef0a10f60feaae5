"""The op scheduler: runs one iteration of a rank's program to completion, or fails naming why.

Semantics are the schedule format's (contract/schedule/, docs/schedules.md): the ops of a
stream run in order, an op also waits for its ``after`` ops, sends are eager, and matching is
FIFO per (src, dst, tag). The per-op work (start every stream head whose dependencies are
done, move bytes, wake the streams waiting on what completed) runs in compiled code
(`workers.engine`), a slice of at most `POLL_S` at a time, and returns here at once when a
monitor or the control socket has something. Between slices this checks for faults:

- a peer's TCP connection dropped (`workers.channels` monitors) while ops with it remain:
  fail naming it, at once when sends to it remain; when only receives from it remain, once
  nothing has come from it for `DOWN_GRACE_S` (a peer done with its last run closes while
  its last chunks may still be on the wire to us: its exit is not a failure);
- no progress for ``timeout_s`` (and no compute running): fail naming the peer whose data is
  awaited longest, or the peer that accepts nothing, or a deadlock;
- ``abort`` from the coordinator: `Aborted`;
- what the compiled loop found wrong (a malformed header, data of another iteration, more
  bytes than the matching recv expects): fail naming the peer.

Every `HEARTBEAT_S` it reports progress (``heartbeat(done, total)``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import zmq

from . import engine
from .channels import Channels
from .program import Program
from .protocol import HEARTBEAT_S, Aborted, PeerFailure, decode, now
from .spec import WorkerSpec

POLL_S = 0.05
"""Longest slice of the compiled loop: bounds how late a fault or a heartbeat is noticed."""
DOWN_GRACE_S = 1.0
"""How long a peer whose connection dropped may still deliver what it sent before closing
(its sockets linger; a shaped link drains a chunk in ~0.1 s at 100 Mbit/s)."""


def _of_peer(per_peer: np.ndarray, peer: int) -> float:
    """``per_peer[peer]``, 0 for a peer this rank has no entry for."""
    return per_peer[peer] if 0 <= peer < len(per_peer) else 0


class IterationRun:
    """State of one iteration's execution (kept apart so a new iteration starts clean)."""

    def __init__(
        self,
        program: Program,
        spec: WorkerSpec,
        channels: Channels,
        buffers: tuple[dict[str, np.ndarray], dict[str, np.ndarray]],
        iteration: int,
        control: zmq.Socket | None,
        heartbeat: Callable[[int, int], None] | None,
    ) -> None:
        """``buffers``: (raw bytes, typed views of the same memory) of every buffer, by name."""
        self.program = program
        self.timeout_s = spec.timeout_s
        self.control = control
        self.heartbeat = heartbeat
        self.channels = channels
        self.rank = spec.rank
        raw, arrays = buffers
        names = list(raw)
        buffer_index = {name: i for i, name in enumerate(names)}
        packed = program.packed(buffer_index, channels.push_index)
        peers = [*channels.peers, *program.ops_per_peer, self.rank]
        extra = [*channels.monitors, *([control] if control is not None else [])]
        self.native = engine.NativeRun(
            channels.engine,
            packed,
            pull=channels.pull,
            push=channels.push_sockets,
            extra=extra,
            buffers=[raw[name] for name in names],
            dtypes=[arrays[name].dtype for name in names],
            npeers=max(peers) + 1,
            remaining_with=program.ops_per_peer,
            sends_to=program.sends_per_peer,
            chunk_bytes=spec.chunk_bytes,
            iteration=iteration,
            rank=self.rank,
        )
        self.started = self.native.started
        self.ended = self.native.ended

    # ---- what the compiled loop reports ------------------------------------------------
    @property
    def ndone(self) -> int:
        return int(self.native.stats.ndone)

    @property
    def bytes_sent(self) -> int:
        return int(self.native.stats.bytes_sent)

    @property
    def bytes_received(self) -> int:
        return int(self.native.stats.bytes_received)

    @property
    def last_progress(self) -> float:
        return float(self.native.stats.last_progress)

    @property
    def computes(self) -> int:
        return int(self.native.stats.computes)

    def remaining(self, peer: int) -> int:
        """Send and recv ops with ``peer`` still to run."""
        return int(_of_peer(self.native.remaining_with, peer))

    def sends_left(self, peer: int) -> int:
        return int(_of_peer(self.native.sends_to, peer))

    def last_heard(self, peer: int) -> float:
        return float(_of_peer(self.native.last_heard, peer))

    def waiting(self) -> dict[int, int]:
        """Bytes still awaited from each peer by the posted recvs."""
        return {int(p): int(b) for p, b in enumerate(self.native.waiting()) if b > 0}

    def blocked_peers(self) -> list[int]:
        """Peers whose PUSH queue is full (they accept nothing)."""
        keys = self.channels.push_keys
        return sorted({keys[i][0] for i in np.flatnonzero(self.native.blocked[: len(keys)])})

    # ---- faults ------------------------------------------------------------------------
    def check_faults(self) -> None:
        channels = self.channels
        for peer, down_at in channels.peer_down.items():
            quiet = now() - max(down_at, self.last_heard(peer))
            if self.remaining(peer) > 0 and (self.sends_left(peer) > 0 or quiet > DOWN_GRACE_S):
                # a peer that went down because the coordinator aborted everyone is not
                # the culprit: report the abort (already queued) rather than the peer
                if self.control is not None:
                    self.check_control()
                raise PeerFailure(
                    f"rank {self.rank}: peer {channels.describe(peer)} disconnected "
                    f"(its process ended, or it refused a frame over its size limit?) with {self.remaining(peer)} ops "
                    f"still to exchange with it",
                    peer,
                )
        idle = now() - self.last_progress
        if idle < self.timeout_s or self.computes:
            return
        waiting = self.waiting()
        if waiting:
            peer = min(waiting, key=self.last_heard)
            others = ", ".join(f"rank {p}" for p in sorted(waiting) if p != peer)
            raise PeerFailure(
                f"rank {self.rank}: no data from peer {channels.describe(peer)} for {idle:.1f} s "
                f"(timeout {self.timeout_s:g} s; {waiting[peer]} bytes still awaited"
                + (f"; also waiting on {others}" if others else "")
                + ")",
                peer,
            )
        blocked = self.blocked_peers()
        if blocked:
            peer = blocked[0]
            raise PeerFailure(
                f"rank {self.rank}: peer {channels.describe(peer)} accepted no data for "
                f"{idle:.1f} s (timeout {self.timeout_s:g} s)",
                peer,
            )
        raise PeerFailure(
            f"rank {self.rank}: no progress for {idle:.1f} s with "
            f"{len(self.program.ops) - self.ndone} ops left (schedule deadlock?)"
        )

    def failure(self, code: int) -> PeerFailure:
        """The compiled loop's error ``code`` in words, naming the peer."""
        st, describe = self.native.stats, self.channels.describe
        src, a, b, c = int(st.err_src), int(st.err_a), int(st.err_b), int(st.err_c)
        me = f"rank {self.rank}"
        if code == engine.ERR_HEADER:
            return PeerFailure(f"{me}: malformed message header ({a} bytes)")
        if code == engine.ERR_ITERATION:
            return PeerFailure(
                f"{me}: {describe(src)} sent data of iteration {a} during iteration {self.iteration}", src
            )
        if code == engine.ERR_TOO_MANY:
            return PeerFailure(
                f"{me}: {describe(src)} sent more bytes on tag {a} than op {self.program.ops[b].id} expects "
                f"({c}): the peers run different schedules",
                src,
            )
        if code == engine.ERR_SIZE:
            return PeerFailure(f"{me}: chunk from {describe(src)} has {a} bytes, header said {b}", src)
        if code == engine.ERR_UNKNOWN:
            return PeerFailure(
                f"{me}: {describe(src)} sent data on tag {a}, which no recv of this rank's program "
                f"takes: the peers run different schedules",
                src,
            )
        if code == engine.ERR_ZMQ:
            where = {1: "polling", 2: "sending", 3: "receiving"}.get(b, "?")
            peer = f" ({describe(src)})" if src >= 0 else ""
            return PeerFailure(f"{me}: libzmq failed {where}{peer}: {zmq.strerror(a)}", src if src >= 0 else None)
        return PeerFailure(f"{me}: the data-plane loop ran out of memory")

    def check_extra(self) -> None:
        """Take what the monitors and the control socket hold, each until it has nothing.

        The engine polls their ``ZMQ_FD``, which turns readable when libzmq has a command for
        the socket and stays quiet until someone reads the socket dry; reading each one to
        ``zmq.Again`` here (before the loop, when the engine says `engine.EXTRA`, and every
        `HEARTBEAT_S` in case a send on the control socket took the signal) keeps that true."""
        for mon in self.channels.monitors:
            self.channels.check_monitor(mon)
        if self.control is not None:
            self.check_control()

    def check_control(self) -> None:
        while True:
            try:
                msg = decode(self.control.recv(zmq.NOBLOCK))
            except zmq.Again:
                return
            if msg.get("type") == "abort":
                raise Aborted(f"rank {self.rank}: aborted by the coordinator: {msg.get('reason', '')}")

    # ---- the loop --------------------------------------------------------------------
    @property
    def iteration(self) -> int:
        return int(self.native.io.iteration)

    def execute(self) -> None:
        total = len(self.program.ops)
        next_beat = now() + HEARTBEAT_S
        try:
            self.check_extra()
            while True:
                status = self.native.step(POLL_S)
                if status == engine.DONE:
                    return
                if status < 0:
                    raise self.failure(status)
                beat = now() >= next_beat
                if status == engine.EXTRA or beat:
                    self.check_extra()
                self.check_faults()
                if beat:
                    if self.heartbeat is not None:
                        self.heartbeat(self.ndone, total)
                    next_beat = now() + HEARTBEAT_S
        finally:
            self.native.close()
