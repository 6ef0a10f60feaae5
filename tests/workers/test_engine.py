"""The compiled data-plane loop (workers/engine.c): its reduce against numpy's, its build, and
the protocol errors it finds on real loopback workers, each naming the peer."""

from __future__ import annotations

import numpy as np
import pytest

from planner.collectives import ring_allreduce
from workers import engine
from workers.coordinator import WorkerFailure, run_schedule


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64"])
def test_reduce_equals_numpy_add(dtype):
    rng = np.random.default_rng(7)
    n = 1003  # not a multiple of any vector width
    if np.dtype(dtype).kind == "f":
        a = (rng.standard_normal(n) * 1e3).astype(dtype)
        b = (rng.standard_normal(n) * 1e3).astype(dtype)
    else:  # the full range: sums wrap around as numpy's do
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, n, endpoint=True).astype(dtype)
        b = rng.integers(info.min, info.max, n, endpoint=True).astype(dtype)
    expected = a + b
    engine.add_into(a, b)
    np.testing.assert_array_equal(a.view(np.uint8), expected.view(np.uint8))  # bit for bit


def test_reduce_at_an_unaligned_address():
    raw = np.zeros(4 * 65 + 1, dtype=np.uint8)
    target = raw[1:].view(np.float32)  # 1 byte past an aligned address
    data = np.arange(65, dtype=np.float32)
    target[:] = 1.0
    engine.add_into(target, data)
    np.testing.assert_array_equal(target, data + 1.0)


def test_bool_buffers_are_refused():
    with pytest.raises(ValueError, match="cannot be reduced"):
        engine.dtype_code(np.dtype(bool))


def test_run_step_outcomes_are_engine_cs():
    """The outcome codes Python compares `run_step`'s result with are the ones engine.c returns."""
    assert (engine.DONE, engine.YIELD, engine.EXTRA) == tuple(map(engine.constant, ("DONE", "YIELD", "EXTRA")))
    assert len({engine.DONE, engine.YIELD, engine.EXTRA}) == 3


def test_the_build_is_named_by_the_source(tmp_path):
    source = tmp_path / "engine.c"
    source.write_text("int x;\n")
    first = engine.library_path(source)
    source.write_text("int x = 1;\n")
    assert engine.library_path(source) != first
    assert engine.library_path().exists()  # set-up built the real one


def _failure_of(schedule: dict) -> str:
    with pytest.raises(WorkerFailure) as failure:
        run_schedule(schedule, iterations=1, timeout_s=5.0)
    return str(failure.value)


def test_a_chunk_longer_than_its_recv_names_the_sender():
    sched = ring_allreduce(3, 3 * 4096).to_dict()  # the JSON the workers get, edited
    recv = next(op for op in sched["programs"][1]["ring0"] if op["op"] == "recv")
    recv["length"] //= 2  # rank 0 sends more than rank 1 expects
    message = _failure_of(sched)
    assert "rank 1" in message and "rank 0" in message and "different schedules" in message


def test_data_on_a_tag_nobody_receives_names_the_sender():
    sched = ring_allreduce(3, 3 * 4096).to_dict()
    for op in sched["programs"][2]["ring0"]:
        if op["op"] == "recv":
            op["tag"] += 1000  # rank 2 never posts a recv for rank 1's tag
    message = _failure_of(sched)
    assert "rank 2" in message and "rank 1" in message and "no recv" in message
