"""Chakra execution traces (planner.model.chakra): a trace made here from a small model by torch's
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
from planner.cost.iteration import iteration_schedule
from planner.model.chakra import import_chakra
from planner.model.workload_graph import workload_graph

REPO = Path(__file__).resolve().parents[3]
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


def _rewrite(trace: Path, out: Path, change) -> Path:
    """A copy of ``trace`` with ``change(node)`` applied to every node (Chakra's own schema)."""
    from chakra.schema.protobuf.et_def_pb2 import GlobalMetadata, Node
    from chakra.src.third_party.utils.protolib import encodeMessage

    from planner.model.chakra import _messages

    messages = _messages(trace.read_bytes())
    with out.open("wb") as f:
        meta = GlobalMetadata()
        meta.ParseFromString(messages[0])
        encodeMessage(f, meta)
        for m in messages[1:]:
            node = Node()
            node.ParseFromString(m)
            change(node)
            encodeMessage(f, node)
    return out


def test_durations_override_the_flops(trace, tmp_path):
    def timed(node):
        node.duration_micros = 10

    g = import_chakra(_rewrite(trace, tmp_path / "timed.et", timed))
    assert all(op.forward_us is not None and op.forward_us % 10 == 0 for op in g.ops)
    assert sum(op.forward_us + op.backward_us for op in g.ops) > 0
    plain = import_chakra(trace)
    assert [op.param_bytes for op in g.ops] == [op.param_bytes for op in plain.ops]


def test_a_forward_all_to_all_becomes_the_jobs_all_to_all(trace, tmp_path):
    renamed = []

    def alltoall(node):  # DDP's first forward broadcast, as if it were an all-to-all
        if node.name == "c10d::broadcast_" and not renamed:
            node.name = "c10d::alltoall_base_"
            renamed.append(node.id)

    g = import_chakra(_rewrite(trace, tmp_path / "a2a.et", alltoall))
    exchange = [op for op in g.ops if op.kind == "alltoall"]
    assert len(exchange) == 1 and exchange[0].out_bytes > 0
    assert g.param_bytes == 4 * PARAMS  # the AllReduce as before
    following = g.ops[g.ops.index(exchange[0]) + 1]
    assert exchange[0].name in following.inputs
    s = parse_scenario(
        {
            "cluster": {"servers": 4, "degree": 2},
            "workload": {"chakra": str(tmp_path / "a2a.et"), "batch_per_server": 8},
            "parallelism": {"strategy": "data"},
        },
        str(tmp_path / "s.toml"),
    )
    plan = build_plan(s)
    per_sample = workload_graph(plan.workload).ops[g.ops.index(exchange[0])].out_bytes
    per_pair = per_sample * 8 / 4  # each server's 1/4 share of the batch, forward and back
    assert {(f.src, f.dst) for f in plan.demand.mp} == {(a, b) for a in range(4) for b in range(4) if a != b}
    assert all(f.bytes == round(2 * per_pair) for f in plan.demand.mp)
    assert iteration_schedule(plan).op_count() > 0


def test_other_collectives_are_refused_naming_them(trace, tmp_path):
    def scatter(node):
        if node.name == "c10d::allreduce_":
            node.name = "c10d::reduce_scatter_"

    with pytest.raises(UsageError, match="reduce_scatter 27,688 bytes"):
        import_chakra(_rewrite(trace, tmp_path / "rs.et", scatter))
