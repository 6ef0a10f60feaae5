"""Model files are code (issue 45, finding 3; issue 48, items 2 and 3): a scenario's
``model = "file.py:factory"`` is resolved relative to the scenario's folder only, never the
current folder; ``"package.module:factory"`` is imported from the installed environment only,
never from the current folder or the scenario's; the factory's own folder is on the import
path while it is imported (a helper module beside it imports) and the path is restored
afterwards; no bytecode is written beside it; ``topolab import X.py:build --out X.py`` is
refused before anything runs; and ``--help`` says that a model file runs as the user who runs
topolab.

The commands run in a new process with ``python -m topolab``, which puts the current folder
first on ``sys.path``: the strictest place to show that it is not searched. A decoy in the
current folder writes a marker file when it runs, so "it never ran" is checked, not assumed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from planner.model.model_import import import_model
from topolab.cli import main

REPO = Path(__file__).resolve().parents[2]
CLI_TIMEOUT_S = 60  # a new process importing torch and tracing a small model: a few seconds

MODEL = textwrap.dedent(
    """
    import torch
    from torch import nn


    def build():
        with torch.device("meta"):
            return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), (torch.randn(2, 4),)
    """
)
MODEL_PARAMS = 4 * 8 + 8 + 8 * 2 + 2  # 58
DECOY = textwrap.dedent(
    """
    from pathlib import Path

    Path({marker!r}).write_text("the decoy ran")
    raise SystemExit("the decoy ran")
    """
)
HELPER = textwrap.dedent(
    """
    from torch import nn


    def block(width):
        return nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 2))
    """
)
USES_HELPER = textwrap.dedent(
    """
    import torch

    from topolab_test_layers_beside import block  # a module beside this file


    def build():
        with torch.device("meta"):
            return block(8), (torch.randn(2, 4),)


    def build_lazily():
        from topolab_test_lazy_beside import block as lazy  # imported when the factory runs

        with torch.device("meta"):
            return lazy(8), (torch.randn(2, 4),)
    """
)


def _topolab(cwd: Path, argv: list[str], pythonpath: list[Path] = ()) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in (REPO, *pythonpath))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode would be written, were it not refused
    return subprocess.run(
        [sys.executable, "-m", "topolab", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        env=env,
    )


def _folders(tmp: Path) -> tuple[Path, Path, Path]:
    """(the scenario's folder, the current folder, the decoy's marker file)."""
    scenarios, here = tmp / "scenarios", tmp / "here"
    scenarios.mkdir()
    here.mkdir()
    return scenarios, here, tmp / "DECOY-RAN"


def _scenario(folder: Path, model: str) -> Path:
    path = folder / "s.toml"
    path.write_text(f'[workload]\nmodel = "{model}"\n[parallelism]\nstrategy = "data"\n')
    return path


def test_a_relative_model_file_is_the_one_beside_the_scenario_not_the_one_in_the_current_folder(tmp_path):
    scenarios, here, marker = _folders(tmp_path)
    (scenarios / "model.py").write_text(MODEL)
    (here / "model.py").write_text(DECOY.format(marker=str(marker)))
    done = _topolab(here, ["plan", str(_scenario(scenarios, "model.py:build"))])
    assert done.returncode == 0, done.stderr
    assert f"{MODEL_PARAMS} parameters" in done.stdout
    assert not marker.exists()
    assert not (scenarios / "__pycache__").exists()  # root writes nothing beside a model file


def test_a_model_file_only_in_the_current_folder_is_not_found(tmp_path):
    scenarios, here, marker = _folders(tmp_path)
    (here / "model.py").write_text(DECOY.format(marker=str(marker)))
    scenario = _scenario(scenarios, "model.py:build")
    done = _topolab(here, ["plan", str(scenario)])
    err = done.stderr.strip()
    assert done.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in done.stderr
    assert "workload.model" in err and f"{scenarios / 'model.py'}: no such file" in err
    assert not marker.exists()


def test_a_package_module_comes_from_the_environment_not_the_current_or_the_scenarios_folder(tmp_path):
    scenarios, here, marker = _folders(tmp_path)
    for folder in (scenarios, here):
        (folder / "topolab_test_decoy_model.py").write_text(DECOY.format(marker=str(marker)))
    scenario = _scenario(scenarios, "topolab_test_decoy_model:build")
    for cwd in (here, scenarios):
        done = _topolab(cwd, ["plan", str(scenario)])
        err = done.stderr.strip()
        assert done.returncode == 2 and len(err.splitlines()) == 1, done.stderr
        assert "topolab_test_decoy_model: no such module" in err
        assert not marker.exists()
    # the control: the same name installed (on the environment's path) imports and plans
    site = tmp_path / "site"
    site.mkdir()
    (site / "topolab_test_decoy_model.py").write_text(MODEL)
    done = _topolab(here, ["plan", str(scenario)], pythonpath=[site])
    assert done.returncode == 0, done.stderr
    assert f"{MODEL_PARAMS} parameters" in done.stdout and not marker.exists()


def test_a_model_file_imports_a_helper_beside_it_and_the_import_path_is_restored(tmp_path):
    folder = tmp_path / "mymodel"
    folder.mkdir()
    (folder / "topolab_test_layers_beside.py").write_text(HELPER)
    (folder / "topolab_test_lazy_beside.py").write_text(HELPER)
    (folder / "gpt.py").write_text(USES_HELPER)
    before = list(sys.path)
    try:
        for factory in ("build", "build_lazily"):
            graph = import_model(f"gpt.py:{factory}", folder)
            assert graph.params == MODEL_PARAMS
            assert sys.path == before
    finally:
        for name in ("topolab_test_layers_beside", "topolab_test_lazy_beside"):
            sys.modules.pop(name, None)
        sys.path[:] = before
    assert not (folder / "__pycache__").exists()


def test_a_model_file_with_a_helper_plans_from_the_command_line(tmp_path):
    scenarios, here, _ = _folders(tmp_path)
    (scenarios / "topolab_test_layers_beside.py").write_text(HELPER)
    (scenarios / "gpt.py").write_text(USES_HELPER)
    done = _topolab(here, ["plan", str(_scenario(scenarios, "gpt.py:build"))])
    assert done.returncode == 0, done.stderr
    assert f"{MODEL_PARAMS} parameters" in done.stdout


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
def test_import_out_onto_the_model_file_is_refused_and_the_file_unchanged(relative, tmp_path, monkeypatch, capsys):
    model = tmp_path / "gpt.py"
    model.write_text(MODEL)
    if relative:
        monkeypatch.chdir(tmp_path)
        argv = ["import", "gpt.py:build", "--out", "./gpt.py"]
    else:
        argv = ["import", f"{model}:build", "--out", str(model)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--out" in err and "input" in err
    assert model.read_text() == MODEL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpt.py"]  # nothing written, no temporary file


def test_import_out_onto_the_trace_or_a_trace_of_its_folder_is_refused(tmp_path, capsys):
    traces = tmp_path / "traces"
    traces.mkdir()
    for rank in (0, 1):
        (traces / f"mlp.{rank}.et").write_bytes(b"rank %d" % rank)
    for model, out in ((traces / "mlp.0.et", traces / "mlp.0.et"), (traces, traces / "mlp.1.et")):
        assert main(["import", str(model), "--out", str(out)]) == 2
        assert "--out" in capsys.readouterr().err
    assert [(traces / f"mlp.{r}.et").read_bytes() for r in (0, 1)] == [b"rank 0", b"rank 1"]


def test_help_says_a_model_file_runs_as_the_user_who_runs_topolab():
    for argv in (["--help"], ["run", "--help"], ["plan", "--help"]):
        done = subprocess.run(
            [sys.executable, "-m", "topolab", *argv],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400"},
        )
        assert done.returncode == 0
        assert "runs that Python code when it is loaded" in done.stdout and "root for run and train" in done.stdout
        assert "topolab import" in done.stdout
