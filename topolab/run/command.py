"""`topolab run`: plan a scenario, emulate it, run training iterations, report.

The command's flags, its results folder (`default_out`, `keep_previous`: a previous run is
kept, never overwritten) and its one closing line; the run itself is the service
`topolab.run.measured_run.execute`, shared with `topolab compare` and the benchmarks.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from contract.errors import RunError
from contract.files import FileInputError, read_capped_text
from planner import Scenario, load_scenario
from planner.scenario import with_overrides

from ..common.network import add_network_arguments, network_config, network_flags, refuse_machines
from ..common.options import add_job_arguments, add_link_mbps_argument, check_output_dir
from ..results.journal import RESULTS_FILE
from ..results.junit import add_junit_argument, junit_path, recorded, run_cases, write_command_suite
from ..results.run_results import MAX_RESULTS_BYTES, RunResults
from .faults import add_fault_arguments, faults_of
from .measured_run import (
    EXIT_OVER_TOLERANCE,
    FAULTS_OVER_MACHINES,
    ensure_network_free,
    execute,
    with_closing_warning,
)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "scenario",
        nargs="?",
        default="scenarios/topoopt-12.toml",
        help="scenario TOML file (default: scenarios/topoopt-12.toml)",
    )
    parser.add_argument(
        "--out", metavar="DIR", help="where results.json, report.md and plots go (default: results/<scenario name>)"
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="also write trace.json (Chrome trace event format, for Perfetto or chrome://tracing): the last timed "
        "iteration as the workers measured it, every op of each rank on its streams, beside the prediction of the "
        "same iteration; the report draws it as timeline.png (at scale: the first ranks only)",
    )
    add_job_arguments(parser)
    add_link_mbps_argument(parser, auto=True)
    add_fault_arguments(parser)
    add_network_arguments(parser)
    add_junit_argument(parser)


def result_line(name: str, results: RunResults) -> str:
    """The one line a run ends with: measured, predicted, error, verification."""
    summ, nan = results.summarize(), float("nan")
    return (
        f"{name}: measured {nan if summ.median_real_ms is None else summ.median_real_ms:.3f} ms per iteration "
        f"(median of {summ.iterations}), predicted {results.predicted.real_ms if results.predicted else nan:.3f} ms, "
        f"error {100 * (nan if summ.error is None else summ.error):.1f}%, "
        f"verification {'passed' if summ.verified else 'FAILED'}"
    )


def default_out(s: Scenario) -> Path:
    return Path("results") / s.name


def keep_previous(out: Path) -> Path | None:
    """A results folder that already holds a run is renamed after that run's start time
    (``results/topoopt-12`` -> ``results/topoopt-12-20261123-154512``), never overwritten."""
    previous = out / RESULTS_FILE
    if not previous.exists():
        return None
    try:
        started = json.loads(read_capped_text(previous, MAX_RESULTS_BYTES, "results document")).get("started", "")
    except (FileInputError, ValueError, RecursionError, AttributeError):
        started = ""
    stamp = started[:19].replace("-", "").replace(":", "").replace("T", "-") or time.strftime("%Y%m%d-%H%M%S")
    target = out.with_name(f"{out.name}-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = out.with_name(f"{out.name}-{stamp}-{n}")
    out.rename(target)
    return target


def run_run(args: argparse.Namespace) -> int:
    started, started_at = time.monotonic(), time.time()
    junit = junit_path(args)
    s = load_scenario(args.scenario)
    if args.link_mbps is not None:
        s = with_overrides(s, emulation={"link_mbps": args.link_mbps})
    out = check_output_dir(default_out(s) if args.out is None else args.out, "--out")
    flags = network_flags(args, "run")
    if flags.machines is not None:  # the scenario recorded in results.json is the one that ran
        s = replace(s, emulation=replace(s.emulation, machines=flags.machines))
    faults = faults_of(s.faults, args.cable_down, args.no_reroute)
    if faults:  # execute says it too; here it can name --machines when that was given
        refuse_machines(network_config(s.emulation, flags), flags, FAULTS_OVER_MACHINES)
    ensure_network_free(args.run_dir, args.wait)
    if args.out is None:
        kept = keep_previous(out)
        if kept is not None:
            print(f"topolab: the previous results in {out} are now in {kept}", file=sys.stderr)
    run_dir = network_config(s.emulation, flags).run_dir

    def junit_report(results: RunResults | None, err: RunError | None = None) -> None:
        cases = run_cases(f"topolab.run.{s.name}", results, run_dir, err)
        write_command_suite(junit, "run", s.name, cases, started, {"scenario": args.scenario, "results": str(out)})

    try:
        results = execute(
            s,
            out,
            args.iterations,
            args.payload_scale,
            lock_wait_s=args.wait,
            run_dir=args.run_dir,
            faults=faults,
            on_result=lambda res: print(result_line(s.name, res), flush=True),
            trace=args.trace,
        )
    except RunError as err:
        junit_report(recorded(out, started_at), err)
        raise
    junit_report(results)
    summ = results.summarize()
    print(with_closing_warning(f"report: {out / 'report.md'}", results))
    if not summ.verified:
        return 1
    cpu_note = results.cpu_bound_note()
    if cpu_note:
        print(f"topolab: {cpu_note}", file=sys.stderr)
    if summ.error_over_tolerance and summ.error is not None:
        message = (
            f"topolab: prediction error {100 * summ.error:.1f}% is above the scenario's tolerance "
            f"{100 * results.tolerance:.0f}% (run.tolerance): see the report"
        )
        print(with_closing_warning(message, results), file=sys.stderr)
        return EXIT_OVER_TOLERANCE
    return 0
