"""Every import in the product resolves, function-local ones included: a module or name that
another change renamed or removed fails here, not when a rarely taken path first runs."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("contract", "planner", "emulator", "workers", "topolab", "topolab_torch")


def _imports() -> list[tuple[str, str, str]]:
    """(file, module, name) of every ``from X import name`` in the packages, relative ones resolved."""
    out = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            here = ".".join(parts[:-1] if parts[-1] == "__init__" else parts[:-1])
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom):
                    continue
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                if module.split(".")[0] in PACKAGES:
                    out += [(str(path.relative_to(REPO)), module, alias.name) for alias in node.names]
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_every_import_of_ours_resolves(package: str) -> None:
    if package == "topolab_torch":
        pytest.importorskip("torch")
    missing = []
    for where, module, name in _imports():
        if not where.startswith(package + "/"):
            continue
        try:
            imported = importlib.import_module(module)
        except ImportError as err:
            missing.append(f"{where}: {module} ({err})")
            continue
        if name != "*" and not hasattr(imported, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{where}: {module}.{name}")
    assert not missing, missing


def test_planning_a_topoopt_scenario_imports_no_scipy_networkx_or_torch() -> None:
    """The heavy libraries are imported only by the functions that need them: a TopoOpt plan
    (the default job) pays for none of them, so `topolab plan` of 1,024 servers stays fast
    (`benchmarks/cli_speed.py`). scipy alone costs about a second to import."""
    import subprocess
    import sys

    probe = (  # the command a user runs, summary and all (its output goes to /dev/null)
        "import contextlib, os, sys\n"
        "from topolab.cli import main\n"
        "with open(os.devnull, 'w') as out, contextlib.redirect_stdout(out):\n"
        "    assert main(['plan', sys.argv[1]]) == 0\n"
        "print(' '.join(m for m in ('scipy', 'networkx', 'torch') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(REPO / "scenarios" / "topoopt-12.toml")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip() == "", f"planning imported {done.stdout.strip()}"
