"""The op scheduler: runs one iteration of a rank's program to completion, or fails naming why.

Semantics are the schedule format's (contract/schedule.py, docs/schedules.md): the ops of a
stream run in order, an op also waits for its ``after`` ops, sends are eager, and matching is
FIFO per (src, dst, tag). The loop starts every stream head whose dependencies are done,
lets `workers.transfers` move bytes, polls the data, monitor and control sockets for at most
`POLL_S`, and checks for faults:

- a peer's TCP connection dropped (`workers.channels` monitors) while ops with it remain:
  fail naming it, at once when sends to it remain; when only receives from it remain, once
  nothing has come from it for `DOWN_GRACE_S` (a peer done with its last run closes while
  its last chunks may still be on the wire to us: its exit is not a failure);
- no progress for ``timeout_s`` (and no compute running): fail naming the peer whose data is
  awaited longest, or the peer that accepts nothing, or a deadlock;
- ``abort`` from the coordinator: `Aborted`.

Every `HEARTBEAT_S` it reports progress (``heartbeat(done, total)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import zmq

from .channels import Channels
from .program import COMPUTE, RECV, SEND, Op, Program
from .protocol import HEARTBEAT_S, Aborted, PeerFailure, decode, now
from .spec import WorkerSpec
from .transfers import Active, Transfers

POLL_S = 0.05
"""Longest poll of a loop turn: bounds how late a compute's end or a fault is noticed."""
DOWN_GRACE_S = 1.0
"""How long a peer whose connection dropped may still deliver what it sent before closing
(its sockets linger; a shaped link drains a chunk in ~0.1 s at 100 Mbit/s)."""
STASH_POLL_S = 0.0005
"""Poll while early chunks wait for a tracked send to release their region: libzmq gives
no event for that, and the region is typically free within a fraction of a millisecond."""


class IterationRun:
    """State of one iteration's execution (kept apart so a new iteration starts clean)."""

    def __init__(
        self,
        program: Program,
        spec: WorkerSpec,
        channels: Channels,
        buffers: tuple[Any, Any, Any],
        iteration: int,
        control: zmq.Socket | None,
        heartbeat: Callable[[int, int], None] | None,
    ) -> None:
        """``buffers``: the executor's (raw bytes, numpy views, scratch) of every buffer."""
        self.program = program
        self.timeout_s = spec.timeout_s
        self.control = control
        self.heartbeat = heartbeat
        self.channels = channels
        self.rank = spec.rank
        raw, arrays, scratch = buffers
        self.xfer = Transfers(channels, raw, arrays, scratch, spec.chunk_bytes, iteration, self.complete)
        n = len(program.ops)
        self.done = [False] * n
        self.started = [0.0] * n
        self.ended = [0.0] * n
        self.ndone = 0
        self.cursor = [0] * len(program.streams)
        self.busy = [False] * len(program.streams)  # stream's head op is in progress
        self.computes: list[Active] = []
        self.stale = list(range(len(program.streams)))  # streams whose head may have become startable
        self.remaining_with = dict(program.ops_per_peer)
        self.sends_to = dict(program.sends_per_peer)
        self.poller = zmq.Poller()
        self.poller.register(channels.pull, zmq.POLLIN)
        for mon in channels.monitors:
            self.poller.register(mon, zmq.POLLIN)
        if control is not None:
            self.poller.register(control, zmq.POLLIN)

    # ---- op life cycle ---------------------------------------------------------------
    def complete(self, op: Op) -> None:
        self.done[op.index] = True
        self.ended[op.index] = t = now()
        self.ndone += 1
        self.cursor[op.stream] += 1
        self.busy[op.stream] = False
        self.stale.extend(self.program.wakes[op.index])
        if op.kind != COMPUTE:
            self.remaining_with[op.peer] -= 1
            if op.kind == SEND:
                self.sends_to[op.peer] -= 1
        self.xfer.last_progress = t

    def advance(self) -> None:
        """Start every stream head whose dependencies are done, until nothing changes. Only
        an op completing can make a head startable, so only the streams it wakes
        (`Program.wakes`: its own and those waiting on it) are looked at."""
        xfer, stale, streams, done = self.xfer, self.stale, self.program.streams, self.done
        while stale:
            si = stale.pop()
            ops = streams[si]
            if self.busy[si] or self.cursor[si] >= len(ops):
                continue
            op = ops[self.cursor[si]]
            if op.after and not all(done[a] for a in op.after):
                continue
            self.busy[si] = True
            self.started[op.index] = now()
            act = Active(op)
            if op.kind == SEND:
                xfer.start_send(act)
            elif op.kind == RECV:
                xfer.post_recv(act)
            else:
                act.deadline = self.started[op.index] + op.seconds
                if op.seconds <= 0:
                    self.complete(op)
                else:
                    self.computes.append(act)

    # ---- faults ------------------------------------------------------------------------
    def check_faults(self) -> None:
        channels, xfer = self.channels, self.xfer
        for peer, down_at in channels.peer_down.items():
            quiet = now() - max(down_at, xfer.last_heard.get(peer, 0.0))
            if self.remaining_with.get(peer, 0) > 0 and (self.sends_to.get(peer, 0) > 0 or quiet > DOWN_GRACE_S):
                # a peer that went down because the coordinator aborted everyone is not
                # the culprit: report the abort (already queued) rather than the peer
                if self.control is not None:
                    self.check_control()
                raise PeerFailure(
                    f"rank {self.rank}: peer {channels.describe(peer)} disconnected "
                    f"(its process ended?) with {self.remaining_with[peer]} ops "
                    f"still to exchange with it",
                    peer,
                )
        idle = now() - xfer.last_progress
        if idle < self.timeout_s or self.computes:
            return
        waiting: dict[int, int] = {}
        for (src, _tag), q in xfer.posted.items():
            for act in q:
                waiting[src] = waiting.get(src, 0) + act.op.length - act.pos
        if waiting:
            peer = min(waiting, key=lambda p: xfer.last_heard.get(p, 0.0))
            others = ", ".join(f"rank {p}" for p in sorted(waiting) if p != peer)
            raise PeerFailure(
                f"rank {self.rank}: no data from peer {channels.describe(peer)} for {idle:.1f} s "
                f"(timeout {self.timeout_s:g} s; {waiting[peer]} bytes still awaited"
                + (f"; also waiting on {others}" if others else "")
                + ")",
                peer,
            )
        if xfer.blocked_push:
            peer = min(xfer.blocked_push)[0]
            raise PeerFailure(
                f"rank {self.rank}: peer {channels.describe(peer)} accepted no data for "
                f"{idle:.1f} s (timeout {self.timeout_s:g} s)",
                peer,
            )
        raise PeerFailure(
            f"rank {self.rank}: no progress for {idle:.1f} s with "
            f"{len(self.program.ops) - self.ndone} ops left (schedule deadlock?)"
        )

    def check_control(self) -> None:
        while True:
            try:
                msg = decode(self.control.recv(zmq.NOBLOCK))
            except zmq.Again:
                return
            if msg.get("type") == "abort":
                raise Aborted(f"rank {self.rank}: aborted by the coordinator: {msg.get('reason', '')}")

    # ---- the loop --------------------------------------------------------------------
    def execute(self) -> None:
        channels, xfer = self.channels, self.xfer
        total = len(self.program.ops)
        next_beat = now() + HEARTBEAT_S
        while True:
            self.advance()
            if self.ndone == total:
                return
            xfer.pump_sends()
            for key in xfer.stash_pending():
                xfer.drain_stash(key)
            self.advance()
            if self.ndone == total:
                return
            t = now()
            wait = POLL_S
            if self.computes:
                wait = min(wait, max(0.0, min(a.deadline for a in self.computes) - t))
            if xfer.stash_waiting():
                wait = min(wait, STASH_POLL_S)
            for key in xfer.blocked_push:
                self.poller.register(channels.push[key], zmq.POLLOUT)
            events = dict(self.poller.poll(wait * 1000))
            for key in xfer.blocked_push:
                self.poller.unregister(channels.push[key])
            if channels.pull in events:
                xfer.receive()
            for mon in channels.monitors:
                if mon in events:
                    channels.check_monitor(mon)
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
