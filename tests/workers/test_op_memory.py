"""A worker holds its program as op records, not as the spec's JSON objects.

A worker of a large schedule holds 100,000 ops and more (BERT on 128 servers of degree 8:
101,600 a rank), and 128 workers share one machine's memory. `workers.spec.load_spec` turns
each op object into its `workers.program.Op` record as the JSON parser reads it; the program
takes those records over. ``python -m tests.workers.test_op_memory`` measures what an op costs
a worker process each way (resident memory, after the heap's free pages are handed back).
"""

from __future__ import annotations

import json
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

if __name__ == "__main__":  # run as a program from anywhere: the project's packages first
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workers.program import Op, Program
from workers.spec import SpecError, load_spec


def spec_document(n_ops: int) -> dict[str, Any]:
    """A worker spec of ``n_ops`` ops in two streams, shaped as a schedule's: sends and
    reducing recvs to 7 peers at scattered offsets, each op after the one before, computes."""
    ops = []
    for i in range(n_ops):
        kind = ("send", "recv", "compute")[i % 3]
        op: dict[str, Any] = {"id": i, "op": kind}
        if kind == "compute":
            op["seconds"] = 1e-6 * (i % 50)
        else:
            op.update(peer=1 + i % 7, buffer="grad", offset=(i * 4096) % (1 << 24), length=4096 + i % 100, tag=i)
            if kind == "recv":
                op["mode"] = "reduce"
        if i:
            op["after"] = [i - 1]
        ops.append(op)
    return {
        "rank": 0,
        "ranks": 8,
        "listen": "127.0.0.1:0",
        "peers": {str(p): "127.0.0.1:1" for p in range(1, 8)},
        "control": "ipc:///nonexistent/control",
        "buffers": [{"name": "grad", "bytes": 1 << 24}],
        "checks": [],
        "streams": {"a": ops[: n_ops // 2], "b": ops[n_ops // 2 :]},
    }


def write_spec(tmp_path: Path, doc: dict[str, Any]) -> str:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(doc))
    return str(path)


def traced_bytes(load) -> int:
    """Bytes Python allocated for what ``load()`` returns and keeps."""
    tracemalloc.start()
    try:
        kept = load()
        size, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del kept
    return size


def test_a_loaded_spec_holds_records_and_the_program_takes_them_over(tmp_path):
    doc = spec_document(30)
    doc["streams"] = {"b": doc["streams"]["b"], "a": doc["streams"]["a"]}  # ids 15..29 first
    spec = load_spec(write_spec(tmp_path, doc))
    ops = [op for stream in spec.streams.values() for op in stream]
    assert ops and all(isinstance(op, Op) for op in ops)
    program = Program(spec.streams)
    assert [op.index for op in program.ops] == list(range(30))
    assert all(a is b for a, b in zip(program.ops, ops, strict=True))  # taken over, not copied
    assert program.ops[0].id == 15 and program.ops[0].after == (29,)  # op ids became indices: id 14 is last
    assert program.wakes[5] == program.wakes[6]  # nothing else waits on them: one shared tuple


def test_records_and_objects_make_the_same_program(tmp_path):
    doc = spec_document(60)
    from_objects = Program(doc["streams"])
    from_records = Program(load_spec(write_spec(tmp_path, doc)).streams)
    assert from_records.ops == from_objects.ops
    assert from_records.wakes == from_objects.wakes
    assert from_records.ops_per_peer == from_objects.ops_per_peer


def test_a_record_belongs_to_one_program(tmp_path):
    spec = load_spec(write_spec(tmp_path, spec_document(6)))
    Program(spec.streams)
    with pytest.raises(ValueError, match="already belongs to a program"):
        Program(spec.streams)


@pytest.mark.parametrize(
    ("op", "message"),
    [
        ({"id": 3, "op": "jump"}, "worker spec: op 3: unknown op 'jump'"),
        ({"id": 4, "op": "send", "peer": "x"}, "worker spec: op 4: bad value"),
        ({"id": 5, "op": "send", "peer": 9, "buffer": "grad"}, "op 5 talks to rank 9, which is not in peers"),
    ],
)
def test_a_bad_op_is_one_line_naming_it(tmp_path, op, message):
    doc = spec_document(3)
    doc["streams"]["a"].append(op)
    with pytest.raises(SpecError) as caught:
        load_spec(write_spec(tmp_path, doc))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_records_take_under_60_percent_of_the_memory_of_json_objects(tmp_path):
    path = write_spec(tmp_path, spec_document(20_000))
    objects = traced_bytes(lambda: json.loads(Path(path).read_text()))
    records = traced_bytes(lambda: load_spec(path))
    assert records < 0.6 * objects, (records, objects)  # 311 against 565 bytes an op on Python 3.11


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def measure(n_ops: int = 100_000) -> None:
    """Resident memory an op costs a process: the spec read as JSON objects (the old way) and
    the program made of them, against the records and the program made of those, after the
    heap's free pages are handed back (`workers.worker.release_freed_memory`). Each form is
    measured in a process of its own."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = write_spec(Path(folder), spec_document(n_ops))
        for form in ("objects", "records"):
            out = subprocess.run(
                [sys.executable, __file__, "--one", form, path, str(n_ops)], capture_output=True, text=True, check=True
            )
            print(out.stdout.strip())


def measure_one(form: str, path: str, n_ops: int) -> None:
    from workers.worker import release_freed_memory

    before = resident_bytes()
    if form == "objects":
        streams = json.loads(Path(path).read_text())["streams"]
        program = Program(streams)
    else:
        streams = load_spec(path).streams
        program = Program(streams)
    release_freed_memory()
    per_op = (resident_bytes() - before) / n_ops
    print(f"{form:>7}: {per_op:5.0f} bytes an op resident ({n_ops} ops, spec and program)")
    del program


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        measure_one(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        measure()
