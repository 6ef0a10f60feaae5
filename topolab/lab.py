"""`topolab lab`: the course exercises in ``labs/`` and their checkers.

    topolab lab list
    topolab lab check N [--solution | --module PATH.py] [--emulate]

Exercise N lives in ``labs/NN-<name>/``: README.md, ``starter/<file>.py`` (the student's
file), ``solution/<file>.py`` and ``check.py``. The student's code is loaded from a module
path (the hook): ``--module PATH.py`` (default: the exercise's ``starter/<file>.py``;
``--solution`` loads the reference solution), so nothing of the package is ever edited.

``check.py`` defines ``TITLE``, ``STUDENT_FILE`` and ``check(student, emulate) ->
list[str]``: the problems found, each with a hint, empty when the student's code is right.
`check` prints ``PASS`` (exit 0) or ``FAIL`` and the problems (exit 1); an exception in the
student's code is a problem too (its line in the student's file), never a traceback; an
error of the emulated network (busy, not root) is the command's one-line error instead.
Checkers run against the planner only, fast; ``--emulate`` adds a run on the emulated
network where the exercise has one (root).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType

from contract.errors import TopolabError, UsageError

LABS_DIR = Path(__file__).resolve().parent.parent / "labs"
# errors of these packages are the machine's (network busy, no root), not the student's code
ENVIRONMENT_ERROR_PACKAGES = ("emulator", "workers")
MAX_SHOWN_PROBLEMS = 8  # a wrong answer usually fails many cases alike; the first few say it


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


def student_error(err: BaseException, student_path: Path) -> str:
    """One line: where in the student's file the exception came from, and what it was."""
    frames = [
        f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename).resolve() == student_path.resolve()
    ]
    where = f"{student_path.name} line {frames[-1].lineno}: " if frames else ""
    return f"{where}{type(err).__name__}: {err}"


def run_check(number: int, module_path: Path | None = None, solution: bool = False, emulate: bool = False) -> list[str]:
    """Problems of the student's code for exercise ``number`` (empty: PASS)."""
    folder = exercises().get(number)
    if folder is None:
        raise UsageError(f"N {number}: no such exercise (topolab lab list shows {sorted(exercises())})")
    checker = load_module(folder / "check.py", f"topolab_lab_check_{number}")
    if module_path is None:
        module_path = folder / ("solution" if solution else "starter") / checker.STUDENT_FILE
    if not module_path.is_file():
        raise UsageError(f"--module {str(module_path)!r}: no such file")
    try:
        student = load_module(module_path, f"topolab_lab_student_{number}")
        return list(checker.check(student, emulate))
    except Exception as err:
        if isinstance(err, TopolabError) or type(err).__module__.split(".")[0] in ENVIRONMENT_ERROR_PACKAGES:
            raise  # bad input, or the emulated network could not run (e.g. busy): one line, exit 1 or 2
        return [student_error(err, module_path)]  # the student's code failed: that is the answer


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
            checker = load_module(folder / "check.py", f"topolab_lab_check_{number}")
            print(f"{number:2d}  {folder.name:<28} {checker.TITLE}")
        return 0
    t0 = time.perf_counter()
    module = Path(args.module) if args.module else None
    problems = run_check(args.number, module, args.solution, args.emulate)
    elapsed = time.perf_counter() - t0
    if not problems:
        print(f"PASS exercise {args.number} ({elapsed:.1f} s)")
        return 0
    print(f"FAIL exercise {args.number}: {len(problems)} problem(s)")
    for problem in problems[:MAX_SHOWN_PROBLEMS]:
        print(f"  - {problem}")
    if len(problems) > MAX_SHOWN_PROBLEMS:
        print(f"  ... and {len(problems) - MAX_SHOWN_PROBLEMS} more")
    sys.stdout.flush()
    return 1
