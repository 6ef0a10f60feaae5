"""The executor: runs one rank's program (streams of send / recv / compute ops) over pyzmq.

One executor runs every schedule; it knows nothing about rings or trees. It owns this rank's
buffers and data-plane sockets for the worker's life and runs one iteration at a time: run
the program (`workers.scheduler`, moving bytes with the compiled loop of
`workers.engine` over `workers.channels`) on inputs filled ahead (`workers.patterns`), verify the checks
(`workers.verify`), fill the next iteration's inputs.

Verifying and filling are the testbed's own work, not the job's: on one machine a rank that
finished early would do them on the cores the ranks still receiving share (a 12-server ring
AllReduce's last step took up to 31% longer on the ranks that finished last, each rank's 8 MiB
checked and refilled beside them). So they run in a thread at ``SCHED_IDLE`` (`at_idle_priority`),
which the kernel serves (almost) only when no rank's thread is ready to run: they use the time
the cores would idle while the ranks wait for the cables, not the time a rank's op needs, and
still finish before the rank reports (the next ``start`` waits for every report).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import zmq

from . import patterns
from .channels import Channels
from .program import Program
from .protocol import now
from .scheduler import IterationRun
from .spec import WorkerSpec
from .verify import verify

T = TypeVar("T")


def at_idle_priority(work: Callable[[], T]) -> T:
    """``work()`` in a thread of its own at the ``SCHED_IDLE`` policy (run only when no other
    thread is ready on a core; lowering a thread's own policy needs no privilege, and the
    thread ends with it, so nothing has to be raised back), this thread waiting for it; its
    result, or its exception raised here. Where the policy is refused, at the usual one."""

    outcome: list[Any] = []

    def run() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # 0: this thread (Linux)
        except (OSError, AttributeError):
            pass
        try:
            outcome.append((True, work()))
        except BaseException as exc:  # handed to the caller, as if it had run here
            outcome.append((False, exc))

    # a daemon: a SIGTERM that ends the worker while it waits here does not wait for the work
    thread = threading.Thread(target=run, name="verify-and-fill", daemon=True)
    thread.start()
    thread.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


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
        self.arrays: dict[str, np.ndarray] = {}
        self.raw: dict[str, np.ndarray] = {}
        self.buffer_index: dict[str, int] = {}
        for i, b in enumerate(spec.buffers):
            dtype = np.dtype(b.get("dtype", "float32"))
            raw = np.zeros(int(b["bytes"]), dtype=np.uint8)
            self.raw[b["name"]] = raw
            self.arrays[b["name"]] = raw[: len(raw) - len(raw) % dtype.itemsize].view(dtype)
            self.buffer_index[b["name"]] = i
        self.program = Program(spec.streams)
        self.channels = Channels(spec, ctx)
        self.address = self.channels.address
        self.filled: int | None = None  # the iteration whose inputs the buffers hold

    def connect(self, peers: dict[int, str]) -> None:
        self.channels.connect(peers)
        self.fill_inputs(0)

    def wait_sends(self, timeout: float) -> None:
        self.channels.wait_sends(timeout)

    def close(self, linger_ms: int = 0) -> None:
        self.channels.close(linger_ms)

    def fill_inputs(self, iteration: int) -> None:
        """Write ``iteration``'s inputs (once every send reading the buffers was released).
        Called ahead: for iteration 0 on ``connect``, for i + 1 right after verifying i,
        so that at ``start`` every rank begins its program at once. Filled on ``start``
        instead, a rank that finished filling first would start its clock while the others
        still fill on the same cores (12 x 64 MiB: ~0.2 s of skew counted as collective time)."""
        self.wait_sends(self.spec.timeout_s)

        def fill() -> None:
            for name, arr in self.arrays.items():
                patterns.fill_input(arr, self.rank, self.buffer_index[name], iteration)

        at_idle_priority(fill)
        self.filled = iteration

    def run_program(
        self,
        program: Program,
        raw: dict[str, np.ndarray],
        arrays: dict[str, np.ndarray],
        iteration: int,
        control: zmq.Socket | None = None,
        heartbeat: Callable[[int, int], None] | None = None,
    ) -> tuple[IterationReport, IterationRun]:
        """Run ``program`` to completion as iteration ``iteration`` on the buffers ``raw``
        (bytes) / ``arrays`` (typed views of the same memory, by buffer name): the worker's
        own buffers, or a caller's (`workers.session`). No fill, no verification."""
        run = IterationRun(program, self.spec, self.channels, (raw, arrays), iteration, control, heartbeat)
        cpu0 = time.process_time()
        t_start = now()
        run.execute()
        t_end = now()
        report = IterationReport(
            iteration,
            True,
            t_start,
            t_end,
            bytes_sent=run.bytes_sent,
            bytes_received=run.bytes_received,
            cpu_s=time.process_time() - cpu0,
        )
        return report, run

    def run_iteration(
        self,
        iteration: int,
        control: zmq.Socket | None = None,
        heartbeat: Callable[[int, int], None] | None = None,
        timestamps: str | None = None,
    ) -> IterationReport:
        """Run the program to completion on ``iteration``'s inputs (filled now unless filled
        ahead), verify, fill ahead for ``iteration + 1``. Raises PeerFailure/Aborted.
        ``timestamps``: the detail this iteration reports (`workers.spec.TIMESTAMPS`; None:
        the spec's). Every op's start and end are recorded whatever it is: the detail only
        decides what the report carries, after the iteration's end is taken."""
        if self.filled != iteration:
            self.fill_inputs(iteration)
        self.filled = None
        report, run = self.run_program(self.program, self.raw, self.arrays, iteration, control, heartbeat)
        report.mismatches = at_idle_priority(
            lambda: verify(self.rank, self.spec.checks, self.arrays, self.buffer_index, iteration)
        )
        report.ok = not report.mismatches
        self.fill_inputs(iteration + 1)
        program = self.program
        detail = self.spec.timestamps if timestamps is None else timestamps
        if detail in ("streams", "ops"):
            for si, name in enumerate(program.stream_names):
                ops = program.streams[si]
                if ops:
                    report.streams[name] = [run.started[ops[0].index], run.ended[ops[-1].index]]
        if detail == "ops":
            report.ops = [[op.id, run.started[op.index], run.ended[op.index]] for op in program.ops]
        return report
