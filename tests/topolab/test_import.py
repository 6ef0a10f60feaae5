"""`topolab import`: a PyTorch model as an operator-graph file, which plans without torch;
bad input is one line, exit 2, and leaves no file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from planner.model.graph_file import read_graph
from topolab.cli import main

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests/fixtures/models/tiny.py"


def test_import_writes_a_graph_that_plans(tmp_path, capsys):
    out = tmp_path / "tiny.json"
    assert main(["import", f"{TINY}:build_meta", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    g = read_graph(out)
    assert f"{g.params:,} parameters" in printed and f"wrote {out}" in printed
    scenario = tmp_path / "s.toml"
    scenario.write_text('[workload]\ngraph = "tiny.json"\n[parallelism]\nstrategy = "data"\n')
    assert main(["plan", str(scenario)]) == 0
    assert "imported from" in capsys.readouterr().out


def test_a_failing_import_is_one_line_and_leaves_nothing(tmp_path, capsys):
    out = tmp_path / "g.json"
    assert main(["import", f"{TINY}:build_raises", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "build_raises() raised RuntimeError" in err
    assert list(tmp_path.iterdir()) == []


def test_a_bad_graph_file_is_one_line_naming_the_field(tmp_path, capsys):
    (tmp_path / "g.json").write_text('{"format": "topolab.opgraph/1", "name": "m", "batch": 1, "ops": [{"name": "a"}]}')
    (tmp_path / "s.toml").write_text('[workload]\ngraph = "g.json"\n')
    assert main(["plan", str(tmp_path / "s.toml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"topolab: {tmp_path / 's.toml'}: workload.graph: {tmp_path / 'g.json'}: ops[0].kind: missing"


def test_an_untraceable_model_is_one_line_on_stderr_not_torchs_graph_dump(tmp_path):
    """torch.export prints a failed trace's partial graph to stderr (26 lines for a branch on
    a tensor's value); the command says only why, on one line (a process, so torch's own
    writes to the real stderr are seen too)."""
    out = tmp_path / "g.json"
    done = subprocess.run(
        [sys.executable, "-m", "topolab", "import", f"{TINY}:build_branchy", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "cannot be traced: data-dependent control flow" in lines[0] and "tiny.py:63" in lines[0]
    assert done.stdout == "" and not out.exists()
