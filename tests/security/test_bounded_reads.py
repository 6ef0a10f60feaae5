"""Bounded reads (issue 45, finding 6): every file a scenario names, and the scenario itself,
is read as a regular file under a cap (contract.files.read_capped): a device, a FIFO, a
folder or a link to a device is refused before a byte is read, a file over the cap is refused
after cap + 1 bytes, a Chakra trace is gunzipped as a stream under a cap, and every number of
a graph file is bounded (contract.graph). Each answer is one line on stderr naming the file,
exit 2, no traceback, and no hang: before, ``graph = "/dev/urandom"`` and a FIFO waited until
killed, ``/dev/zero`` ran out of memory, a gzip bomb too, and ``params = 10**400`` was an
``OverflowError`` traceback.

Every case runs the real command in a new process (``python -m topolab plan``). Where the
cap is the point, the process lowers the module's cap first (a one-line prelude), so the
files stay small; the file that passes at the cap is the control.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ANSWER_WITHIN_S = 10.0
GOOD_OP = {
    "name": "a",
    "kind": "dense",
    "params": 2,
    "param_bytes": 8,
    "forward_flops": 4.0,
    "backward_flops": 8.0,
    "out_bytes": 16,
    "inputs": [],
}


def _graph_doc(**op_changes: object) -> str:
    return json.dumps({"format": "topolab.opgraph/1", "name": "m", "batch": 2, "ops": [{**GOOD_OP, **op_changes}]})


def _topolab(tmp: Path, argv: list[str], prelude: str = "") -> subprocess.CompletedProcess[str]:
    """``topolab ARGV`` in a new process (cwd: a folder of its own); ``prelude``: Python run
    first in that process (to lower a module's cap)."""
    work = tmp / "cwd"
    work.mkdir(exist_ok=True)
    code = f"{prelude}\nimport sys\nfrom topolab.cli import main\nsys.exit(main(sys.argv[1:]))"
    try:
        return subprocess.run(
            [sys.executable, "-c", code, *argv],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=ANSWER_WITHIN_S,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"topolab {' '.join(argv)}: no answer within {ANSWER_WITHIN_S:g} s")


def _one_line_exit_2(done: subprocess.CompletedProcess[str], *names: str) -> str:
    err = done.stderr.strip()
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 2, f"exit {done.returncode}: {err[-400:]!r}"
    assert len(err.splitlines()) == 1, err
    for name in names:
        assert name in err, f"{err!r} does not name {name!r}"
    return err


def _scenario(tmp: Path, workload: str) -> Path:
    path = tmp / "s.toml"
    path.write_text(f'[workload]\n{workload}\n[parallelism]\nstrategy = "data"\n', encoding="utf-8")
    return path


# special files: (label, make(tmp) -> the path to name, what the line must say)
SPECIALS: list[tuple[str, Callable[[Path], str], str]] = [
    ("/dev/urandom", lambda t: "/dev/urandom", "device"),
    ("/dev/zero", lambda t: "/dev/zero", "device"),
    ("a FIFO", lambda t: (os.mkfifo(t / "fifo.json"), str(t / "fifo.json"))[1], "FIFO"),
    ("a folder", lambda t: (os.mkdir(t / "folder.json"), str(t / "folder.json"))[1], "folder"),
    ("a link to /dev/zero", lambda t: (os.symlink("/dev/zero", t / "zero.json"), str(t / "zero.json"))[1], "device"),
]


@pytest.mark.parametrize("key", ["graph", "chakra"])
@pytest.mark.parametrize("label,make,says", SPECIALS, ids=[s[0] for s in SPECIALS])
def test_a_special_file_for_a_file_key_is_refused_at_once(key, label, make, says, tmp_path):
    path = make(tmp_path)
    scenario = _scenario(tmp_path, f'{key} = "{path}"')
    err = _one_line_exit_2(_topolab(tmp_path, ["plan", str(scenario)]), str(scenario), f"workload.{key}", path)
    assert says in err


@pytest.mark.parametrize("label,make,says", SPECIALS, ids=[s[0] for s in SPECIALS])
def test_a_special_file_as_the_scenario_is_refused_at_once(label, make, says, tmp_path):
    path = make(tmp_path)
    assert says in _one_line_exit_2(_topolab(tmp_path, ["plan", path]), path)


@pytest.mark.parametrize("label,make,says", SPECIALS, ids=[s[0] for s in SPECIALS])
def test_a_special_file_as_a_model_file_is_refused_before_it_is_read(label, make, says, tmp_path):
    link = tmp_path / "model.py"  # a model file must end in .py: a link of that name to the special file
    target = Path(make(tmp_path))
    link.symlink_to(target)
    scenario = _scenario(tmp_path, 'model = "model.py:build"')
    err = _one_line_exit_2(_topolab(tmp_path, ["plan", str(scenario)]), "workload.model", str(link))
    assert says in err


def test_a_graph_file_one_byte_over_the_cap_is_refused_and_one_at_the_cap_reads(tmp_path):
    graph = tmp_path / "g.json"
    graph.write_text(_graph_doc())
    size = graph.stat().st_size
    scenario = _scenario(tmp_path, 'graph = "g.json"')
    at_cap = _topolab(
        tmp_path, ["plan", str(scenario)], f"import planner.model.graph_file as g; g.MAX_GRAPH_BYTES = {size}"
    )
    assert at_cap.returncode == 0, at_cap.stderr
    over = _topolab(
        tmp_path, ["plan", str(scenario)], f"import planner.model.graph_file as g; g.MAX_GRAPH_BYTES = {size - 1}"
    )
    assert f"larger than {size - 1:,} bytes" in _one_line_exit_2(over, "workload.graph", str(graph))


def test_a_scenario_one_byte_over_the_cap_is_refused(tmp_path):
    scenario = _scenario(tmp_path, 'model = "bert"')
    size = scenario.stat().st_size
    prelude = "import planner.scenario as s; s.MAX_SCENARIO_BYTES = {}"
    assert _topolab(tmp_path, ["plan", str(scenario)], prelude.format(size)).returncode == 0
    over = _topolab(tmp_path, ["plan", str(scenario)], prelude.format(size - 1))
    assert "larger than" in _one_line_exit_2(over, str(scenario))


def test_a_gzip_bomb_chakra_trace_stops_at_the_cap(tmp_path):
    """64 MiB of zeros in 64 kB, as four gzip members of 16 MiB; the cap lowered to 1 MiB
    stops it; raised over 64 MiB the same file decompresses whole (and is then no trace)."""
    member = gzip.compress(bytes(16 << 20), compresslevel=9)
    bomb = tmp_path / "bomb.et"
    bomb.write_bytes(member * 4)
    assert bomb.stat().st_size < 1 << 20
    scenario = _scenario(tmp_path, 'chakra = "bomb.et"')
    prelude = "import planner.model.chakra as c; c.MAX_TRACE_UNZIPPED_BYTES = {}"
    capped = _topolab(tmp_path, ["plan", str(scenario)], prelude.format(1 << 20))
    assert f"decompresses to more than {1 << 20:,} bytes" in _one_line_exit_2(capped, "workload.chakra", str(bomb))
    whole = _topolab(tmp_path, ["plan", str(scenario)], prelude.format(65 << 20))
    assert "not a Chakra execution trace" in _one_line_exit_2(whole, "workload.chakra", str(bomb))


@pytest.mark.parametrize(
    "field,value",
    [
        ("params", "1" + "0" * 400),
        ("param_bytes", str(2**64)),
        ("out_bytes", str(10**30)),
        ("forward_flops", "1" + "0" * 400),
        ("backward_us", "1e300"),
    ],
)
def test_a_huge_number_in_a_graph_file_is_one_line_naming_the_field(field, value, tmp_path):
    graph = tmp_path / "g.json"
    graph.write_text(_graph_doc(**{field: "HUGE"}).replace('"HUGE"', value))  # a number JSON holds, Python cannot
    scenario = _scenario(tmp_path, 'graph = "g.json"')
    err = _one_line_exit_2(_topolab(tmp_path, ["plan", str(scenario)]), str(graph), f"ops[0].{field}")
    assert "must be <=" in err


def test_a_batch_of_10_to_the_400_is_one_line(tmp_path):
    graph = tmp_path / "g.json"
    graph.write_text(_graph_doc().replace('"batch": 2', '"batch": 1' + "0" * 400))
    scenario = _scenario(tmp_path, 'graph = "g.json"')
    _one_line_exit_2(_topolab(tmp_path, ["plan", str(scenario)]), str(graph), "batch")


def test_a_graph_nested_100000_deep_is_one_line(tmp_path):
    graph = tmp_path / "g.json"
    graph.write_text('{"ops": ' + "[" * 100_000 + "]" * 100_000 + "}")
    scenario = _scenario(tmp_path, 'graph = "g.json"')
    assert "nested too deeply" in _one_line_exit_2(_topolab(tmp_path, ["plan", str(scenario)]), str(graph))


def test_an_integer_of_5000_digits_is_one_line(tmp_path):
    """Python refuses to parse an integer of more than 4,300 digits (a ValueError, not a
    JSONDecodeError): still one line."""
    graph = tmp_path / "g.json"
    graph.write_text(_graph_doc().replace('"params": 2', '"params": ' + "9" * 5000))
    scenario = _scenario(tmp_path, 'graph = "g.json"')
    assert "not JSON" in _one_line_exit_2(_topolab(tmp_path, ["plan", str(scenario)]), str(graph))


def test_the_bounds_admit_real_graphs():
    """The shipped imported graphs (ResNet-50, BERT-large) read: the bounds are far above them."""
    from planner.model.graph_file import read_graph

    for name in ("resnet50.json", "bert_large.json"):
        g = read_graph(REPO / "examples" / "models" / name)
        assert g.params > 10**7
