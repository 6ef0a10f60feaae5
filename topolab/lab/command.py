"""`topolab lab`: the course exercises in ``labs/`` and their checkers.

    topolab lab list
    topolab lab check N [--solution | --module PATH.py] [--emulate]

Exercise N lives in ``labs/NN-<name>/``: README.md (titled ``# Exercise N: ...``),
``starter/<file>.py`` (the student's file), ``solution/<file>.py``, ``check.py`` and the
Makefile every exercise shares (``labs/lab.mk``, copied verbatim). The student's code is
loaded from a module path (the hook): ``--module PATH.py`` (default: the exercise's
``starter/<file>.py``; ``--solution`` loads the reference solution), so nothing of the
package is ever edited.

``check.py`` defines ``TITLE``, ``STUDENT_FILE``, ``FUNCTIONS`` (the functions the student
writes, as the exercise names them: ``"allreduce_seconds(nbytes)"``), optionally ``HINT``
(shown once after the problems, not counted as one) and ``check(student, emulate) ->
list[str]``: the problems found, empty when the student's code is right. `check` prints
``PASS`` (exit 0) or ``FAIL`` and the problems (exit 1); a function missing from the
student's file is named as the exercise names it, and an exception in the student's code
is a problem too (its line in the student's file), never a traceback; an error of the
emulated network (busy, not root) is the command's one-line error instead. Checkers run
against the planner only, fast; ``--emulate`` adds a run on the emulated network where the
exercise has one (root).

`allreduce_real_seconds` / `predicted_real_seconds`: the planner's prediction in the real
cluster's seconds, the one the exercises' checkers compare with (docs/algorithms.md
section 6).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import traceback
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

from contract.errors import TopolabError, UsageError
from contract.physics import time_scale

LABS_DIR = Path(__file__).resolve().parents[2] / "labs"
# errors of these packages are the machine's (network busy, no root), not the student's code
ENVIRONMENT_ERROR_PACKAGES = ("emulator", "workers")
MAX_SHOWN_PROBLEMS = 8  # a wrong answer usually fails many cases alike; the first few say it


@dataclass
class CheckResult:
    """What a checker found: ``problems`` (empty: PASS) and the exercise's ``hint``, which is
    shown after the problems and is not one of them."""

    problems: list[str]
    hint: str = ""

    @property
    def passed(self) -> bool:
        return not self.problems


def exercises(labs_dir: Path = LABS_DIR) -> dict[int, Path]:
    """Exercise number -> folder (``labs/03-ring-allreduce`` is exercise 3)."""
    found = {}
    for folder in sorted(labs_dir.glob("[0-9][0-9]-*")):
        if (folder / "check.py").is_file():
            found[int(folder.name[:2])] = folder
    return found


def load_module(path: Path, name: str) -> ModuleType:
    """Import a Python file by path under ``name`` (the student hook)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"--module {str(path)!r}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_checker(number: int) -> ModuleType:
    """Exercise ``number``'s ``check.py``."""
    folder = exercises().get(number)
    if folder is None:
        raise UsageError(f"N {number}: no such exercise (topolab lab list shows {sorted(exercises())})")
    return load_module(folder / "check.py", f"topolab_lab_check_{number}")


def student_error(err: BaseException, student_path: Path) -> str:
    """One line: where in the student's file the exception came from, and what it was."""
    frames = [
        f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename).resolve() == student_path.resolve()
    ]
    where = f"{student_path.name} line {frames[-1].lineno}: " if frames else ""
    return f"{where}{type(err).__name__}: {err}"


def missing_functions(student: ModuleType, functions: tuple[str, ...], shown: str) -> list[str]:
    """``"<shown> has no function f(x)"`` for every ``"f(x)"`` of ``functions`` the student's
    module does not define."""
    return [
        f"{shown} has no function {sig}" for sig in functions if not callable(getattr(student, sig.split("(")[0], None))
    ]


def run_check(
    number: int, module_path: Path | None = None, solution: bool = False, emulate: bool = False
) -> CheckResult:
    """What is wrong with the student's code for exercise ``number`` (no problems: PASS)."""
    checker = load_checker(number)
    folder = exercises()[number]
    if module_path is None:
        module_path = folder / ("solution" if solution else "starter") / checker.STUDENT_FILE
        shown = str(module_path.relative_to(LABS_DIR.parent))
    else:
        shown = str(module_path)
    if not module_path.is_file():
        raise UsageError(f"--module {str(module_path)!r}: no such file")
    try:
        student = load_module(module_path, module_path.stem)
        missing = missing_functions(student, tuple(checker.FUNCTIONS), shown)
        if missing:
            return CheckResult(missing)
        problems = list(checker.check(student, emulate))
    except Exception as err:
        if isinstance(err, TopolabError) or type(err).__module__.split(".")[0] in ENVIRONMENT_ERROR_PACKAGES:
            raise  # bad input, or the emulated network could not run (e.g. busy): one line, exit 1 or 2
        return CheckResult([student_error(err, module_path)])  # the student's code failed: that is the answer
    return CheckResult(problems, getattr(checker, "HINT", "") if problems else "")


@lru_cache(maxsize=8)
def _planned(scenario_path: str) -> tuple[Any, Any]:
    from planner import build_plan, load_scenario

    scenario = load_scenario(scenario_path)
    return scenario, build_plan(scenario)


def predicted_real_seconds(plan: Any, schedule: Any, link_mbps: float, mtu: int = 9000) -> float:
    """``planner.cost.predict`` of ``schedule`` on ``plan`` in the real cluster's seconds.

    Predicted on the links as they are emulated (each at ``link_mbps`` per ``plan.link_gbps``,
    TCP goodput at ``mtu``, the workers' reduce rate) with the plan's per-hop latency dilated
    by the time scale, as the emulator applies it, then divided by the time scale: the
    bandwidth and latency terms are the real cluster's, and the reduce term, the emulating
    machine's, shrinks by the time scale (docs/algorithms.md section 6)."""
    from planner.cost.predict import plan_network, predict

    scale = time_scale(plan.link_gbps, link_mbps)
    network = plan_network(plan, link_bps=link_mbps * 1e6, mtu=mtu, alpha_s=plan.latency_us * 1e-6 * scale)
    return predict(schedule, network).seconds / scale


def allreduce_real_seconds(scenario_path: str | Path, algorithm: str, nbytes: int) -> float:
    """`predicted_real_seconds` of one AllReduce of ``nbytes`` with ``algorithm``
    (``planner.collectives.from_plan``) on the plan of the scenario file, at its
    ``[emulation]`` link rate and MTU."""
    from planner.collectives.from_plan import allreduce_for_plan

    scenario, plan = _planned(str(scenario_path))
    emulation = scenario.emulation
    return predicted_real_seconds(plan, allreduce_for_plan(plan, algorithm, nbytes), emulation.link_mbps, emulation.mtu)


def add_lab_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="lab_command", metavar="ACTION", required=True, parser_class=type(parser))
    sub.add_parser("list", help="list the exercises")
    check = sub.add_parser("check", help="check a student's solution of exercise N: PASS or what is wrong")
    check.add_argument("number", type=int, metavar="N", help="exercise number (topolab lab list)")
    which = check.add_mutually_exclusive_group()
    which.add_argument("--solution", action="store_true", help="check the reference solution instead of starter/")
    which.add_argument("--module", metavar="PATH.py", help="the student's file (default: the exercise's starter/ file)")
    check.add_argument("--emulate", action="store_true", help="also run on the emulated network (root; slower)")


def run_lab(args: argparse.Namespace) -> int:
    if args.lab_command == "list":
        for number, folder in exercises().items():
            print(f"{number:2d}  {folder.name:<28} {load_checker(number).TITLE}")
        return 0
    t0 = time.perf_counter()
    module = Path(args.module) if args.module else None
    result = run_check(args.number, module, args.solution, args.emulate)
    elapsed = time.perf_counter() - t0
    if result.passed:
        print(f"PASS exercise {args.number} ({elapsed:.1f} s)")
        return 0
    problems = result.problems
    print(f"FAIL exercise {args.number}: {len(problems)} problem(s)")
    for problem in problems[:MAX_SHOWN_PROBLEMS]:
        print(f"  - {problem}")
    if len(problems) > MAX_SHOWN_PROBLEMS:
        print(f"  ... and {len(problems) - MAX_SHOWN_PROBLEMS} more")
    if result.hint:
        print(f"  {result.hint}")
    sys.stdout.flush()
    return 1
