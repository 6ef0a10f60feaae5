"""`topolab compare`: the same job on several topologies, side by side, in one invocation.

Each topology runs through exactly the same path as `topolab run` (`topolab.run.measured_run`)
into ``OUT/<topology>/``; then a table and a bar plot compare them (`topolab.results.comparison`:
the time axis, each arm's scenario, the traffic facts, the table and the plot).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from contract.errors import RunError, UsageError
from contract.files import write_file
from planner import ScenarioError, build_plan, load_scenario
from planner.scenario import TOPOLOGIES

from ..common.network import add_network_arguments, network_config, network_flags
from ..common.options import add_job_arguments, check_output_dir
from ..common.plan_text import bandwidth_of
from ..results.comparison import scenario_for, time_axis, traffic_facts, write_compare
from ..results.junit import Case, add_junit_argument, junit_path, recorded, run_cases, write_command_suite
from ..run.measured_run import EXIT_OVER_TOLERANCE, ensure_network_free, execute


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML file; its [topology] kind is replaced in turn")
    parser.add_argument(
        "--topologies",
        default="topoopt,switch,expander",
        help=f"comma-separated kinds among {', '.join(TOPOLOGIES)} (default: topoopt,switch,expander)",
    )
    parser.add_argument("--out", metavar="DIR", help="output folder (default: results/compare-<scenario name>)")
    add_job_arguments(parser)
    add_network_arguments(parser)
    add_junit_argument(parser)


def run_compare(args: argparse.Namespace) -> int:
    started, started_at = time.monotonic(), time.time()
    junit = junit_path(args)
    kinds = [k.strip() for k in args.topologies.split(",") if k.strip()]
    bad = [k for k in kinds if k not in TOPOLOGIES]
    if bad or not kinds:
        raise UsageError(f"--topologies: {','.join(bad) or '(empty)'} is not among {', '.join(TOPOLOGIES)}")
    base = load_scenario(args.scenario)
    scenarios = {}
    for k in kinds:  # validate all first
        try:
            scenarios[k] = scenario_for(base, k)
        except ScenarioError as err:
            raise UsageError(f"--topologies {k}: {err}") from None
    out = check_output_dir(Path("results") / f"compare-{base.name}" if args.out is None else args.out, "--out")
    flags = network_flags(args, "compare")
    if flags.machines is not None:
        scenarios = {
            k: replace(s, emulation=replace(s.emulation, machines=flags.machines)) for k, s in scenarios.items()
        }
    ensure_network_free(args.run_dir, args.wait)
    axis = time_axis({k: (build_plan(s).link_gbps, s.emulation.link_mbps) for k, s in scenarios.items()})
    print(axis.line(), flush=True)
    rows = []
    cases: list[Case] = []  # --junit: every arm's checks, one test suite (topolab.results.junit)

    def junit_report() -> None:
        properties = {"scenario": args.scenario, "results": str(out)}
        write_command_suite(junit, "compare", base.name, cases, started, properties)

    for k, s in scenarios.items():
        print(f"== {k}", flush=True)
        classname, run_dir = f"topolab.compare.{base.name}.{k}", network_config(s.emulation, flags).run_dir
        try:
            res = execute(
                s,
                out / k,
                args.iterations,
                args.payload_scale,
                lock_wait_s=args.wait,
                run_dir=args.run_dir,
                reference_gbps=axis.reference_gbps[k],
            )
        except RunError as err:
            cases.extend(run_cases(classname, recorded(out / k, started_at), run_dir, err))
            junit_report()
            raise
        cases.extend(run_cases(classname, res, run_dir))
        summary = res.summarize()
        rows.append(
            {
                "topology": k,
                "bandwidth": bandwidth_of(res.plan),
                "time_scale": res.emulation.time_scale,
                "reference_gbps": res.emulation.network.get("reference_gbps"),
                "measured_ms": summary.median_real_ms,
                "predicted_ms": res.predicted.real_ms if res.predicted else None,
                "error": summary.error,
                "tolerance": res.tolerance,
                "over_tolerance": bool(summary.error_over_tolerance),
                "worker_cost_share": res.worker_cost_share(),
                "verified": summary.verified,
                **traffic_facts(res),
            }
        )
    title = f"{base.workload.model} on {base.cluster.servers} servers, time scale x{axis.time_scale:g}"
    doc = {"scenario": str(args.scenario), "title": title, "axis": axis.to_dict(), "rows": rows}
    write_file(out / "compare.json", json.dumps(doc, indent=1))
    print(write_compare(out, doc))
    print(f"report: {out / 'compare.md'}")
    junit_report()
    if not all(r["verified"] for r in rows):
        return 1
    missed = [r["topology"] for r in rows if r["over_tolerance"]]
    if missed:
        print(
            f"topolab: the prediction missed its tolerance on {', '.join(missed)}: those arms' comparison is "
            "not backed by the model (see the verdict column)",
            file=sys.stderr,
        )
        return EXIT_OVER_TOLERANCE
    return 0
