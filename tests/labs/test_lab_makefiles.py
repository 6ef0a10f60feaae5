"""The exercises' Makefiles: one file (labs/lab.mk) in every folder, working inside the
checkout and in a folder copied out of it, with a one-line message when topolab is nowhere."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from topolab.lab.command import LABS_DIR, exercises

EXERCISES = sorted(exercises())
MAKE = shutil.which("make")
BARE_PATH = "/usr/bin:/bin"  # make and sh, no topolab
pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")


def make(target: str, folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [MAKE, "-s", target], cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def environment(**changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TOPOLAB"}
    env.update(changes)
    return env


def shim(folder: Path) -> Path:
    """A ``topolab`` command in ``folder`` running this interpreter's topolab."""
    folder.mkdir()
    script = folder / "topolab"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m topolab "$@"\n')
    script.chmod(0o755)
    return folder


def test_every_exercise_has_the_same_makefile():
    shared = (LABS_DIR / "lab.mk").read_text()
    for number, folder in exercises().items():
        assert (folder / "Makefile").read_text() == shared, f"exercise {number}: cp labs/lab.mk {folder.name}/Makefile"


def test_make_in_an_exercise_folder_of_the_checkout_calls_the_checker():
    folder = exercises()[5]
    env = environment(TOPOLAB=f"{sys.executable} -m topolab")
    solution = make("solution", folder, env)
    assert solution.returncode == 0 and "PASS exercise 5" in solution.stdout, solution.stderr
    starter = make("check", folder, env)
    assert starter.returncode != 0 and "FAIL exercise 5" in starter.stdout


def test_in_the_checkout_its_own_topolab_is_found():
    if not (LABS_DIR.parent / ".venv" / "bin" / "topolab").exists():
        pytest.skip("this checkout has no .venv")
    done = make("solution", exercises()[2], environment(PATH=BARE_PATH))
    assert done.returncode == 0 and "PASS exercise 2" in done.stdout, done.stderr


@pytest.mark.parametrize("number", EXERCISES)
def test_a_copied_exercise_finds_topolab_or_says_how_in_one_line(number, tmp_path):
    if shutil.which("topolab", path=BARE_PATH):
        pytest.skip(f"a topolab on {BARE_PATH}")
    copy = tmp_path / "my-lab"
    shutil.copytree(exercises()[number], copy)
    # topolab from TOPOLAB (odd exercises) or from PATH (even ones)
    if number % 2:
        env = environment(TOPOLAB=f"{sys.executable} -m topolab")
    else:
        env = environment(PATH=f"{shim(tmp_path / 'bin')}:{BARE_PATH}")
    found = make("check", copy, env)
    assert f"FAIL exercise {number}: " in found.stdout, found.stderr
    assert found.returncode == 2 and "Error 1" in found.stderr and "127" not in found.stderr
    # from nowhere: one line saying how, make's exit 2, nothing run
    nowhere = make("check", copy, environment(PATH=BARE_PATH))
    assert nowhere.returncode == 2 and nowhere.stdout == ""
    lines = nowhere.stderr.splitlines()
    assert len(lines) == 1 and "topolab not found" in lines[0] and "TOPOLAB=" in lines[0] and "PATH" in lines[0]
    wrong = make("check", copy, environment(PATH=BARE_PATH, TOPOLAB=str(tmp_path / "absent")))
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "no such command" in wrong.stderr
