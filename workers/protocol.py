"""The control protocol between the coordinator and its workers, and the clocks it runs on.

One ROUTER socket (coordinator) on an ipc:// endpoint, one DEALER per worker whose identity is
``rank-<rank>``; every message is one JSON object with a ``type`` (docs/schedules.md,
"Control protocol"):

    worker -> coordinator   ready {rank, address, pid}       data socket bound
                            connected {rank}                  PUSH sockets to peers made
                            progress {rank, iteration, done, total, t}   every HEARTBEAT_S
                            result {rank, iteration, ok, t_start, t_end, mismatches, ...}
                            error {rank, iteration, message, peer, aborted}  then exit 1
                            clock {rank, t}                   the worker's clock, answering clock
    coordinator -> worker   connect {peers: {rank: "host:port"}}
                            start {iteration, [timestamps]}   timestamps: this iteration's detail
                                               (none|streams|ops), else the spec's
                            clock              between iterations: answer with the clock now
                            abort {reason}     (also honoured in the middle of an iteration)
                            stop

Timing. A worker sends ``progress`` every `HEARTBEAT_S` while an iteration runs. The
coordinator calls a rank that has sent nothing for `SILENCE_S` = `SILENCE_HEARTBEATS` x
`HEARTBEAT_S` *silent*: that is what tells a hung rank from the neighbour that merely waits
for it. Outside the program loop (verifying, then filling the next iteration's inputs) a
worker sends no heartbeat; `ITERATION_GRACE_S` covers that when the coordinator decides a rank is gone.

Times are ``CLOCK_MONOTONIC`` (`now`): one clock shared by every process and namespace of a
machine, so the ranks of one machine need no offset. A worker on another machine counts from
that machine's boot: ``clock`` measures its offset (`workers.coordinator.Coordinator.clock_offsets`,
a ping-pong whose shortest round trip bounds the error to half of it).

Sizes. Every socket of the workers, the coordinator and the torch backend caps the frames it
accepts (`limit_frames`, libzmq's ``ZMQ_MAXMSGSIZE``): a peer that sends a bigger one is
disconnected before the frame is read into memory. A control message is at most
`CONTROL_MESSAGE_BYTES`, except the coordinator's ``result``, which lists a rank's streams and
(``timestamps = "ops"``) ops: the coordinator allows `REPORT_PER_SPEC_BYTE` bytes of it per
byte of that rank's spec on top (`workers.coordinator`). The data plane's bound is its
schedule's largest chunk (`workers.spec.WorkerSpec.largest_chunk`).
"""

from __future__ import annotations

import json
import time
from typing import Any

import zmq

now = time.monotonic  # CLOCK_MONOTONIC: one clock for every process and namespace

HEARTBEAT_S = 0.5
"""Period of a worker's ``progress`` message during an iteration. Short enough that a hung
rank is told apart within ~1 s, long enough to cost nothing (one small ipc message)."""

SILENCE_HEARTBEATS = 2.4
"""Beats a rank may miss before it counts as silent: two whole beats, plus 0.4 of a beat for
a loaded machine (12 workers on 2 cores) delaying a loop turn; a loop turn waits at most
`workers.scheduler.POLL_S`, so one late beat is normal, two are not."""

SILENCE_S = SILENCE_HEARTBEATS * HEARTBEAT_S  # 1.2 s

ITERATION_GRACE_S = 5.0
"""Added to ``timeout_s`` where a whole worker is awaited without heartbeats: filling and
verifying 256 MB buffers takes ~1-2 s on a busy core, a send still held by libzmq up to
``timeout_s`` (`workers.channels.Channels.wait_sends`)."""

CONTROL_POLL_MS = 100
"""Longest blocking poll of the coordinator's control loop: how late a death or a deadline is noticed."""

CONTROL_LINGER_MS = 1000
"""How long a closing worker keeps trying to deliver its last message (its ``error``): the
coordinator is local (ipc://), so 1 s is plenty; a gone coordinator must not keep it longer."""


HANDSHAKE_BYTES = 4 << 10
"""The least frame limit of any socket: libzmq checks the peer's ZMTP handshake command
(READY: the socket type and its identity, under 300 bytes) against the same limit, so a
smaller one refuses every peer."""

CONTROL_MESSAGE_BYTES = 1 << 20
"""Bound on a control message that lists no ops: ``connect`` names every peer (4096 peers at
~30 bytes each: 120 KiB), ``error`` and ``abort`` carry one reason, the others a few numbers."""

REPORT_PER_SPEC_BYTE = 2
"""A ``result`` lists, per op, its id and two times (about 50 bytes), per stream its name and
two times, per check at most one line: all of them are in the rank's spec too, where an op
takes 40 bytes or more (a compute: id, kind, seconds), so twice the spec's size holds them."""


def limit_frames(sock: zmq.Socket, largest: int) -> int:
    """Make ``sock`` refuse a frame over ``largest`` bytes (at least `HANDSHAKE_BYTES`):
    libzmq disconnects the peer that sends one, before reading it. Set before bind/connect.
    Returns the limit set."""
    limit = max(HANDSHAKE_BYTES, int(largest))
    sock.setsockopt(zmq.MAXMSGSIZE, limit)
    return limit


class PeerFailure(RuntimeError):
    """A peer died, went silent, or broke the protocol. ``peer`` names it when known."""

    def __init__(self, message: str, peer: int | None = None) -> None:
        super().__init__(message)
        self.peer = peer


class Aborted(RuntimeError):
    """The coordinator aborted the run (another rank failed)."""


class CoordinatorGone(PeerFailure):
    """The coordinator stopped talking: nobody is left to wait for."""


def identity(rank: int) -> bytes:
    """The DEALER identity of rank ``rank`` (the ROUTER addresses workers by it)."""
    return f"rank-{rank}".encode()


def encode(kind: str, **fields: Any) -> bytes:
    fields["type"] = kind
    return json.dumps(fields).encode()


def decode(payload: bytes) -> dict[str, Any]:
    return json.loads(payload)
