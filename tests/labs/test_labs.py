"""Every exercise's checker fails on its starter/ and passes on its solution/ (planner only,
fast); the checkers' messages; the emulated checks run only with TOPOLAB_LAB_EMULATE=1 (root)."""

from __future__ import annotations

import ast
import os
import re

import pytest

from topolab.cli import main
from topolab.lab.command import LABS_DIR, exercises, load_checker, run_check

EXERCISES = sorted(exercises())
COURSE = list(range(1, 11))  # TopoOpt's ideas (1-7), forest packing, LIBRA, placement (8-10)


def test_the_course_has_its_exercises_each_complete():
    assert EXERCISES == COURSE
    for number, folder in exercises().items():
        for part in ("README.md", "Makefile", "check.py", "starter", "solution"):
            assert (folder / part).exists(), f"exercise {number}: {part} missing"
        readme = (folder / "README.md").read_text()
        # the shared Makefile reads the exercise number from this title
        assert readme.startswith(f"# Exercise {number}: "), f"exercise {number}: README title"
        for section in ("## Goal", "## Background", "## Steps", "## What to observe", "## Questions"):
            assert section in readme, f"exercise {number}: README has no {section!r}"
        checker = load_checker(number)
        # ... and takes the student's file as the one Python file in starter/
        assert [p.name for p in (folder / "starter").glob("*.py")] == [checker.STUDENT_FILE]


@pytest.mark.parametrize("number", EXERCISES)
def test_the_functions_a_checker_names_are_the_solutions_and_the_course_tables(number):
    """FUNCTIONS ("f(a, b)") is what a missing function is called: the solution defines each
    with exactly those parameters, and the instructor page's table lists them."""
    checker = load_checker(number)
    folder = exercises()[number]
    tree = ast.parse((folder / "solution" / checker.STUDENT_FILE).read_text())
    defined = {f.name: [a.arg for a in f.args.args] for f in tree.body if isinstance(f, ast.FunctionDef)}
    row = next(line for line in (LABS_DIR / "README.md").read_text().splitlines() if line.startswith(f"| {number} |"))
    for sig in checker.FUNCTIONS:
        name, params = re.fullmatch(r"(\w+)\((.*)\)", sig).groups()
        assert defined.get(name) == [p.strip() for p in params.split(",")], sig
        assert f"`{sig}`" in row, (sig, row)


@pytest.mark.parametrize("number", EXERCISES)
def test_starter_fails_and_solution_passes(number):
    assert not run_check(number).passed, f"exercise {number}: the starter passes its checker"
    result = run_check(number, solution=True)
    assert result.passed and result.problems == [], f"exercise {number}: the solution fails: {result.problems}"


def test_cli_prints_pass_or_fail_with_exit_codes(capsys):
    assert main(["lab", "check", "2", "--solution"]) == 0
    assert capsys.readouterr().out.startswith("PASS exercise 2")
    assert main(["lab", "check", "2"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL exercise 2") and "diameter" in out and "hint" in out


def test_the_hint_is_shown_once_after_the_problems_and_not_counted(capsys):
    checker = load_checker(1)
    assert main(["lab", "check", "1"]) == 1
    lines = capsys.readouterr().out.splitlines()
    counted = int(re.fullmatch(r"FAIL exercise 1: (\d+) problem\(s\)", lines[0]).group(1))
    listed = [line for line in lines[1:] if line.startswith("  - ")]
    # 3 setups x 2 sizes, all wrong, and the starter's cabling (part 2), which lacks dimension 3
    assert counted == len(listed) == len(run_check(1).problems) == 7
    assert lines[-1] == f"  {checker.HINT}" and sum(checker.HINT in line for line in lines) == 1
    assert run_check(1).hint == checker.HINT and run_check(1, solution=True).hint == ""


def test_a_missing_function_is_named_as_the_exercise_names_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "starter").mkdir()
    (tmp_path / "starter" / "compare.py").write_text("def allreduce_second(nbytes):\n    return {}\n")
    assert main(["lab", "check", "1", "--module", "starter/compare.py"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "FAIL exercise 1: 1 problem(s)",
        "  - starter/compare.py has no function allreduce_seconds(nbytes)",
    ]
    (tmp_path / "sweep.py").write_text("def plot(data, path):\n    pass\n")
    problems = run_check(6, tmp_path / "sweep.py").problems
    assert problems == [
        f"{tmp_path / 'sweep.py'} has no function predicted_vs_measured(scenario_path, algorithm, sizes, collective_doc)"
    ]


def test_student_module_hook_and_bad_inputs(tmp_path, capsys):
    wrong = tmp_path / "mine.py"
    wrong.write_text("def select_strides(n, d):\n    return [2] * (d // 2)\n")
    assert main(["lab", "check", "2", "--module", str(wrong)]) == 1
    assert "gcd" in capsys.readouterr().out
    broken = tmp_path / "broken.py"
    broken.write_text("def select_strides(n, d):\n    return n / 0\n")
    assert run_check(2, broken).problems == ["broken.py line 2: ZeroDivisionError: division by zero"]
    assert main(["lab", "check", "99"]) == 2
    assert main(["lab", "check", "2", "--module", str(tmp_path / "absent.py")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "N 99" in err and "--module" in err


def test_lab_list_names_every_exercise_with_its_title(capsys):
    assert main(["lab", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [int(line.split()[0]) for line in lines] == COURSE
    for line, (number, folder) in zip(lines, exercises().items()):
        assert folder.name in line and line.endswith(load_checker(number).TITLE)


OTHER_SYSTEMS = {number: load_checker(number).FUNCTIONS for number in (8, 9, 10)}


@pytest.mark.parametrize(
    ("number", "function"), [(n, sig.split("(")[0]) for n, sigs in OTHER_SYSTEMS.items() for sig in sigs]
)
def test_each_starter_function_of_the_other_systems_fails_on_its_own(number, function, tmp_path):
    """Exercises 8-10: the solution with only ``function`` taken from the starter fails, so
    every TODO is one the checker sees (not only the first one a student meets)."""
    folder = exercises()[number]
    name = load_checker(number).STUDENT_FILE
    solution = (folder / "solution" / name).read_text()
    starter = (folder / "starter" / name).read_text()
    todo = next(node for node in ast.parse(starter).body if isinstance(node, ast.FunctionDef) and node.name == function)
    mixed = tmp_path / name
    mixed.write_text(f"{solution}\n\n{ast.get_source_segment(starter, todo)}\n")
    assert not run_check(number, mixed).passed


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TOPOLAB_LAB_EMULATE") != "1", reason="emulated checks: set TOPOLAB_LAB_EMULATE=1")
def test_ring_allreduce_solution_runs_on_the_emulator():
    assert LABS_DIR.is_dir()
    assert run_check(3, solution=True, emulate=True).passed


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TOPOLAB_LAB_EMULATE") != "1", reason="emulated checks: set TOPOLAB_LAB_EMULATE=1")
@pytest.mark.parametrize("number", [8, 9])
def test_the_other_systems_solutions_measure_on_the_emulator(number, capsys):
    """Exercise 8 measures the rings and the forest, 9 LIBRA's split and equal shares: both
    verified by the workers, each printed beside its prediction."""
    assert run_check(number, solution=True, emulate=True).passed
    measured = [line for line in capsys.readouterr().out.splitlines() if "measured" in line]
    assert len(measured) == 2 and all(line.endswith("verified") for line in measured)
