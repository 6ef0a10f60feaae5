"""`topolab run`: plan a scenario, emulate it, run training iterations, report.

The main job of the product. Steps, each visible on stderr:

1. plan the scenario (planner.build_plan) and turn one training iteration into a schedule
   (planner.iteration): compute waits dilated by the time scale, model-parallel transfers,
   bucketed gradient AllReduce overlapping the backward pass;
2. predict the iteration with the flow-level model of exactly that schedule (planner.predict);
3. build the emulated network (emulator.EmulatedNetwork: namespaces, HTB-shaped veths, static
   routes, host forwarding), start one worker per server inside its namespace
   (workers.Coordinator), run warm-up and timed iterations; every worker verifies every
   AllReduce and transfer of every iteration;
4. tear everything down (also on Ctrl-C / SIGTERM / errors) and write results.json,
   report.md and the plots, partial results included when interrupted.

Results survive even a SIGKILL: once the network is up, results.json is written with status
"running", and every iteration is appended to ``iterations.jsonl`` (one JSON object a line,
flushed and fsynced) as soon as it is measured; `topolab report DIR` renders such a folder,
marked incomplete.

Times are kept in emulated seconds and converted to the real cluster's milliseconds by the
time-scale factor (real link rate / emulated link rate).

Over 300 lines because the run's stages (prepare, emulate, calibrate, iterate, record) share
the one results document that a kill must leave consistent on disk; they stay together.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from contract.errors import RunError, UsageError
from planner import Scenario, load_scenario
from planner.zoo import get_model

from .calibrate import measure_op_overhead, zero_payload_twin
from .faults import add_fault_arguments, add_to_results, faults_of, injector_for
from .journal import ITERATIONS_FILE, RESULTS_FILE, IterationJournal
from .options import (
    MAX_ITERATIONS,
    MAX_PAYLOAD_SCALE,
    MAX_WAIT_S,
    MIN_PAYLOAD_SCALE,
    bounded_float,
    bounded_int,
    check_output_dir,
    require_root,
)
from .prediction import compute_seconds, plan_dict, predict_run, prepare, scenario_rates
from .progress import Progress
from .report import summarize, write_report

RESULTS_FORMAT = "topolab.results/1"


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
    add_job_arguments(parser)
    add_fault_arguments(parser)
    parser.add_argument(
        "--run-dir", default=None, metavar="DIR", help="where the run lock and state file live (default: /run/topolab)"
    )
    parser.add_argument(
        "--machines",
        metavar="HOST,...",
        help="emulate over these machines (Mininet Cluster Edition; overrides [emulation] machines, docs/cluster.md)",
    )


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """Options `run` and `compare` share."""
    parser.add_argument(
        "--iterations",
        type=bounded_int(1, MAX_ITERATIONS),
        metavar="N",
        help=f"timed iterations, 1..{MAX_ITERATIONS} (default: [run] iterations)",
    )
    parser.add_argument(
        "--payload-scale",
        type=bounded_float(MIN_PAYLOAD_SCALE, MAX_PAYLOAD_SCALE, low_inclusive=True),
        metavar="F",
        help=f"multiply every transfer size, {MIN_PAYLOAD_SCALE:g}..{MAX_PAYLOAD_SCALE:g} (default: [run] payload_scale)",
    )
    parser.add_argument(
        "--wait",
        type=bounded_float(0.0, MAX_WAIT_S, low_inclusive=True),
        default=0.0,
        metavar="SECONDS",
        help="wait up to SECONDS for another topolab network to finish (default: fail at once)",
    )


def write_results(results: dict[str, Any], out_dir: Path, report: bool = True) -> Path:
    """results.json (with its summary), then report.md and the plots unless ``report`` is off."""
    results["summary"] = summarize(results)
    add_to_results(results, None)  # the per-phase figures of a run with faults
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / RESULTS_FILE).write_text(json.dumps(results, indent=1))
    path = write_report(results, out_dir) if report else None
    add_to_results(results, path)  # and its "Faults" section in the report
    return path or out_dir / RESULTS_FILE


def execute(
    s: Scenario,
    out_dir: Path,
    iterations: int | None = None,
    payload_scale: float | None = None,
    log: Callable[[str], None] | None = None,
    lock_wait_s: float = 0.0,
    run_dir: str | None = None,
    faults: list | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run a scenario end to end; once the network is up, always writes results (also partial
    ones) to ``out_dir``. A network another run holds is a `UsageError` and writes nothing.
    ``on_result`` sees the results of a complete run before the report and plots are drawn."""
    from emulator import EmulationBusyError, netem_present
    from emulator.counters import difference
    from workers.coordinator import Coordinator

    from .machines import open_network

    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    iterations = s.run.iterations if iterations is None else iterations
    plan, schedule, opts, emulated = prepare(s, payload_scale)
    injector = injector_for(faults or [], plan, schedule, iterations, log)  # bad faults: exit 2, nothing built
    want_netem = s.emulation.netem == "on" or (s.emulation.netem == "auto" and netem_present())
    log(
        f"[1/4] planned {plan.topology} for {plan.model} on {plan.servers} servers; one iteration is "
        f"{schedule.op_count()} ops; time scale x{emulated['time_scale']:g}"
    )
    results: dict[str, Any] = {
        "format": RESULTS_FORMAT,
        "status": "running",
        "scenario": asdict(s),
        "plan": plan_dict(plan),
        "emulation": dict(emulated),
        "iterations": [],
        "notes": list(plan.notes),
        "schedule": {
            "ops": schedule.op_count(),
            "streams_per_rank": len(schedule.programs[0]),
            "allreduce_buckets": schedule.params.get("buckets", 0),
            "payload_scale": opts.payload_scale,
            "bytes_sent_per_rank": schedule.bytes_sent(),
            "allreduce": schedule.params.get("allreduce", {}),
        },
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "environment": environment(s),
        "tolerance": s.run.tolerance,
    }
    results["predicted"] = predict_run(plan, schedule, scenario_rates(plan, s), want_netem)
    log(
        f"[2/4] predicted {results['predicted']['real_ms']:.3f} ms per iteration "
        f"({results['predicted']['emulated_s']:.3f} s emulated)"
    )
    compute = compute_seconds(schedule)
    network_up = False
    try:
        config = replace(s.emulation, lock_wait_s=lock_wait_s, run_dir=run_dir or s.emulation.run_dir)
        if s.emulation.machines and injector:
            raise UsageError("[[faults]] / --cable-down: not supported over several machines yet")
        with open_network(plan, config, log=log) as net:
            network_up = True
            results["emulation"].update(net.facts)  # the network as built: its time scale and MTU
            results["emulation"]["netem"] = net.netem
            if not net.netem:
                results["notes"].append(
                    "link latency not emulated (no netem in this kernel): "
                    "the prediction models it as a per-hop software cost"
                )
            write_results(results, out_dir, report=False)  # status "running": what a SIGKILL leaves
            log(
                f"[3/4] emulated network up in {net.facts.get('build_s', 0):.2f} s "
                f"({len(plan.links)} cables at {net.link_mbps:g} Mbit/s, MTU {net.mtu}); starting workers"
            )
            hosts = [net.host_address(i) for i in range(plan.servers)]
            spawn = lambda rank, argv: net.popen(rank, argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)  # noqa: E731
            twin = zero_payload_twin(plan, get_model(s.workload.model), opts)
            plane_sources = [net.plane_addresses(i) for i in range(plan.servers)]
            cal = measure_op_overhead(
                twin,
                hosts,
                spawn,
                plan.path,
                timeout_s=s.run.timeout_s,
                plane_sources=plane_sources,
                plane_path=plan.network.plane_path if plan.allocation else None,
                control_relay=net.relay_control,
            )
            results["calibration"] = cal
            results["predicted"] = predict_run(plan, schedule, net.rates, net.netem, cal["op_overhead_s"])
            if injector:
                repredict = lambda p: predict_run(p, schedule, net.rates, net.netem, cal["op_overhead_s"])  # noqa: E731
                injector.start(net, repredict, results["predicted"])
                results["faults"] = injector.applied
            write_results(results, out_dir, report=False)
            log(
                f"      measured worker cost {cal['op_overhead_s'] * 1e6:.0f} us per op (zero-payload twin: "
                f"{cal['twin_seconds'] * 1e3:.1f} ms); prediction now {results['predicted']['real_ms']:.3f} ms"
            )
            with (
                Coordinator(
                    schedule.to_dict(),
                    hosts,
                    spawn=spawn,
                    timeout_s=s.run.timeout_s,
                    plane_sources=plane_sources,
                    control_relay=net.relay_control,
                ) as coord,
                IterationJournal(out_dir / ITERATIONS_FILE) as journal,
            ):
                bar = Progress(s.run.warmup + iterations, "iterations")
                counters_before = net.cable_tx_bytes() if not s.run.warmup else {}
                for i in range(s.run.warmup + iterations):
                    warm = i < s.run.warmup
                    if i == s.run.warmup and s.run.warmup:
                        counters_before = net.cable_tx_bytes()  # the timed iterations' bytes only
                    if injector and not warm:
                        injector.before(i - s.run.warmup)  # faults due now: cable down, reroute
                    res = coord.run_iteration(i)
                    progress = (
                        f"{'warm-up' if warm else 'timed'} {res.time_s:.3f} s "
                        f"{'verified' if res.ok else 'VERIFY FAILED'}"
                    )
                    if warm and res.ok:
                        bar.step(progress)
                        continue
                    record = {
                        "index": i - s.run.warmup,
                        "warmup": warm,
                        "measured_s": res.time_s,
                        "measured_real_ms": res.time_s / net.time_scale * 1e3,
                        "compute_real_ms": max(compute) / net.time_scale * 1e3,
                        "verified": res.ok,
                        "errors": res.mismatches[:10],
                    }
                    if injector:
                        injector.annotate(record)
                    results["iterations"].append(record)
                    journal.append(record)  # on disk before the progress line: a kill now keeps it
                    bar.step(progress)
                    if not res.ok:
                        raise RunError(f"iteration {i} failed verification: {res.mismatches[:1]}")
                bar.done()
                timed = sum(1 for it in results["iterations"] if not it["warmup"])
                results["measured"] = {
                    "link_bytes": difference(net.cable_tx_bytes(), counters_before, timed),
                    "link_bytes_note": "wire bytes (payload and headers) per timed iteration, from tx counters",
                }
        results["emulation"]["teardown_s"] = net.facts.get("teardown_s")
        results["status"] = "complete"
    except EmulationBusyError as err:
        if network_up:
            raise
        raise UsageError(str(err)) from None
    except KeyboardInterrupt:
        results["status"] = "interrupted"
        results["error"] = "interrupted by the user or SIGTERM; partial results"
        raise
    except Exception as err:
        results["status"] = "failed"
        results["error"] = f"{type(err).__name__}: {err}"
        raise
    finally:
        if network_up:
            write_results(results, out_dir, report=False)
            if results["status"] == "complete" and on_result:
                on_result(results)  # the result first; the plots take a few seconds
            report = write_results(results, out_dir)
            log(f"[4/4] results in {out_dir}/{RESULTS_FILE}, report in {report}")
    return results


def result_line(name: str, results: dict[str, Any]) -> str:
    """The one line a run ends with: measured, predicted, error, verification."""
    summ = summarize(results)
    return (
        f"{name}: measured {summ.get('median_real_ms', float('nan')):.3f} ms per iteration "
        f"(median of {summ['iterations']}), predicted {results['predicted']['real_ms']:.3f} ms, "
        f"error {100 * summ.get('error', float('nan')):.1f}%, "
        f"verification {'passed' if summ['verified'] else 'FAILED'}"
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
        started = json.loads(previous.read_text()).get("started", "")
    except (OSError, ValueError):
        started = ""
    stamp = started[:19].replace("-", "").replace(":", "").replace("T", "-") or time.strftime("%Y%m%d-%H%M%S")
    target = out.with_name(f"{out.name}-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = out.with_name(f"{out.name}-{stamp}-{n}")
    out.rename(target)
    return target


def ensure_network_free(run_dir: str | None, lock_wait_s: float) -> None:
    """Fail at once, before planning, when another topolab network holds the run lock (a
    race with a run starting now is still caught, later, by the emulator's own lock)."""
    from emulator import EmulationBusyError, EmulationConfig
    from emulator.state import RunLock

    if lock_wait_s > 0:
        return  # the emulator waits for the lock
    folder = run_dir or EmulationConfig().run_dir
    if not Path(folder, "lock").exists():
        return
    probe = RunLock(folder)
    try:
        probe.acquire(0.0)
    except EmulationBusyError as err:
        raise UsageError(str(err)) from None
    probe.release()


def run_run(args: argparse.Namespace) -> int:
    s = load_scenario(args.scenario)
    if args.machines is not None:
        from .machines import machines_from_flag

        s = replace(s, emulation=replace(s.emulation, machines=machines_from_flag(args.machines)))
    out = check_output_dir(default_out(s) if args.out is None else args.out, "--out")
    require_root("run")  # before --run-dir: /run is root's
    if args.run_dir is not None:
        check_output_dir(args.run_dir, "--run-dir")
    ensure_network_free(args.run_dir, args.wait)
    if args.out is None:
        kept = keep_previous(out)
        if kept is not None:
            print(f"topolab: the previous results in {out} are now in {kept}", file=sys.stderr)
    faults = faults_of(s.faults, args.cable_down, args.no_reroute)
    results = execute(
        s,
        out,
        args.iterations,
        args.payload_scale,
        lock_wait_s=args.wait,
        run_dir=args.run_dir,
        faults=faults,
        on_result=lambda res: print(result_line(s.name, res), flush=True),
    )
    summ = results["summary"]
    print(f"report: {out / 'report.md'}")
    if not summ["verified"]:
        return 1
    if summ.get("error_over_tolerance"):
        print(
            f"topolab: prediction error {100 * summ['error']:.1f}% is above the scenario's tolerance "
            f"{100 * summ['tolerance']:.0f}% (run.tolerance): see the report",
            file=sys.stderr,
        )
        return EXIT_OVER_TOLERANCE
    return 0


EXIT_OVER_TOLERANCE = 3  # ran and verified, but the prediction missed by more than run.tolerance


def environment(s: Scenario) -> dict[str, Any]:
    """What a reader needs to reproduce the run: the code's commit, the kernel, the CPUs, and a
    hash of the scenario file as it was read."""
    import hashlib
    import platform
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", ""
    try:
        scenario_sha256 = hashlib.sha256(Path(s.source).read_bytes()).hexdigest()
    except OSError:
        scenario_sha256 = ""
    from topolab import __version__

    return {
        "topolab": __version__,
        "commit": (commit + ("+changes" if dirty else "")) or "unknown (not a git checkout)",
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "scenario_sha256": scenario_sha256,
    }
