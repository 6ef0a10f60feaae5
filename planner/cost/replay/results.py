"""What a replay of a schedule gives: the `Prediction` (when the last op ends, when each
rank's and stream's last op ends, the bytes each directed link carried) and, when asked for,
the `Timeline` (when each op of the first ranks started and ended and when each message was
on the wire). Both replays (`events`, `dedicated_links`) give the same ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Prediction:
    """What the model predicts for one execution of a schedule."""

    seconds: float  # makespan
    rank_seconds: list[float]  # when each rank's last op ends
    link_bytes: dict[tuple[int, int], float]  # bytes each directed link carried
    relayed_bytes: dict[tuple[int, int], float]  # of those, bytes relayed by another server
    stream_end: dict[tuple[int, str], float] = field(default_factory=dict)  # (rank, stream) -> its last op's end

    def link_bytes_list(self) -> list[dict]:
        return [{"src": a, "dst": b, "bytes": v} for (a, b), v in sorted(self.link_bytes.items())]

    def relayed_bytes_list(self) -> list[dict]:
        return [{"src": a, "dst": b, "bytes": v} for (a, b), v in sorted(self.relayed_bytes.items())]


@dataclass
class Timeline:
    """When the ops of ranks ``0 .. ranks - 1`` started and ended in a replay, and when each
    message such a rank sent or received was on the wire (`planner.cost.predict.predict_timeline`): what a trace of
    the predicted iteration draws (topolab.results.trace_events). Times are seconds in the network's
    time unit (as `Prediction.seconds`). An op is named by its row in its rank's
    `contract.schedule.Program`; the ops of one stream follow one another (an op starts when
    the one before it has ended, or later), the messages of one connection too (one goes on
    the wire when the one before it has left)."""

    ranks: int  # ranks recorded: 0 .. ranks - 1
    op_start: list[np.ndarray]  # per recorded rank, per row of its program: when the op started
    op_end: list[np.ndarray]  # ... and ended (a send: handed to its connection; a recv: reduced or copied)
    # per message sent or received by a recorded rank (in no particular order):
    msg_src: np.ndarray  # the sending rank
    msg_send_row: np.ndarray  # its send's row in the sender's program
    msg_dst: np.ndarray  # the receiving rank
    msg_recv_row: np.ndarray  # the row of the recv that took it in the receiver's program
    msg_plane: np.ndarray  # the send's plane (0: the destination route)
    wire_start: np.ndarray  # when it went on the wire (its connection free, after its send)
    wire_end: np.ndarray  # when its last byte left
    arrival: np.ndarray  # when it was at the receiver (the hops' latency later)
