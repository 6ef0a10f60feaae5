"""`topolab collective`: an nccl-tests style AllReduce benchmark on the emulated network.

    topolab collective SCENARIO --algorithm ring|topoopt|tree|dbtree --bytes SIZES [--json] [--out DIR [--force]]
    topolab collective SCENARIO -b 1M -e 64M -f 2 ...       (nccl-tests' size flags)
    topolab collective SCENARIO ... --trace                 (a timeline per algorithm and size)

Prints nccl-tests' all_reduce_perf table (size, count, type, redop, root, time in us, algbw
and busbw in GB/s, #wrong; "# Avg bus bandwidth" per algorithm), in the planned cluster's
units (emulated time divided by the time scale), with progress and the time left on stderr.
Results go to a new folder (results.json, nccl-tests.txt, table.txt); an existing --out is
refused unless --force.

Plans the scenario, builds its emulated network (emulator.EmulatedNetwork), and for every
size and algorithm starts one worker per server in the server's namespace (workers.
Coordinator), runs warm-up and ``--repeat`` timed iterations, each verified by every worker.

``--trace``: per algorithm and size, the last timed iteration as the workers measured it
(every op's start and end, the clocks put on the driver's) beside the flow-level model's
prediction of the same schedule on the cables as built, in ``trace-<algorithm>-<size>.json``
(`topolab.results.trace_events.measured_trace`; Perfetto, chrome://tracing; docs/export.md).

Figures per row (reference section 5): time = median over the timed iterations of
max(t_end) - min(t_start) over ranks; algbw = S / time; busbw = algbw * 2 (n-1) / n;
ideal = 2 (n-1) S / (n * D) where D is the slowest server's total egress goodput: the emulated rate
of each of its links times the TCP maximum at the MTU (what HTB lets through after
Ethernet/IP/TCP headers: contract.physics.tcp_goodput_fraction), summed over its d links. That is the
lower bound for any AllReduce on the plan's topology with every interface busy.

Over 300 lines: the command's flags and their bounds, and the measurement loop that the
flags drive; the results and their nccl-tests formatting are in `collective_results`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contract.emulation import emulated_rates
from contract.errors import RunError
from contract.files import write_file
from planner.collectives.forest import per_direction
from planner.collectives.from_plan import ALGORITHMS, allreduce_schedule, choose_allreduce
from planner.collectives.msccl_xml import MAX_SUBS as MAX_GPUS_PER_SERVER  # the parser's GPUs per XML
from planner.collectives.msccl_xml import MSCCL_PREFIX
from planner.collectives.tree_packing import allreduce_bounds
from planner.collectives.trees import DEFAULT_SEGMENT_BYTES

from ..common.network import NetworkFlags, add_network_arguments, network_config, network_flags, open_network
from ..common.options import (
    MAX_TIMEOUT_S,
    add_link_mbps_argument,
    bounded_float,
    bounded_int,
    make_output_dir,
    results_folder,
)
from ..results.collective_results import (
    ALLTOALL,
    AlltoallResults,
    CollectiveEmulation,
    CollectiveInputError,
    CollectiveResults,
    SizeResult,
    SweepEstimate,
    format_nccl_tests,
    format_size,
    format_table,
    parse_size,
)
from ..results.junit import (
    add_junit_argument,
    junit_path,
    measurement_cases,
    nothing_left_case,
    of_collective,
    of_phase,
    run_cases,
    write_command_suite,
)
from ..results.trace_events import trace_json

# Largest --bytes buffer: every one of the n workers holds it twice (data and receive
# buffer), so 256M is already 6 GiB of memory on 12 emulated servers.
MAX_BUFFER_BYTES = 256 << 20
MAX_REPEAT = 1000


def parse_sizes(text: str) -> list[int]:
    """Sizes as a comma-separated list of sizes (``64M``) and doubling ranges (``1M..256M``):
    ``1M,16M`` -> [1M, 16M]; ``1M..4M,64M`` -> [1M, 2M, 4M, 64M] (repeats dropped)."""
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise CollectiveInputError(
            f"--bytes {text!r}: expected sizes or ranges separated by commas, such as 1M,16M or 1M..64M"
        )
    sizes: list[int] = []
    for item in items:
        if ".." in item:
            lo_text, _, hi_text = item.partition("..")
            sizes += geometric_sizes(parse_size(lo_text), parse_size(hi_text), 2, f"--bytes {item!r}")
        else:
            sizes += geometric_sizes(parse_size(item), parse_size(item), 2, f"--bytes {item!r}")
    return list(dict.fromkeys(sizes))


def geometric_sizes(lo: int, hi: int, factor: int, option: str) -> list[int]:
    """``lo``, ``lo * factor``, ... up to ``hi``, as nccl-tests' ``-b lo -e hi -f factor`` steps."""
    if hi < lo:
        raise CollectiveInputError(f"{option}: the range ends below its start")
    if hi > MAX_BUFFER_BYTES:
        raise CollectiveInputError(f"{option}: at most {format_size(MAX_BUFFER_BYTES)} (memory of n workers)")
    sizes = [lo]
    while sizes[-1] * factor <= hi:
        sizes.append(sizes[-1] * factor)
    return sizes


def sizes_of(args: argparse.Namespace) -> list[int]:
    """The buffer sizes to measure: ``--bytes`` (list and ranges) or nccl-tests' ``-b``/``-e``/``-f``
    (default 64M)."""
    if args.minbytes is None and args.maxbytes is None:
        if args.stepfactor is not None:
            raise CollectiveInputError("-f/--stepfactor: goes with -b/--minbytes and -e/--maxbytes")
        return parse_sizes(args.bytes or "64M")
    if args.bytes is not None:
        raise CollectiveInputError("--bytes and -b/-e: give the sizes one way, not both")
    lo = parse_size(args.minbytes or args.maxbytes, "-b/--minbytes")
    hi = parse_size(args.maxbytes or args.minbytes, "-e/--maxbytes")
    option = f"-b {args.minbytes or args.maxbytes} -e {args.maxbytes or args.minbytes}"
    return geometric_sizes(lo, hi, 2 if args.stepfactor is None else args.stepfactor, option)


def parse_algorithms(text: str) -> list[str]:
    """The algorithms ``--algorithm`` names: topolab's own, ``msccl:FILE`` (an MSCCL XML
    algorithm, docs/msccl.md), or all-to-all alone."""
    algs = [a.strip() for a in text.split(",") if a.strip()]
    bad = [a for a in algs if a not in (*ALGORITHMS, ALLTOALL) and not (a.startswith(MSCCL_PREFIX) and a[6:].strip())]
    if bad or not algs:
        raise CollectiveInputError(
            f"--algorithm {text!r}: expected one or more of {', '.join(ALGORITHMS)} or {MSCCL_PREFIX}FILE.xml "
            f"(comma separated), or {ALLTOALL} alone"
        )
    if ALLTOALL in algs and len(algs) > 1:
        raise CollectiveInputError(f"--algorithm {text!r}: {ALLTOALL} is measured alone")
    return algs


def msccl_choices(plan: Any, algorithms: Sequence[str], gpus_per_server: int) -> dict[str, Any]:
    """The AllReduce choice of every ``msccl:FILE`` of ``algorithms``: the XML read and
    checked, its GPUs on the plan's first servers (``gpus_per_server`` a server); a bad file
    is one line naming it (exit 2)."""
    from planner.collectives.from_plan import msccl_choice

    return {
        alg: msccl_choice(plan, alg.removeprefix(MSCCL_PREFIX), gpus_per_server)
        for alg in algorithms
        if alg.startswith(MSCCL_PREFIX)
    }


def parse_routings(text: str) -> list[str]:
    from .routing_phase import VARIANTS

    routings = [r.strip() for r in text.split(",") if r.strip()]
    if not routings or any(r not in VARIANTS for r in routings):
        raise CollectiveInputError(
            f"--routing {text!r}: expected one or more of {', '.join(VARIANTS)} (comma separated)"
        )
    return routings


def auto_segment(nbytes: int) -> int:
    """Tree pipelining segment: S/16 (each of dbtree's two trees gets >= 8 segments) clamped
    to 64 KiB .. 1 MiB (the authors' simulator uses 1 MiB), a multiple of 4 bytes."""
    return max(64 << 10, min(DEFAULT_SEGMENT_BYTES, nbytes // 16)) // 4 * 4


def ideal_allreduce_s(n: int, nbytes: int, egress_goodput_bps: float) -> float:
    """2 (n-1) S / (n D): reference section 5's bound, D in bits/s of goodput."""
    return 2 * (n - 1) * nbytes * 8 / (n * egress_goodput_bps)


def slowest_egress_bps(plan: Any, link_rate_bps: Sequence[float]) -> float:
    """The smallest total cable rate of any server: with cables of different rates the
    AllReduce bound is set by the slowest server, not by server 0."""
    return min(server_egress_bps(plan, link_rate_bps, v) for v in range(plan.servers))


def server_egress_bps(plan: Any, link_rate_bps: Sequence[float], server: int = 0) -> float:
    """Sum of the emulated rates of the cables at ``server`` (its d interfaces)."""
    return float(
        sum(rate for link, rate in zip(plan.links, link_rate_bps) if server in (link.a, link.b) and link.a != link.b)
    )


def measure(
    net: Any,
    plan: Any,
    algorithms: Sequence[str],
    sizes: Sequence[int],
    *,
    repeat: int = 5,
    warmup: int = 1,
    chunk_bytes: int = 1 << 20,
    segment_bytes: int | None = None,
    timeout_s: float = 30.0,
    log: Callable[[str], None] | None = None,
    traces: dict[str, dict[str, Any]] | None = None,
    cores: int | None = None,
    predictions: dict[tuple[str, int], float] | None = None,
    choices: Mapping[str, Any] | None = None,
) -> list[SizeResult]:
    """Run every (size, algorithm) on the emulated network ``net``; sizes outer, so the
    algorithms of one size are measured side by side in time (the machine is noisy).
    ``traces``: a dict that gets, per (size, algorithm), its trace file's name and document
    (`trace_of`); ``cores``: the processors the workers share, as the prediction beside the
    measured timeline takes them (`topolab.common.prediction.shared_cores`); ``predictions``: a dict
    that gets, per (algorithm, size), the flow-level model's time of its schedule on the
    cables as built (`predicted_on`, emulated seconds: what ``--junit`` holds the median to)."""
    from contract.physics import tcp_goodput_fraction

    from ..common.schedule_run import run_schedule_on
    from ..results.trace_events import trace_ranks

    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    n = int(plan.servers)
    goodput = slowest_egress_bps(plan, net.link_rate_bps) * tcp_goodput_fraction(net.mtu)
    results = []
    eta = SweepEstimate([size for size in sizes for _ in algorithms], warmup + repeat)
    capacities = per_direction(net.capacities)  # the cables as built: shaped rates, their MTU
    for size in sizes:
        packing_s = allreduce_bounds(capacities, n, size).packing_s
        for alg in algorithms:
            # the forest picks its own segments (planner.collectives.forest) unless --segment
            segment = segment_bytes or (None if alg == "forest" else auto_segment(size))
            # an MSCCL XML's choice is made once, with its GPUs per server (`msccl_choices`)
            choice = (choices or {}).get(alg) or choose_allreduce(plan, size, algorithm=alg)
            sched = allreduce_schedule(plan, choice, size, segment)
            if predictions is not None:
                predictions[(alg, size)] = predicted_on(net, plan, sched, cores)
            shape = {"shape": choice.shape, "why": choice.reason} if alg == "forest" else {}
            if shape:  # the forest chose trees or rings: say which and why
                log(f"  {alg} {format_size(size)}: {choice.shape} ({choice.reason})")
            ideal = ideal_allreduce_s(n, size, goodput)
            label = f"{alg} {format_size(size)}"

            def each(i: int, res: Any, label: str = label, ideal: float = ideal, size: int = size) -> None:
                eta.step(size)
                log(
                    f"  {label}: {'warm-up' if i < warmup else f'{i - warmup + 1}/{repeat}'} "
                    f"{res.time_s:.3f} s ({res.time_s / ideal:.3f}x ideal) "
                    f"{'verified' if res.ok else 'VERIFY FAILED'}; {eta.line()}"
                )

            run = run_schedule_on(
                net,
                sched.to_dict(),
                repeat=repeat,
                warmup=warmup,
                timeout_s=timeout_s,
                chunk_bytes=chunk_bytes,
                each=each,
                trace_ranks=trace_ranks(sched) if traces is not None else None,
            )
            times, ok, mismatches, cpu = run.times_s, run.verified, run.mismatches, run.cpu_s
            results.append(
                SizeResult(alg, size, n, times, ideal, ok, net.time_scale, mismatches[:5], cpu, packing_s, shape)
            )
            if traces is not None and run.traced is not None:
                name = f"trace-{re.sub(r'[^A-Za-z0-9._-]', '_', alg)}-{format_size(size)}.json"
                traces[name] = trace_of(net, plan, sched, run, cores, f"{alg} AllReduce of {format_size(size)}")
                results[-1].trace = name
    return results


def built_network(net: Any, plan: Any, cores: int | None) -> Any:
    """The flow-level model's network of ``net``'s cables as built (`planner.cost.predict.plan_network`),
    without the workers' cost per op, which `topolab collective` does not calibrate."""
    from planner.cost.predict import plan_network

    from ..common.prediction import network_args

    return plan_network(plan, **network_args(plan, net.rates, net.netem, 0.0, cores))


def predicted_on(net: Any, plan: Any, sched: Any, cores: int | None) -> float:
    """The flow-level model's time of ``sched`` on ``net``'s cables as built, emulated seconds."""
    from planner.cost.predict import predict

    return predict(sched, built_network(net, plan, cores)).seconds


def trace_of(net: Any, plan: Any, sched: Any, run: Any, cores: int | None, what: str) -> dict[str, Any]:
    """The trace of ``run``'s traced iteration (`topolab.common.schedule_run.Measured`: its first
    `topolab.results.trace_events.trace_ranks` ranks report every op) beside the flow-level model's
    replay of ``sched`` on ``net``'s cables as built, without the workers' cost per op (which
    `topolab collective` does not calibrate)."""
    from planner.cost.predict import predict_timeline

    from ..results.trace_events import measured_trace, trace_ranks

    pred, timeline = predict_timeline(sched, built_network(net, plan, cores), ranks=trace_ranks(sched))
    meta = {
        "timeline": f"the last timed iteration of topolab collective's {what}, measured by the workers, beside the "
        "flow-level model's prediction of the same schedule on the cables as built (the workers' cost per op "
        "not calibrated)",
        "iteration": len(run.times_s) - 1,
        "predicted_iteration_ms": pred.seconds / net.time_scale * 1e3,
    }
    return measured_trace(sched, run.traced.ranks, run.clocks, timeline, net.time_scale, meta)


def add_collective_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML file (its plan's topology is emulated)")
    parser.add_argument(
        "--algorithm",
        default="topoopt",
        metavar="ALG[,ALG...]",
        help=f"AllReduce algorithm(s): {', '.join(ALGORITHMS)}; ring = the "
        "plan's first ring, topoopt = all the plan's rings in both directions "
        "at once, tree = binary tree, dbtree = NCCL double binary tree; "
        f"msccl:FILE.xml: an MSCCL XML algorithm (docs/msccl.md), on the plan's first ngpus/G servers; "
        f"or {ALLTOALL}: one all-to-all phase under each --routing (default: topoopt)",
    )
    parser.add_argument(
        "--gpus-per-server",
        type=bounded_int(1, MAX_GPUS_PER_SERVER),
        default=1,
        metavar="G",
        help="with msccl:FILE: G of the XML's GPUs on one server, their steps between each other memory "
        "copies (default 1: a GPU is a server)",
    )
    parser.add_argument(
        "--bytes",
        default=None,
        metavar="SIZE",
        help="buffer sizes: a size such as 64M, a range 1M..256M doubling each step, or a comma-separated "
        "list of both, such as 1M,16M (K/M/G = 1024-based; default: 64M); "
        f"for {ALLTOALL}: bytes per pair (default: the workload's embedding all-to-all)",
    )
    parser.add_argument("-b", "--minbytes", metavar="SIZE", help="as nccl-tests: smallest size (with -e, -f)")
    parser.add_argument("-e", "--maxbytes", metavar="SIZE", help="as nccl-tests: largest size")
    parser.add_argument(
        "-f",
        "--stepfactor",
        type=bounded_int(2, 1024),
        metavar="F",
        help="as nccl-tests: multiply the size by F from -b up to -e (default: 2)",
    )
    parser.add_argument(
        "--routing",
        default="single,planned",
        metavar="R[,R...]",
        help=f"{ALLTOALL} only: single (destination routes), rates (per-destination HTB classes on the "
        "routes), multipath (the allocation's paths, no classes), planned (both) (default: single,planned)",
    )
    parser.add_argument(
        "--repeat",
        type=bounded_int(1, MAX_REPEAT),
        default=5,
        metavar="K",
        help="timed iterations per size and algorithm, after one warm-up (default: 5); the median is reported",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout instead of a table")
    add_link_mbps_argument(parser)
    parser.add_argument(
        "--chunk",
        default="1M",
        metavar="SIZE",
        help="wire chunk of the pipelined sends (default: 1M; 64K-4M all reach the TCP floor, larger costs less CPU)",
    )
    parser.add_argument(
        "--segment",
        default="auto",
        metavar="SIZE",
        help="pipelining segment of the tree algorithms; auto = S/16 clamped "
        "to 64K..1M, so even small buffers pipeline over the tree's depth "
        "(default: auto)",
    )
    parser.add_argument(
        "--timeout",
        type=bounded_float(0.0, MAX_TIMEOUT_S),
        default=30.0,
        metavar="SECONDS",
        help="a worker fails when a peer sends nothing for this long (default: 30)",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="new folder for results.json and the tables (default: results/collective-<scenario>-<time>); "
        "an existing folder is refused unless --force",
    )
    parser.add_argument("--force", action="store_true", help="write into --out even if it exists (files replaced)")
    parser.add_argument(
        "--trace",
        action="store_true",
        help="also write, per algorithm and size, trace-<algorithm>-<size>.json (Chrome trace event format, for "
        "Perfetto or chrome://tracing): the last timed iteration as the workers measured it beside its prediction",
    )
    add_network_arguments(parser)
    add_junit_argument(parser)


def run_collective(args: argparse.Namespace) -> int:
    """Entry point of `topolab collective`; returns 0 when every iteration verified."""
    from planner import build_plan, load_scenario

    started = time.monotonic()
    junit = junit_path(args)
    algorithms = parse_algorithms(args.algorithm)
    if algorithms == [ALLTOALL]:
        return run_alltoall(args)
    sizes = sizes_of(args)
    chunk = parse_size(args.chunk, "--chunk")
    segment = None if args.segment == "auto" else parse_size(args.segment, "--segment")
    if not 4 << 10 <= chunk <= 64 << 20:
        raise CollectiveInputError(f"--chunk {args.chunk}: must be between 4K and 64M")
    if segment is not None and segment > MAX_BUFFER_BYTES:
        raise CollectiveInputError(f"--segment {args.segment}: at most {format_size(MAX_BUFFER_BYTES)}")
    scenario = load_scenario(args.scenario)
    out_dir = results_folder(args.out, getattr(scenario, "name", "scenario"), args.force)
    flags = network_flags(args, "collective")
    plan = build_plan(scenario)
    choices = msccl_choices(plan, algorithms, args.gpus_per_server)  # XMLs read and checked before any network
    traces: dict[str, dict[str, Any]] | None = {} if args.trace else None
    predictions: dict[tuple[str, int], float] | None = {} if junit is not None else None
    classname, run_dir = f"topolab.collective.{scenario.name}", network_config(scenario.emulation, flags).run_dir
    try:
        doc, results = run_on_emulator(
            scenario,
            plan,
            algorithms,
            sizes,
            repeat=args.repeat,
            chunk_bytes=chunk,
            segment_bytes=segment,
            timeout_s=args.timeout,
            link_mbps=args.link_mbps,
            flags=flags,
            traces=traces,
            predictions=predictions,
            choices=choices,
        )
    except RunError as err:
        cases = run_cases(classname, None, run_dir, err)
        write_command_suite(junit, "collective", scenario.name, cases, started, {"scenario": args.scenario})
        raise
    if junit is not None:
        cases = [
            case
            for r in results
            for case in measurement_cases(
                of_collective(r, (predictions or {}).get((r.algorithm, r.bytes)), scenario.run.tolerance, classname)
            )
        ]
        cases.append(nothing_left_case(classname, run_dir))
        properties = {"scenario": args.scenario, "results": str(out_dir)}
        write_command_suite(junit, "collective", scenario.name, cases, started, properties)
    nccl = doc.header + "\n" + format_nccl_tests(results)
    text = json.dumps(doc.to_dict(), indent=2)
    make_output_dir(out_dir)
    write_file(out_dir / "results.json", text + "\n")
    write_file(out_dir / "nccl-tests.txt", nccl + "\n")
    write_file(out_dir / "table.txt", doc.header + "\n" + format_table(results) + "\n")
    for name, trace in (traces or {}).items():
        write_file(out_dir / name, trace_json(trace))
    print(text if args.json else nccl)
    files = ["results.json", "nccl-tests.txt", "table.txt", *(traces or {})]
    print(f"results in {out_dir}/ ({', '.join(files)})", file=sys.stderr)
    return 0 if all(r.verified for r in results) else 1


def run_alltoall(args: argparse.Namespace) -> int:
    """`topolab collective SCENARIO --algorithm alltoall [--routing ...]`: one all-to-all phase
    per routing variant, predicted, bounded by the LP and measured (topolab.collective.routing_phase)."""
    from planner import build_plan, load_scenario

    from ..common.network import refuse_machines
    from ..results.collective_results import format_phase_table
    from .routing_phase import VARIANTS, measure_phase, phase_bytes, phase_traffic, scale_factor

    started = time.monotonic()
    junit = junit_path(args)
    routings = parse_routings(args.routing)
    if args.trace:
        raise CollectiveInputError(f"--trace: draws AllReduce algorithms' iterations, not {ALLTOALL}")
    if args.minbytes or args.maxbytes or args.stepfactor:
        raise CollectiveInputError(f"-b/-e/-f: {ALLTOALL} takes one size, the bytes per pair (--bytes)")
    per_pair = parse_size(args.bytes) if args.bytes else None
    scenario = load_scenario(args.scenario)
    out_dir = results_folder(args.out, getattr(scenario, "name", "scenario"), args.force)
    flags = network_flags(args, "collective")
    link_mbps = args.link_mbps or scenario.emulation.link_mbps
    emulation = network_config(scenario.emulation, flags, link_mbps=link_mbps)
    planes = [r for r in routings if VARIANTS[r][0]]  # the routings that build allocation planes
    if planes:
        refuse_machines(
            emulation,
            flags,
            f"--routing {','.join(planes)} routes over per-destination planes, which are not built across "
            "machines; use --routing single",
        )
    plan = build_plan(scenario)
    traffic = phase_traffic(plan, scenario, per_pair)
    rates = emulated_rates(plan.network, emulation)  # what every variant's network is built at
    factor = 1.0 if per_pair else scale_factor(plan, traffic, rates.time_scale)
    nbytes = phase_bytes(traffic, factor)
    print(
        f"{scenario.name}: all-to-all of {len(traffic)} pairs, {nbytes / 1e6:.1f} MB "
        f"(x{factor:.3g} the workload's phase), routings {', '.join(routings)}",
        file=sys.stderr,
    )
    classname = f"topolab.collective.{scenario.name}"
    try:
        results = measure_phase(
            plan, traffic, routings, emulation, factor=factor, repeat=args.repeat, timeout_s=args.timeout
        )
    except RunError as err:
        cases = run_cases(classname, None, emulation.run_dir, err)
        write_command_suite(junit, "collective", scenario.name, cases, started, {"scenario": args.scenario})
        raise
    doc = AlltoallResults(
        scenario=scenario.name,
        pairs=len(traffic),
        bytes=nbytes,
        factor=factor,
        link_mbps=rates.link_mbps,
        time_scale=rates.time_scale,
        results=results,
    )
    if junit is not None:
        tolerance = scenario.run.tolerance
        cases = [c for r in results for c in measurement_cases(of_phase(r, rates.time_scale, tolerance, classname))]
        cases.append(nothing_left_case(classname, emulation.run_dir))
        properties = {"scenario": args.scenario, "results": str(out_dir)}
        write_command_suite(junit, "collective", scenario.name, cases, started, properties)
    table = format_phase_table(results, f"{scenario.name}: all-to-all phase, emulated seconds")
    text = json.dumps(doc.to_dict(), indent=2)
    make_output_dir(out_dir)
    write_file(out_dir / "results.json", text + "\n")
    write_file(out_dir / "table.txt", table + "\n")
    print(text if args.json else table)
    print(f"results in {out_dir}/ (results.json, table.txt)", file=sys.stderr)
    return 0 if all(r.verified for r in results) else 1


def run_on_emulator(
    scenario: Any,
    plan: Any,
    algorithms: Sequence[str],
    sizes: Sequence[int],
    *,
    repeat: int = 5,
    chunk_bytes: int = 1 << 20,
    segment_bytes: int | None = None,
    timeout_s: float = 30.0,
    link_mbps: float | None = None,
    flags: NetworkFlags | None = None,
    log: Callable[[str], None] | None = None,
    traces: dict[str, dict[str, Any]] | None = None,
    predictions: dict[tuple[str, int], float] | None = None,
    choices: Mapping[str, Any] | None = None,
) -> tuple[CollectiveResults, list[SizeResult]]:
    """Build the plan's emulated network once (as the scenario's ``[emulation]`` and the
    command's ``flags`` say: over ``--machines`` when given) and `measure` on it; returns
    (the results document, its results). ``traces``, ``predictions``: `measure`'s. Used by
    the command and by benchmarks/collective_compare.py."""
    from contract.physics import tcp_goodput_fraction

    from ..common.prediction import shared_cores

    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    changes = {} if link_mbps is None else {"link_mbps": link_mbps}
    config = network_config(scenario.emulation, flags or NetworkFlags(), **changes)
    t0 = time.time()
    with open_network(plan, config, log=log) as net:
        log(
            f"emulated {plan.topology} network up: {plan.servers} servers, {len(plan.links)} "
            f"cables at {net.link_mbps:g} Mbit/s, MTU {net.mtu}, time scale x{net.time_scale:g}"
        )
        results = measure(
            net,
            plan,
            algorithms,
            sizes,
            repeat=repeat,
            chunk_bytes=chunk_bytes,
            segment_bytes=segment_bytes,
            timeout_s=timeout_s,
            log=log,
            traces=traces,
            cores=shared_cores(config.machines),
            predictions=predictions,
            choices=choices,
        )
        frac = tcp_goodput_fraction(net.mtu)
        egress = slowest_egress_bps(plan, net.link_rate_bps)
        emulation = CollectiveEmulation(
            link_mbps=net.link_mbps,
            mtu=net.mtu,
            time_scale=net.time_scale,
            tcp_max_fraction=frac,
            egress_bps=egress,
            egress_goodput_bps=egress * frac,
            netem=net.netem,
        )
    header = (
        f"# {getattr(scenario, 'name', '')}: {plan.topology}, {plan.servers} servers x "
        f"{plan.degree} links, {emulation.link_mbps:g} Mbit/s per link emulated "
        f"(time scale x{emulation.time_scale:g}), MTU {emulation.mtu}\n"
        f"# ideal = 2(n-1)S/(n*D), D = {emulation.egress_goodput_bps / 1e6:.1f} Mbit/s "
        f"egress goodput of the slowest server (TCP maximum {emulation.tcp_max_fraction:.4f} of "
        f"the shaped rate); median of {repeat}; real = time / time scale;\n"
        f"# results.json also gives packing_bound_s = S/tau (spanning-tree packing of the cables' rates)\n"
        f"# nccl-tests columns: time (us), algbw and busbw (GB/s) of the planned cluster (emulated / time scale)\n"
        f"# cpu = cores the {plan.servers} workers kept busy (their user + system time; "
        f"softirq work may be charged elsewhere), of {os.cpu_count()}"
    )
    doc = CollectiveResults(
        scenario=getattr(scenario, "name", ""),
        topology=plan.topology,
        servers=plan.servers,
        degree=plan.degree,
        emulation=emulation,
        repeat=repeat,
        chunk_bytes=chunk_bytes,
        segment_bytes=segment_bytes,
        elapsed_s=time.time() - t0,
        header=header,
        results=results,
    )
    return doc, results
