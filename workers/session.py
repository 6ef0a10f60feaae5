"""A data-plane session: the executor run on a caller's buffers, one collective after another.

A worker (`workers.worker`) owns its buffers and runs one program per iteration between the
coordinator's barriers. A session serves a caller that owns the memory and calls collectives
in its own order (the `topolab` backend of ``torch.distributed``, on tensors' memory): it
binds this rank's data socket, connects a PUSH socket to every other rank once, and runs each
program it is given on the buffers it is given with the same executor (`workers.executor`,
`workers.scheduler`, `workers.transfers`, `workers.channels`).

The programs come later, of any size: the data socket refuses only frames over the
protocol's bound, twice ``chunk_bytes`` plus the header (`workers.spec.WorkerSpec.largest_chunk`).

Each run is one iteration of the executor, numbered in call order; every rank must run the
same programs in the same order (as ``torch.distributed`` requires of collectives). There is
no barrier between runs: a peer may start run k + 1 while this rank is still in run k, so the
channels keep such early chunks for run k + 1 (``Channels.keep_early``). A run returns only
once libzmq has released every zero-copy send of the caller's memory, so the caller may
overwrite it at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import zmq

from .executor import Executor
from .program import Program
from .spec import DEFAULT_CHUNK, WorkerSpec

LINGER_S = 10.0  # on close, queued messages get this long to reach their peers


@dataclass
class RunTiming:
    """One run: CLOCK_MONOTONIC start and end, bytes moved, CPU seconds of this process."""

    run: int
    t_start: float
    t_end: float
    bytes_sent: int
    bytes_received: int
    cpu_s: float


class Session:
    """This rank's end of the data plane for a sequence of programs on caller-owned buffers."""

    def __init__(
        self,
        rank: int,
        ranks: int,
        listen: str,
        *,
        chunk_bytes: int = DEFAULT_CHUNK,
        timeout_s: float = 120.0,
        ctx: zmq.Context | None = None,
    ) -> None:
        """``listen``: ``host:port`` of this rank's data socket (port 0: any free port; the
        bound one is `address`, to be given to the peers)."""
        self.ctx = ctx or zmq.Context()
        self._own_ctx = ctx is None
        peers = {p: f"{listen.rpartition(':')[0]}:0" for p in range(ranks) if p != rank}  # real ones in `connect`
        self.spec = WorkerSpec(
            rank=rank,
            ranks=ranks,
            listen=listen,
            peers=peers,
            control="ipc://unused",
            buffers=[],
            checks=[],
            streams={},
            chunk_bytes=chunk_bytes,
            timeout_s=timeout_s,
            timestamps="none",
        )
        self.spec.validate()
        self.executor = Executor(self.spec, self.ctx)
        self.executor.channels.keep_early = True
        self.address: str = self.executor.address
        self.runs = 0

    def connect(self, peers: dict[int, str]) -> None:
        """Connect to every other rank's bound ``host:port``."""
        self.executor.connect(peers)

    def run(self, program: Program, buffers: dict[str, np.ndarray]) -> RunTiming:
        """Run ``program`` (every rank runs its own part of the same schedule) on
        ``buffers``: typed, contiguous numpy arrays by the schedule's buffer names (the
        receive-and-reduce adds in their dtype). Raises `workers.protocol.PeerFailure`."""
        raw = {name: arr.reshape(-1).view(np.uint8) for name, arr in buffers.items()}
        arrays = {name: arr.reshape(-1) for name, arr in buffers.items()}
        report, _ = self.executor.run_program(program, raw, arrays, self.runs)
        self.executor.wait_sends(self.spec.timeout_s)  # the caller may overwrite the memory now
        self.runs += 1
        return RunTiming(
            report.iteration, report.t_start, report.t_end, report.bytes_sent, report.bytes_received, report.cpu_s
        )

    def close(self) -> None:
        """Close the sockets, delivering what is still queued: a rank done with its last run
        may still hold small (copied) messages its peers need to finish theirs; dropped, a
        peer would see this rank disconnect with its data missing. Bounded by `LINGER_S`."""
        self.executor.close(int(LINGER_S * 1000))
        if self._own_ctx:
            self.ctx.term()
