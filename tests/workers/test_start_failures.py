"""Workers that fail while starting, caused for real on loopback: a command that exits at once,
a command that cannot be executed, a process that never connects. Each must end the start
with one line naming the rank, its host and the cause, within 10 s, leaving no process."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from contract.errors import RunError
from planner.collectives import ring_allreduce
from workers.coordinator import Coordinator, WorkerFailure, loopback_spawn, start_timeout_for

LOOP = "127.0.0.1"
# Every start failure is reported and cleaned up within this (a hang guard: 0.02-0.3 s
# measured), after the start timeout for a worker that never speaks (it is what names it).
BOUND_S = 10.0


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def start_with(victim: int, replace_argv, n: int = 4):
    """Start a ring of ``n`` loopback workers where rank ``victim`` runs ``replace_argv(argv)``
    instead. Returns (WorkerFailure or None, elapsed incl. clean-up, every Popen started)."""
    started: list[subprocess.Popen] = []
    plain = loopback_spawn()

    def spawn(rank: int, argv: list[str]) -> subprocess.Popen:
        proc = plain(rank, replace_argv(argv) if rank == victim else argv)
        started.append(proc)
        return proc

    t0 = time.monotonic()
    failure = None
    try:
        with Coordinator(ring_allreduce(n, 1 << 16).to_dict(), [LOOP] * n, spawn=spawn, timeout_s=2.0) as coord:
            coord.run(1, warmup=0)
    except WorkerFailure as exc:
        failure = exc
    return failure, time.monotonic() - t0, started


def assert_clean_failure(failure, elapsed, started, rank, cause, waited_s=0.0):
    assert failure is not None, "the start should have failed"
    assert isinstance(failure, RunError) and failure.exit_code == 1
    message = str(failure)
    assert "\n" not in message
    assert failure.rank == rank
    assert f"rank {rank}" in message and f"host {LOOP}" in message, message
    assert cause in message, message
    assert elapsed < waited_s + BOUND_S
    assert all(proc.poll() is not None for proc in started)
    assert not any(pid_alive(proc.pid) for proc in started)


def test_a_healthy_start_succeeds():
    """The harness itself: with no replacement every worker starts and the ring verifies."""
    failure, elapsed, started = start_with(-1, lambda argv: argv)
    assert failure is None
    assert len(started) == 4 and all(proc.returncode == 0 for proc in started)


def test_worker_command_that_exits_at_once_is_named():
    failure, elapsed, started = start_with(1, lambda argv: [sys.executable, "-c", "raise SystemExit(3)"])
    assert_clean_failure(failure, elapsed, started, 1, "exited with code 3 during start")


def test_worker_command_that_cannot_be_executed_is_named():
    failure, elapsed, started = start_with(2, lambda argv: ["/nonexistent/python", *argv[1:]])
    assert_clean_failure(failure, elapsed, started, 2, "could not be started: /nonexistent/python")
    assert len(started) == 2  # ranks 0 and 1 were started, and are gone again


@pytest.mark.timeout(30)
def test_worker_that_never_connects_is_named():
    """A process that lives but never talks to the coordinator (here: sleep)."""
    failure, elapsed, started = start_with(3, lambda argv: ["sleep", "60"])
    waited = start_timeout_for(4)  # 7 s: 7.4 s measured
    assert_clean_failure(failure, elapsed, started, 3, "never connected to the coordinator", waited_s=waited)
    assert "'ready'" in str(failure)


def test_relayed_workers_take_their_spec_on_stdin() -> None:
    # a worker on another machine shares no file with the coordinator: with a control relay
    # (here the identity, on loopback) it reads its spec on stdin, not from a file
    n = 4
    with Coordinator(
        ring_allreduce(n, 1 << 16).to_dict(), [LOOP] * n, control_relay=lambda rank, path: path, timeout_s=5.0
    ) as coord:
        assert [r.ok for r in coord.run(1, warmup=0)] == [True]
        assert coord.remote == set(range(n))
        assert sorted(coord.workdir.glob("rank-*")) == []  # no spec file, no log file


def test_relay_failure_names_the_rank() -> None:
    def relay(rank: int, path: str) -> str:
        raise RunError("machine m1 (192.0.2.202): cannot forward /run/topolab/x.ipc: refused")

    with pytest.raises(WorkerFailure, match=r"worker rank 0 \(host 127.0.0.1\): no control channel: machine m1"):
        with Coordinator(ring_allreduce(2, 1 << 10).to_dict(), [LOOP] * 2, control_relay=relay):
            pass


@pytest.mark.parametrize(
    "stdin, cause",
    [("{}", "missing field 'rank'"), ("not json", "stdin is not JSON")],
)
def test_worker_spec_on_stdin_is_checked(stdin: str, cause: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "workers.worker", "-"], input=stdin, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2
    assert cause in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_the_start_limit_grows_with_the_buffers_the_workers_fill() -> None:
    """Before ``connected`` every worker fills its buffers (the first fill touches every page):
    12 BERT-large workers fill 15.5 GiB, far more than the 7 s floor allows on 2 cores."""
    from workers.coordinator import FILL_CPU_S_PER_BYTE, START_MARGIN, START_TIMEOUT_S

    small, bert = start_timeout_for(12, 12 << 20), start_timeout_for(12, int(15.5 * (1 << 30)))
    assert small == START_TIMEOUT_S  # small buffers keep the floor
    cores = os.cpu_count() or 1
    assert bert >= START_MARGIN * FILL_CPU_S_PER_BYTE * 15.5 * (1 << 30) / cores > START_TIMEOUT_S
    assert start_timeout_for(12, 2 * int(15.5 * (1 << 30))) > bert  # and keeps growing with them
