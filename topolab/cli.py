"""The `topolab` command line: one subcommand per job, errors as one line with exit code 2."""

from __future__ import annotations

import argparse
import importlib
import sys

from planner import ScenarioError

# subcommand -> (module, help). Each module has add_<name>_arguments(parser) and run_<name>(args).
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("topolab.plan_cmd", "plan a scenario: strategy, topology, routes; print a summary or JSON"),
    "run": ("topolab.run", "plan, emulate and run training iterations; write results.json, report.md and plots"),
    "compare": ("topolab.compare", "run the same job on several topologies and compare them side by side"),
    "collective": ("topolab.collective", "nccl-tests style AllReduce benchmark on the emulated network"),
    "verify": ("topolab.verify", "build the emulated network and check reachability, paths and link goodput"),
    "shell": ("topolab.shell", "open Mininet's CLI on the emulated network of a scenario (h0 ping h6, ...)"),
    "clean": ("topolab.clean", "remove what a killed topolab run left behind (only topolab's own)"),
    "sweep": ("topolab.sweep", "iteration time per model and topology at scale, with the flow-level model"),
}


class UsageError(Exception):
    """Bad input found after argument parsing; printed as one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="topolab",
        description="Co-optimize network topology and parallelization for distributed DNN training, "
        "then prove the plan on an emulated network.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in COMMANDS.items():
        mod = importlib.import_module(module)
        p = sub.add_parser(name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
        getattr(mod, f"add_{name}_arguments")(p)
        p.set_defaults(_module=mod, _name=name)
    return parser


def _input_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [ScenarioError, UsageError]
    try:
        from emulator import EmulationInputError  # raised for plans the machine cannot emulate

        errors.append(EmulationInputError)
    except ImportError:
        pass
    return tuple(errors)


def _runtime_errors() -> tuple[type[BaseException], ...]:
    """Failures of a run that deserve one clear line, not a traceback (busy lock, a worker
    that died, a link that failed its shaping check)."""
    errors: list[type[BaseException]] = []
    try:
        from emulator import EmulationError

        errors.append(EmulationError)
    except ImportError:
        pass
    try:
        from workers.coordinator import WorkerFailure

        errors.append(WorkerFailure)
    except ImportError:
        pass
    return tuple(errors)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(getattr(args._module, f"run_{args._name}")(args) or 0)
    except _input_errors() as err:
        print(f"topolab {args._name}: {err}", file=sys.stderr)
        return 2
    except _runtime_errors() as err:
        print(f"topolab {args._name}: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"topolab {args._name}: interrupted", file=sys.stderr)
        return 130
