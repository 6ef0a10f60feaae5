"""topolab/ stays by feature: one folder a feature (its command module and the services only it
uses), the shared results/ and common/ under them, and few modules at the top.

pyproject.toml's import-linter contract keeps the features apart (one layer of independent
siblings between the dispatcher and results/, common/); these tests keep that contract equal
to the folders `topolab.cli.COMMANDS` dispatches to, so a new feature cannot escape it.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from topolab.cli import COMMANDS

REPO = Path(__file__).resolve().parents[2]
TOPOLAB = REPO / "topolab"
SHARED = ["results", "common"]  # under the features, in this order
MAX_TOP_LEVEL_MODULES = 8


def _feature_contract() -> dict:
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    [contract] = [c for c in contracts if c["type"] == "layers" and c.get("containers") == ["topolab"]]
    return contract


def _command_folders() -> set[str]:
    return {module.split(".")[1] for module, _help in COMMANDS.values()}


def test_every_command_lives_in_a_feature_folder():
    for name, (module, _help) in COMMANDS.items():
        parts = module.split(".")
        assert len(parts) == 3 and parts[0] == "topolab", f"{name}: {module} is not topolab.<feature>.<module>"
        assert (TOPOLAB / parts[1] / f"{parts[2]}.py").is_file(), f"{name}: no {module}"
        assert parts[1] not in SHARED, f"{name}: a command belongs in a feature folder, not in {parts[1]}/"


def test_the_contract_keeps_exactly_the_command_folders_apart():
    """The contract's layers: the dispatcher, the features as independent siblings (exactly the
    folders of cli.COMMANDS' modules), then results/ and common/."""
    layers = _feature_contract()["layers"]
    assert layers[0] == "cli" and layers[2:] == SHARED
    features = [f.strip() for f in layers[1].split("|")]
    assert sorted(features) == sorted(_command_folders())


def test_every_folder_is_a_feature_or_shared():
    folders = {p.name for p in TOPOLAB.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == _command_folders() | set(SHARED)


def test_few_modules_at_the_top_of_topolab():
    top = sorted(p.name for p in TOPOLAB.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_each_folder_says_what_it_is_in_three_lines_and_imports_nothing():
    """A folder's __init__.py is its docstring alone: importing a feature stays cheap, and a reader
    learns what it does and where to start reading."""
    for folder in sorted(_command_folders() | set(SHARED)):
        tree = ast.parse((TOPOLAB / folder / "__init__.py").read_text())
        doc = ast.get_docstring(tree)
        assert doc, f"{folder}/__init__.py has no docstring"
        assert len(doc.splitlines()) <= 3, f"{folder}/__init__.py: more than three lines"
        assert len(tree.body) == 1, f"{folder}/__init__.py: code beside its docstring"
