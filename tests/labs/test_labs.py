"""Every exercise's checker fails on its starter/ and passes on its solution/ (planner only,
fast); the emulated checks run only with TOPOLAB_LAB_EMULATE=1 (root)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from topolab.cli import main
from topolab.lab import LABS_DIR, exercises, run_check

EXERCISES = sorted(exercises())
MIN_EXERCISES = 6


def test_the_course_has_its_exercises_each_complete():
    assert len(EXERCISES) >= MIN_EXERCISES
    for number, folder in exercises().items():
        for part in ("README.md", "Makefile", "check.py", "starter", "solution"):
            assert (folder / part).exists(), f"exercise {number}: {part} missing"
        readme = (folder / "README.md").read_text()
        for section in ("## Goal", "## Background", "## Steps", "## What to observe", "## Questions"):
            assert section in readme, f"exercise {number}: README has no {section!r}"


@pytest.mark.parametrize("number", EXERCISES)
def test_starter_fails_and_solution_passes(number):
    assert run_check(number) != [], f"exercise {number}: the starter passes its checker"
    assert run_check(number, solution=True) == [], f"exercise {number}: the solution fails its checker"


def test_cli_prints_pass_or_fail_with_exit_codes(capsys):
    assert main(["lab", "check", "2", "--solution"]) == 0
    assert capsys.readouterr().out.startswith("PASS exercise 2")
    assert main(["lab", "check", "2"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL exercise 2") and "diameter" in out and "hint" in out


def test_student_module_hook_and_bad_inputs(tmp_path, capsys):
    wrong = tmp_path / "mine.py"
    wrong.write_text("def select_strides(n, d):\n    return [2] * (d // 2)\n")
    assert main(["lab", "check", "2", "--module", str(wrong)]) == 1
    assert "gcd" in capsys.readouterr().out
    assert main(["lab", "check", "99"]) == 2
    assert main(["lab", "check", "2", "--module", str(tmp_path / "absent.py")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "N 99" in err and "--module" in err


def test_make_check_in_an_exercise_folder_calls_the_checker():
    folder = exercises()[5]
    env = dict(os.environ, TOPOLAB=f"{sys.executable} -m topolab")
    solution = subprocess.run(
        ["make", "-s", "solution"], cwd=folder, env=env, capture_output=True, text=True, timeout=60
    )
    assert solution.returncode == 0 and "PASS" in solution.stdout, solution.stderr
    starter = subprocess.run(["make", "-s", "check"], cwd=folder, env=env, capture_output=True, text=True, timeout=60)
    assert starter.returncode != 0 and "FAIL" in starter.stdout


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TOPOLAB_LAB_EMULATE") != "1", reason="emulated checks: set TOPOLAB_LAB_EMULATE=1")
def test_ring_allreduce_solution_runs_on_the_emulator():
    assert LABS_DIR.is_dir()
    assert run_check(3, solution=True, emulate=True) == []
