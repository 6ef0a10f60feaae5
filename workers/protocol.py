"""The control protocol between the coordinator and its workers, and the clocks it runs on.

One ROUTER socket (coordinator) on an ipc:// endpoint, one DEALER per worker whose identity is
``rank-<rank>``; every message is one JSON object with a ``type`` (docs/schedules.md,
"Control protocol"):

    worker -> coordinator   ready {rank, address, pid}       data socket bound
                            connected {rank}                  PUSH sockets to peers made
                            progress {rank, iteration, done, total, t}   every HEARTBEAT_S
                            result {rank, iteration, ok, t_start, t_end, mismatches, ...}
                            error {rank, iteration, message, peer, aborted}  then exit 1
    coordinator -> worker   connect {peers: {rank: "host:port"}}
                            start {iteration}
                            abort {reason}     (also honoured in the middle of an iteration)
                            stop

Timing. A worker sends ``progress`` every `HEARTBEAT_S` while an iteration runs. The
coordinator calls a rank that has sent nothing for `SILENCE_S` = `SILENCE_HEARTBEATS` x
`HEARTBEAT_S` *silent*: that is what tells a hung rank from the neighbour that merely waits
for it. Outside the program loop (verifying, then filling the next iteration's inputs) a
worker sends no heartbeat; `ITERATION_GRACE_S` covers that when the coordinator decides a rank is gone.

Times are ``CLOCK_MONOTONIC`` (`now`): one clock shared by every process and namespace.
"""

from __future__ import annotations

import json
import time
from typing import Any

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
