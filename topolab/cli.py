"""The `topolab` command line: parse, dispatch to one module per subcommand, print errors as one line.

Only the chosen subcommand's module is imported (``topolab --help`` loads none of them), so
the command answers at once. Subcommands raise `contract.errors.UsageError` (bad input, exit
2) or `contract.errors.RunError` (a run that failed, exit 1); `main` prints either as one
line ``topolab: <message>`` and returns its exit code, never a traceback.

Each subcommand's module lives in a folder of its feature (``topolab/run/``, ``topolab/plan/``,
...; the folder's ``__init__.py`` says where to start reading) with the services only it uses;
what several features share is in ``topolab/results/`` (the results documents and their
reports) and ``topolab/common/`` (options, the network, the prediction). The import-linter
contract in pyproject.toml keeps the features apart.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from contract.errors import TopolabError, UsageError

from . import __version__

# subcommand -> (module, help). Each module has add_<name>_arguments(parser) and run_<name>(args).
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("topolab.plan.plan_command", "plan a scenario: strategy, topology, routes; print a summary or JSON"),
    "predict": (
        "topolab.plan.predict_command",
        "predict a scenario's iteration time (compute, exposed communication, phases); no root",
    ),
    "run": (
        "topolab.run.command",
        "plan, emulate and run training iterations; write results.json, report.md and plots",
    ),
    "report": (
        "topolab.report.command",
        "render the report and plots of a results folder: run (also killed), compare, collective, sweep",
    ),
    "compare": ("topolab.compare.command", "run the same job on several topologies and compare them side by side"),
    "collective": ("topolab.collective.command", "nccl-tests style AllReduce benchmark on the emulated network"),
    "verify": (
        "topolab.verify.verify_command",
        "build the emulated network and check reachability, paths and link goodput",
    ),
    "shell": ("topolab.shell.command", "open Mininet's CLI on the emulated network of a scenario (h0 ping h6, ...)"),
    "trace-route": (
        "topolab.verify.trace_route_command",
        "follow probes with the workers' 5-tuple hop by hop with scapy (TTL, interfaces) beside the planned route",
    ),
    "clean": ("topolab.clean.command", "remove what a killed topolab run left behind (only topolab's own)"),
    "sweep": ("topolab.sweep.command", "iteration time per model and topology at scale, with the flow-level model"),
    "lab": ("topolab.lab.command", "course exercises: list them, check a student's solution (PASS or what is wrong)"),
    "alloc": (
        "topolab.alloc.command",
        "LIBRA bandwidth split of a hierarchical network vs equal shares; --sweep [--measure]",
    ),
    "train": (
        "topolab.train.command",
        "run a PyTorch training script on the emulated network, one rank per server (--backend topolab|gloo)",
    ),
    "import": (
        "topolab.plan.import_command",
        "a PyTorch model (file.py:factory: runs its code, no root needed) or a Chakra trace as an "
        "operator-graph file for [workload] graph",
    ),
    "place": (
        "topolab.place.command",
        "place fused operator groups on servers jointly with bandwidth allocation; --run measures it",
    ),
    "export": (
        "topolab.export.command",
        "the plan as files for real servers and other tools: cabling, MSCCL and NCCL XML, ASTRA-sim; no root",
    ),
}

MODEL_CODE_NOTE = (
    "A scenario whose [workload] model is 'file.py:factory' or 'package.module:factory' runs that "
    "Python code when it is loaded, as the user running topolab (root for run and train); "
    "'topolab import' it first (no root) and name the graph file instead (docs/models.md)."
)
"""Said at the foot of ``topolab --help`` and of the ``--help`` of every subcommand that reads a scenario."""
NO_SCENARIO = ("report", "clean", "lab", "import")

AFTER_DASHES = ("train",)
"""Subcommands that take a command line of their own after ``--`` (in ``args.command``)."""
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are a `UsageError` (one line, exit 2) instead of usage text."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the top level takes no option values)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The full parser of the subcommand in ``argv``; the others only list their name and help."""
    parser = ArgumentParser(
        prog="topolab",
        description="Co-optimize network topology and parallelization for distributed DNN training, "
        "then prove the plan on an emulated network.",
        epilog=MODEL_CODE_NOTE,
    )
    parser.add_argument("--version", action="version", version=f"topolab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=ArgumentParser)
    argv = sys.argv[1:] if argv is None else argv
    chosen = _chosen_command(argv)
    if chosen is None:  # argparse would complain about the missing command before a bad option
        unknown = [arg for arg in argv if arg not in ("-h", "--help", "--version")]
        if unknown:
            raise UsageError(f"unrecognized argument {unknown[0]} (usage: topolab COMMAND ...; see topolab --help)")
    for name, (module_name, help_text) in COMMANDS.items():
        description = help_text[0].upper() + help_text[1:] + "."
        epilog = None if name in NO_SCENARIO else MODEL_CODE_NOTE
        p = sub.add_parser(name, help=help_text, description=description, epilog=epilog)
        if name == chosen:
            module = importlib.import_module(module_name)
            function = name.replace("-", "_")  # trace-route: add_trace_route_arguments
            getattr(module, f"add_{function}_arguments")(p)
            p.set_defaults(_run=getattr(module, f"run_{function}"))
    return parser


def _layer_error_code(err: BaseException) -> int | None:
    """Exit code of the emulator's and the workers' errors that do not (all) derive from
    `TopolabError` yet; looked up only in modules already loaded, so this costs no import.
    Another run holding the network lock is bad timing of the user's, not a failed run: 2."""
    emulator = sys.modules.get("emulator")
    if emulator is not None:
        if isinstance(err, (getattr(emulator, "EmulationInputError", ()), getattr(emulator, "EmulationBusyError", ()))):
            return 2
        if isinstance(err, getattr(emulator, "EmulationError", ())):
            return 1
    coordinator = sys.modules.get("workers.coordinator")
    if coordinator is not None and isinstance(err, getattr(coordinator, "WorkerFailure", ())):
        return 1
    return None


def _system_error_line(err: BaseException) -> str:
    if isinstance(err, RecursionError):
        return "input nested too deeply (recursion limit reached)"
    if isinstance(err, MemoryError):
        return "out of memory; use a smaller scenario (see docs/scenarios.md for the maxima)"
    if isinstance(err, UnicodeDecodeError):
        return f"input is not UTF-8 text: {err.reason} at byte {err.start}"
    if isinstance(err, OSError):
        where = f": {err.filename}" if err.filename else ""
        return f"{err.strerror or err}{where}"
    return str(err)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; returns its exit code (0 ok, 1 run failed, 2 bad input, 130 interrupted)."""
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        trailing = None
        if _chosen_command(argv) in AFTER_DASHES and "--" in argv:  # argparse's own "--" stops at the top parser
            cut = argv.index("--")
            argv, trailing = argv[:cut], argv[cut + 1 :]
        args = build_parser(argv).parse_args(argv)
        if trailing is not None:
            args.command = trailing
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print("topolab: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:
        code = _layer_error_code(err)
        if code is None and isinstance(err, TopolabError):
            code = err.exit_code
        if code is not None:
            print(f"topolab: {_one_line(str(err))}", file=sys.stderr)
            return code
        if isinstance(err, (OSError, RecursionError, MemoryError, UnicodeDecodeError)):
            print(f"topolab: {_one_line(_system_error_line(err))}", file=sys.stderr)
            return 1
        raise
