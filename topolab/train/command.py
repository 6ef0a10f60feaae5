"""`topolab train`: run a PyTorch training script on the emulated network, one rank per server.

    topolab train SCENARIO [--backend topolab|gloo|topolab,gloo] [--out DIR] -- COMMAND [ARGS...]

Plans the scenario, builds its emulated network and starts COMMAND once per server inside
its host, as torchrun would (`topolab.train.jobs`). With ``--backend topolab`` the script's
``init_process_group(os.environ["TOPOLAB_BACKEND"])`` gives it the ``topolab`` backend
(topolab_torch): its collectives run the plan's schedules, which this command makes on
demand and predicts (`topolab.train.schedules`); with ``gloo``, PyTorch's own. Both
(``--backend topolab,gloo``) run in turn on the same network. Rank 0's output is streamed;
every rank's goes to the results folder, with each rank's steps and collectives; the report
(`topolab.train.report`) puts the communication measured beside the prediction, per bucket
size, and Gloo's beside topolab's (docs/train.md).

Exit codes: 0 when every rank of every job exited 0; 1 when a rank failed (one line naming
it and the end of its stderr, every other rank ended) or never called init_process_group;
2 for bad input (a command not found, a world size the scenario does not have, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from contract.emulation import EmulationConfig
from contract.errors import UsageError
from contract.files import write_file

from ..common.network import add_network_arguments, network_config, network_flags, refuse_machines
from ..common.options import MAX_TIMEOUT_S, add_link_mbps_argument, bounded_float, bounded_int, make_output_dir

BACKENDS = ("topolab", "gloo")
TRAIN_FORMAT = "topolab.train/1"
DEFAULT_INIT_TIMEOUT_S = 180.0  # 12 ranks importing torch on 2 busy cores take about a minute


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML file (its plan's network is emulated)")
    parser.add_argument(
        "--backend",
        default="topolab",
        metavar="B[,B]",
        help="topolab (the plan's collectives), gloo (PyTorch's), or topolab,gloo: both in turn (default: topolab)",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="new folder for the ranks' output, results.json and report.md "
        "(default: results/train-<scenario>-<time>); an existing one is refused unless --force",
    )
    parser.add_argument("--force", action="store_true", help="write into --out even if it exists")
    parser.add_argument(
        "--world-size",
        type=bounded_int(1, 1 << 20),
        metavar="N",
        help="the number of ranks the job expects: refused unless the scenario has that many servers",
    )
    add_link_mbps_argument(parser)
    parser.add_argument(
        "--init-timeout",
        type=bounded_float(0.0, MAX_TIMEOUT_S),
        default=DEFAULT_INIT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"fail when a rank has not called init_process_group this long after the start "
        f"(default: {DEFAULT_INIT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--timeout",
        type=bounded_float(0.0, MAX_TIMEOUT_S),
        default=300.0,
        metavar="SECONDS",
        help="topolab backend: fail when a peer sends nothing for this long while awaited (default: 300)",
    )
    add_network_arguments(parser)
    parser.add_argument(
        "command", nargs="*", metavar="-- COMMAND [ARGS...]", help="what to run on every server (after --)"
    )


def parse_backends(text: str) -> list[str]:
    names = [b.strip() for b in text.split(",") if b.strip()]
    if not names or any(b not in BACKENDS for b in names) or len(set(names)) != len(names):
        raise UsageError(f"--backend {text!r}: expected topolab, gloo or topolab,gloo")
    return names


def resolve_command(command: list[str]) -> list[str]:
    """The command without the leading ``--``, its program found on the caller's PATH."""
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("no command: give it after --, e.g. topolab train SCENARIO -- python train.py")
    program = command[0]
    found = shutil.which(program)
    if found is None:
        where = "no such executable file" if os.sep in program else "not found on PATH"
        raise UsageError(f"command {program!r}: {where}")
    return [found, *command[1:]]


def run_train(args: argparse.Namespace) -> int:
    from planner import build_plan, load_scenario

    from ..common.options import results_folder

    backends = parse_backends(args.backend)
    command = resolve_command(list(args.command))
    scenario = load_scenario(args.scenario)
    servers = int(scenario.cluster.servers)
    if args.world_size is not None and args.world_size != servers:
        raise UsageError(
            f"--world-size {args.world_size}: {args.scenario} has {servers} servers, one rank each; "
            f"use a scenario with {args.world_size} servers"
        )
    flags = network_flags(args, "train")
    changes = {} if args.link_mbps is None else {"link_mbps": args.link_mbps}
    config = network_config(scenario.emulation, flags, **changes)
    refuse_machines(config, flags, "topolab train runs on this machine only (its ranks share this machine's files)")
    out = results_folder(args.out, scenario.name, args.force, prefix="train")
    plan = build_plan(scenario)
    make_output_dir(out)
    doc = train(plan, scenario.name, config, backends, command, out, args.init_timeout, args.timeout)
    print(f"results in {out}/ (report.md, results.json, rank-*.stdout/stderr per job)", file=sys.stderr)
    return 0 if doc["status"] == "ok" else 1


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def train(
    plan: Any,
    name: str,
    config: EmulationConfig,
    backends: list[str],
    command: list[str],
    out: Path,
    init_timeout_s: float,
    timeout_s: float,
) -> dict[str, Any]:
    """Build the network, run the job once per backend, write results.json and report.md."""
    from ..common.network import open_network
    from .jobs import JobOptions, control_endpoint, run_job
    from .report import calibration_seconds, compare, format_report, gloo_communication, job_summary
    from .schedules import ControlServer, ScheduleService

    n = int(plan.servers)
    doc: dict[str, Any] = {
        "format": TRAIN_FORMAT,
        "scenario": name,
        "topology": plan.topology,
        "servers": n,
        "command": command,
        "backends": backends,
        "status": "running",
        "jobs": {},
    }
    with open_network(plan, config, log=log) as net:
        doc.update(link_mbps=net.link_mbps, time_scale=net.time_scale, mtu=net.mtu)
        log(
            f"emulated {plan.topology} network up: {n} servers, {len(plan.links)} cables at {net.link_mbps:g} "
            f"Mbit/s, time scale x{net.time_scale:g}"
        )
        for backend in backends:
            folder = out / backend if len(backends) > 1 else out
            service = ScheduleService(plan, net.rates, net.netem)
            private, endpoint = control_endpoint()
            server = ControlServer(endpoint, n, service)
            server.start()
            opts = JobOptions(backend, command, folder, init_timeout_s, timeout_s, stream=sys.stdout)
            t0 = time.monotonic()
            try:
                run = run_job(net, n, opts, endpoint, log)
            except BaseException as exc:
                doc["status"] = "failed"
                doc["failure"] = {
                    "backend": backend,
                    "message": str(exc),
                    "rank": getattr(exc, "rank", None),
                    "detected_at": getattr(
                        exc, "detected_at", time.monotonic()
                    ),  # CLOCK_MONOTONIC, as the ranks' files
                }
                _write(out, doc, format_report)
                raise
            finally:
                server.stop()
                shutil.rmtree(private, ignore_errors=True)
            gloo = {m.nbytes: m.gloo_predicted_s for m in service.made.values() if m.gloo_predicted_s is not None}
            calibration_s = calibration_seconds(folder, n)
            op_overhead_s = service.op_overhead(calibration_s)
            summary = job_summary(folder, n, run.wall_s, gloo, service.predictions(op_overhead_s))
            summary["calibration"] = {"twin_s": calibration_s, "op_overhead_s": op_overhead_s}
            summary["gloo_predicted_s"] = gloo_communication(summary)
            doc["jobs"][backend] = summary
            log(
                f"  {backend}: {len(summary['steps'])} steps, median {_ms(summary['step_s'])}, {time.monotonic() - t0:.1f} s"
            )
    comparison = compare(doc["jobs"])
    if comparison:
        doc["comparison"] = comparison
    doc["status"] = "ok"
    report = _write(out, doc, format_report)
    print(report, end="")
    return doc


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.3f} s"


def _write(out: Path, doc: dict[str, Any], format_report: Any) -> str:
    write_file(out / "results.json", json.dumps(doc, indent=2) + "\n")
    report = format_report(doc) if doc["jobs"] else f"# topolab train: {doc['scenario']} ({doc['status']})\n"
    write_file(out / "report.md", report)
    return report
