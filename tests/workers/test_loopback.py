"""Real worker processes on loopback (no root): every generator executes and verifies,
a wrong schedule is caught by verification, and faults end every process with a clear error."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from planner.collectives import (
    ScheduleBuilder,
    all_to_all,
    dbtree_allreduce,
    multiring_allreduce,
    p2p_transfers,
    ring_allreduce,
    subgroup_allreduce,
    topoopt_rings,
    tree_allreduce,
)
from workers.coordinator import Coordinator, WorkerFailure, run_schedule

LOOP = "127.0.0.1"
# A dead worker is named when its exit or its dropped connection is seen (~10 ms after the
# kill), not when a silence timeout fires: with this timeout, finishing before it shows which.
FAULT_TIMEOUT_S = 30.0

GENERATORS = {
    "ring": lambda: ring_allreduce(5, 1 << 20, order=[0, 3, 1, 4, 2]),
    "topoopt": lambda: multiring_allreduce(8, 2 << 20, topoopt_rings(8, [1, 3])),
    "subgroup": lambda: subgroup_allreduce(8, 1 << 20, 4, [1]),
    "tree": lambda: tree_allreduce(6, 1 << 20, segment_bytes=128 << 10),
    "dbtree": lambda: dbtree_allreduce(7, 1 << 20, segment_bytes=128 << 10),
    "p2p": lambda: p2p_transfers(4, all_to_all(range(4), 200_000)),
}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes only once reaped; Popen.wait reaped ours
    return True


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generator_runs_and_verifies_on_workers(name):
    sched = GENERATORS[name]()
    results = run_schedule(sched.to_dict(), iterations=2, chunk_bytes=64 << 10, timestamps="ops")
    assert len(results) == 2
    for res in results:
        assert res.ok, res.mismatches[:3]
        assert res.time_s > 0
        sent = sum(r["bytes_sent"] for r in res.ranks)
        assert sent == sum(sched.bytes_sent())
        assert sum(r["bytes_received"] for r in res.ranks) == sent
        # per-op timestamps: every op of every rank, each ending after it started
        for rank, report in enumerate(res.ranks):
            assert len(report["ops"]) == sum(len(o) for o in sched.programs[rank].values())
            assert all(end >= start > 0 for _, start, end in report["ops"])


def test_verification_reports_a_wrong_schedule():
    sched = ring_allreduce(4, 4 * 4096).to_dict()  # the JSON the workers get, edited
    recv = next(op for op in sched["programs"][1]["ring0"] if op["op"] == "recv")
    recv["mode"] = "copy"  # drops one contribution: the result is wrong, not the transport
    (res,) = run_schedule(sched, iterations=1)
    assert not res.ok
    assert res.mismatches and "expected" in res.mismatches[0]


def slow_rank_schedule(n: int, slow: int, seconds: float):
    """Ring AllReduce where rank ``slow`` first computes for ``seconds``: the others are
    mid-collective (data sent, recvs posted) while it computes."""
    b = ScheduleBuilder(n, "ring")
    b.buffer("grad", 1 << 20)
    from planner.collectives import Check, add_ring_allreduce

    wait = {slow: [b.compute(slow, "compute", seconds)]}
    add_ring_allreduce(b, list(range(n)), "grad", 0, 1 << 20, "ring0", after=wait)
    b.check(Check("allreduce", "grad", 0, 1 << 20, groups=[list(range(n))]))
    return b.build()


def _run_with_fault(n, victim, sig, timeout_s, compute_s, relay=True, at=0.3):
    """Run one iteration of `slow_rank_schedule` and send ``sig`` to ``victim`` ``at``
    seconds in (``sig`` None: no fault). Returns (failure or None, elapsed, pids, coord)."""
    sched = slow_rank_schedule(n, victim, compute_s)
    coord = Coordinator(sched.to_dict(), [LOOP] * n, timeout_s=timeout_s, relay_failures=relay)
    failure = None
    with coord:
        pids = coord.pids()
        timer = threading.Timer(at, lambda: os.kill(coord.procs[victim].pid, sig))
        t0 = time.monotonic()
        if sig is not None:
            timer.start()
        try:
            res = coord.run_iteration(0)
            assert res.ok
        except WorkerFailure as exc:
            failure = exc
        elapsed = time.monotonic() - t0
        timer.cancel()
    return failure, elapsed, pids, coord


def test_killed_worker_is_named_and_nothing_is_left():
    # without the kill the iteration succeeds (the victim computes 1 s, well within the timeout)
    assert _run_with_fault(5, 2, None, timeout_s=FAULT_TIMEOUT_S, compute_s=1.0)[0] is None
    failure, elapsed, pids, coord = _run_with_fault(5, 2, signal.SIGKILL, timeout_s=FAULT_TIMEOUT_S, compute_s=1.0)
    assert failure is not None and failure.rank == 2
    assert "rank 2" in str(failure) and "host 127.0.0.1" in str(failure)
    # named by its exit (-9) or, if a neighbour's report comes first, by that report
    assert "exited with code -9" in str(failure) or "disconnected" in str(failure)
    assert "\n" not in str(failure)
    assert elapsed < FAULT_TIMEOUT_S  # seen, not timed out (0.3 s: the kill at 0.3 s, then ~10 ms)
    others = {r: m for r, m in failure.errors.items() if r != 2}
    assert set(others) == {0, 1, 3, 4}
    assert all("rank 2" in m for m in others.values()), others
    assert all(p.poll() is not None for p in coord.procs.values())
    assert not any(pid_alive(pid) for pid in pids)
    assert not coord.workdir.exists()


def test_workers_detect_a_dead_peer_themselves():
    """No relaying by the coordinator: each neighbour of the dead rank sees its TCP
    connection drop and fails naming it, long before the timeout."""
    failure, elapsed, pids, coord = _run_with_fault(
        3, 1, signal.SIGKILL, timeout_s=FAULT_TIMEOUT_S, compute_s=1.0, relay=False
    )
    assert failure is not None
    errors = {r: m for r, m in failure.errors.items() if r != 1}
    assert set(errors) == {0, 2}
    for message in errors.values():
        assert "peer rank 1" in message and "disconnected" in message
    assert elapsed < FAULT_TIMEOUT_S  # seen, not timed out
    assert not any(pid_alive(pid) for pid in pids)


def test_silent_worker_times_out_naming_it():
    """SIGSTOP during a 0.5 s compute: alive but silent; the others give up after the
    1.5 s timeout and name it (without the stop the iteration succeeds)."""
    failure, elapsed, pids, coord = _run_with_fault(4, 3, signal.SIGSTOP, timeout_s=1.5, compute_s=0.5, at=0.2)
    assert failure is not None and failure.rank == 3
    assert "rank 3" in str(failure) and "no data" in str(failure)
    # never before the timeout; after it by ~20 ms, bounded at 3 s only against a hang
    assert 1.5 <= elapsed < 1.5 + 3.0
    assert not any(pid_alive(pid) for pid in pids)


def test_bad_spec_is_one_line_and_exit_2(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "rank": 5,
                "ranks": 2,
                "listen": "127.0.0.1:0",
                "peers": {},
                "control": "ipc:///nonexistent",
                "buffers": [],
                "streams": {},
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "workers.worker", str(spec)], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "rank 5" in proc.stderr


def test_worker_exits_when_coordinator_disappears(tmp_path):
    """A worker whose coordinator never answers gives up after idle_timeout_s."""
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "rank": 0,
                "ranks": 2,
                "listen": "127.0.0.1:0",
                "peers": {"1": "127.0.0.1:0"},
                "control": f"ipc://{tmp_path}/nobody.ipc",
                "buffers": [],
                "streams": {},
                "idle_timeout_s": 0.5,
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "workers.worker", str(spec)], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 1
    assert "coordinator" in proc.stderr


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of every thread of process ``pid`` (from /proc)."""
    fields = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_idle_workers_burn_no_cpu():
    """Between iterations (and with their sockets connected) workers block in a wait: eight
    of them together use well under 5 % of one core over a second."""
    sched = multiring_allreduce(8, 1 << 20, topoopt_rings(8, [1, 3]))
    with Coordinator(sched.to_dict(), [LOOP] * 8) as coord:
        assert coord.run_iteration(0).ok
        before = sum(process_cpu_s(pid) for pid in coord.pids())
        time.sleep(1.0)
        idle = sum(process_cpu_s(pid) for pid in coord.pids()) - before
    assert idle < 0.05, f"8 idle workers used {idle:.3f} CPU-s in 1 s"
