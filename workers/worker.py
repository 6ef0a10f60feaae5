"""A worker process: ``python -m workers.worker SPEC.json`` (or ``-``: the spec on stdin).

Reads only the JSON worker spec (`workers.spec`), binds its data-plane socket, then follows
the coordinator over the ipc:// control plane (`workers.protocol`: ``ready``, ``connect`` /
``connected``, then ``start`` / ``result`` per iteration until ``stop``).

Exit codes: 0 after ``stop``; 1 after a failure (peer died or went silent, abort, coordinator
gone); 2 for a bad spec (one line on stderr naming the field).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
import traceback

import zmq

from .executor import Executor
from .protocol import (
    CONTROL_LINGER_MS,
    CONTROL_MESSAGE_BYTES,
    ITERATION_GRACE_S,
    Aborted,
    CoordinatorGone,
    PeerFailure,
    decode,
    encode,
    identity,
    limit_frames,
    now,
)
from .spec import TIMESTAMPS, SpecError, load_spec

PR_SET_PDEATHSIG = 1
PROFILE_ENV = "TOPOLAB_WORKER_PROFILE"
"""Set to a directory: each worker runs under cProfile and writes ``rank-<rank>.prof`` there
(docs/dataplane.md, how the data plane was profiled)."""


def _die_with_parent() -> None:
    """Ask the kernel to SIGTERM this worker if the process that started it dies, so a
    coordinator killed with SIGKILL does not leave workers behind."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def release_freed_memory() -> None:
    """Hand the C heap's free pages back to the kernel (glibc's ``malloc_trim``): reading the
    spec freed its text and each op's JSON object, but the heap keeps such pages (200 bytes
    an op of a large program, measured by ``python -m tests.workers.test_op_memory``), and a
    hundred workers on one machine each keeping them is gigabytes."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


class Worker:
    def __init__(self, spec_path: str) -> None:
        self.spec = load_spec(spec_path)
        if self.spec.log:
            fd = os.open(self.spec.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(fd, 2)
            os.close(fd)
        self.ctx = zmq.Context(io_threads=int(self.spec.extra.get("io_threads", 1)))
        self.control = self.ctx.socket(zmq.DEALER)
        self.control.setsockopt(zmq.IDENTITY, identity(self.spec.rank))
        self.control.setsockopt(zmq.LINGER, CONTROL_LINGER_MS)
        limit_frames(self.control, CONTROL_MESSAGE_BYTES)
        self.control.connect(self.spec.control)
        self.executor: Executor | None = None
        self.iteration = -1

    def send(self, kind: str, **fields) -> None:
        self.control.send(encode(kind, rank=self.spec.rank, **fields))

    def recv_control(self) -> dict:
        if not self.control.poll(self.spec.idle_timeout_s * 1000):
            raise CoordinatorGone(
                f"rank {self.spec.rank}: no word from the coordinator for {self.spec.idle_timeout_s:g} s; exiting"
            )
        return decode(self.control.recv())

    def run(self) -> int:
        spec = self.spec
        self.executor = ex = Executor(spec, self.ctx)
        release_freed_memory()
        self.send("ready", address=ex.address, pid=os.getpid())
        while True:
            msg = self.recv_control()
            kind = msg.get("type")
            if kind == "connect":
                ex.connect({int(k): v for k, v in msg["peers"].items()})
                self.send("connected")
            elif kind == "start":
                self.iteration = int(msg["iteration"])
                detail = msg.get("timestamps")
                if detail is not None and detail not in TIMESTAMPS:
                    raise PeerFailure(f"rank {spec.rank}: start asks for timestamps {detail!r}, not in {TIMESTAMPS}")
                report = ex.run_iteration(
                    self.iteration,
                    self.control,
                    lambda done, total: self.send(
                        "progress", iteration=self.iteration, done=done, total=total, t=now()
                    ),
                    detail,
                )
                self.send("result", **report.to_dict())
            elif kind == "clock":
                self.send("clock", t=now())
            elif kind == "stop":
                ex.wait_sends(spec.timeout_s)
                return 0
            elif kind == "abort":
                raise Aborted(f"rank {spec.rank}: aborted by the coordinator: {msg.get('reason', '')}")
            else:
                raise PeerFailure(f"rank {spec.rank}: unknown control message {kind!r}")

    def linger_after_failure(self) -> None:
        """Keep the data sockets open until the coordinator says ``stop`` (at most
        timeout_s + ITERATION_GRACE_S): if a failed or aborted worker vanished at once, its neighbours
        would see *it* disconnect and blame it instead of the peer that really failed."""
        deadline = now() + self.spec.timeout_s + ITERATION_GRACE_S
        while (left := deadline - now()) > 0:
            if not self.control.poll(left * 1000):
                return
            if decode(self.control.recv()).get("type") == "stop":
                return

    def close(self) -> None:
        if self.executor is not None:
            self.executor.close()
        self.control.close(linger=CONTROL_LINGER_MS)
        self.ctx.term()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m workers.worker SPEC.json   (or - to read the spec on stdin)", file=sys.stderr)
        return 2
    _die_with_parent()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        worker = Worker(argv[0])
    except SpecError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    code = 1
    profile_dir = os.environ.get(PROFILE_ENV, "")
    profiler = None
    if profile_dir:
        import cProfile

        profiler = cProfile.Profile(time.thread_time)  # CPU of this thread, not wall time
        profiler.enable()
    try:
        code = worker.run()
    except (PeerFailure, Aborted) as exc:
        print(str(exc), file=sys.stderr)
        worker.send(
            "error",
            iteration=worker.iteration,
            message=str(exc),
            peer=getattr(exc, "peer", None),
            aborted=isinstance(exc, Aborted),
        )
        if not isinstance(exc, CoordinatorGone):
            worker.linger_after_failure()
    except Exception as exc:  # report anything unexpected, never hang
        traceback.print_exc()
        worker.send(
            "error",
            iteration=worker.iteration,
            peer=None,
            aborted=False,
            message=f"rank {worker.spec.rank}: {type(exc).__name__}: {exc}",
        )
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(os.path.join(profile_dir, f"rank-{worker.spec.rank}.prof"))
        worker.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
