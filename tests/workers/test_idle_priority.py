"""Verification and the next inputs' fill run at SCHED_IDLE (`workers.executor.at_idle_priority`),
off the cores the ranks still running share; the caller keeps its own policy."""

from __future__ import annotations

import os
import threading

import pytest

from planner.collectives import ring_allreduce
from workers.coordinator import run_schedule
from workers.executor import at_idle_priority


def test_work_runs_in_another_thread_at_idle_policy_and_the_caller_keeps_its_own() -> None:
    before = os.sched_getscheduler(0)
    seen = at_idle_priority(
        lambda: (threading.get_ident(), os.sched_getscheduler(0), threading.current_thread().daemon)
    )
    assert seen[0] != threading.get_ident()
    assert seen[1] == os.SCHED_IDLE
    assert seen[2]  # a SIGTERM that ends the worker while it waits does not wait for the work
    assert os.sched_getscheduler(0) == before != os.SCHED_IDLE


def test_an_exception_in_the_work_is_raised_to_the_caller() -> None:
    def broken() -> None:
        raise ValueError("region 3 differs")

    with pytest.raises(ValueError, match="region 3 differs"):
        at_idle_priority(broken)


def test_iterations_still_verify_and_refill_every_time() -> None:
    # iteration i's inputs differ from i + 1's (`workers.patterns`): a fill that did not happen,
    # or a check that looked at stale buffers, fails verification of the next iteration
    results = run_schedule(ring_allreduce(4, 4 * 64 * 1024).to_dict(), iterations=3, warmup=1, timeout_s=30)
    assert [r.ok for r in results] == [True, True, True]
    assert all(r.mismatches == [] for r in results)
