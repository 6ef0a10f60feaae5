"""Chakra execution traces (planner.chakra): a trace made here from a small model by torch's
execution-trace observer and Chakra's own converter plans with the trace's AllReduce as the
job's gradients (tests/fixtures/models/chakra_trace.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from contract.errors import UsageError
from planner import build_plan, parse_scenario
from planner.chakra import import_chakra
from planner.iteration import iteration_schedule

REPO = Path(__file__).resolve().parents[2]
MAKER = REPO / "tests/fixtures/models/chakra_trace.py"
sys.path.insert(0, str(MAKER.parent))
try:
    from chakra_trace import PARAMS
finally:
    sys.path.pop(0)


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("chakra")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, str(MAKER), str(out)], check=True, capture_output=True, env=env, timeout=120)
    return out / "mlp.et"


def test_the_traces_allreduce_is_the_models_gradients(trace):
    g = import_chakra(trace)
    assert g.param_bytes == 4 * PARAMS and g.params == PARAMS
    assert sum(1 for op in g.ops if op.param_bytes) == 2  # DDP's two buckets, after their layers' backward
    assert g.batch == 8
    # torch's FLOP counter on the recorded shapes: three linear layers forward; backward
    # without the first layer's input gradient
    layers = [(32, 64), (64, 64), (64, 10)]
    assert g.forward_flops == sum(2 * 8 * a * b for a, b in layers)
    assert g.backward_flops == 2 * g.forward_flops - 2 * 8 * 32 * 64
    assert all(op.forward_us is None for op in g.ops)  # a host-only trace has no durations


def test_a_chakra_workload_plans_and_schedules(trace, tmp_path):
    (tmp_path / "traces").mkdir()
    shutil.copy(trace, tmp_path / "traces" / "mlp.0.et")
    shutil.copy(trace, tmp_path / "traces" / "mlp.1.et")
    s = parse_scenario(
        {"workload": {"chakra": "traces", "batch_per_server": 8}, "parallelism": {"strategy": "data"}},
        str(tmp_path / "s.toml"),
    )
    plan = build_plan(s)
    assert plan.demand.allreduce_bytes == 4 * PARAMS
    assert iteration_schedule(plan).op_count() > 0


def test_a_file_that_is_not_a_trace(trace, tmp_path):
    bad = tmp_path / "bad.et"
    bad.write_bytes(b"\x05hello world, not protobuf")
    with pytest.raises(UsageError, match=f"{bad}: not a Chakra execution trace"):
        import_chakra(bad)
    with pytest.raises(UsageError, match="no such Chakra trace"):
        import_chakra(tmp_path / "missing.et")
    (tmp_path / "folder").mkdir()
    shutil.copy(trace, tmp_path / "folder" / "a.et")
    shutil.copy(bad, tmp_path / "folder" / "b.et")
    with pytest.raises(UsageError, match="b.et: not a Chakra execution trace"):
        import_chakra(tmp_path / "folder")
