"""`topolab place`: place a scenario's operator groups on its servers, optionally run it.

    topolab place SCENARIO [--no-fusion] [--json] [--servers N] [--time-limit S] [--memory-gb GB] [--multipath]
                           [--run [--iterations N] [--payload-scale F] [--machines HOST,...] [--wait S] [--run-dir DIR]]

Inter-operator parallelism (docs/search.md, "Device placement of operator groups"): the scenario's model is fused
(planner.model.fusion; ``--no-fusion`` searches the operator graph itself), its groups are placed
on the servers of the scenario's plan jointly with the per-destination bandwidth allocation
(planner.placement.place_jointly: HEFT + local search alternated with allocation), every
server holding at most ``--memory-gb`` of weights, gradients, optimizer state and stashed
activations. Each pair's allocated rate is capped at its route's bottleneck, as the plan's
static routes carry a pair over one path (``--multipath`` lifts the cap: a server's whole
egress may then go to one destination, over several paths).

One iteration here is one batch of ``[workload] batch_per_server`` samples through one copy of
the model whose groups are spread over the servers: every group's forward, the loss, every
group's backward, with the activations and their gradients sent between the servers that
hold producer and consumer (no pipelining of several batches, no optimizer step). Its
makespan is the cost model's time from the first forward's start to the last backward's end
(`planner.placement.makespan`, transfers as delays). Without pipelining the groups of a chain
run one after another, so the search often keeps them on a few servers (or one) and leaves
the others idle: spreading them would only add transfers. The output says so.

Printed: group -> server, per-server memory and compute, the makespan, the search
time, the operators before and after fusion, and beside it the makespans of the same search
without allocation ("placement only"), round robin and the memory-balanced contiguous
partition (every placement scored by the placement cost model at the allocation of its own
traffic), all of the same batch. Data parallelism is another iteration: the same batch on
every server (the scenario's global batch, `topolab predict`'s iteration); its time is
`topolab predict --strategies data`'s, the same call (`data_parallel`), and it is compared
in samples per second.

``--run`` builds the plan's emulated network and runs the placement (and, for comparison,
"placement only" and the best baseline placer's, each unless it places the groups as a run
before it) as a schedule (planner.placement.placement_schedule: compute waits scaled by the
time scale, activations forward and gradients backward between the servers holding
producer and consumer, each transfer copy-checked): warm-up then ``--iterations`` timed
iterations, median compared with the cost model and the flow-level prediction of the same
schedule, all on the plan's routes (one path per pair). With ``--multipath`` the placement
also runs with the allocation enforced ("placement + allocation"): its traffic matrix (bytes
per ordered server pair per iteration) gets the max-concurrent-flow allocation over k paths
(planner.bandwidth.multipath.allocate_for_plan, docs/algorithms.md section 4.1), the emulated network
carries it (per-destination HTB classes and one routing plane per path, docs/emulation.md
section 6), the schedule splits each transfer over its pair's planes, and the flow model and
the cost model (at the allocation's pair rates) predict the same allocation; the
single-path runs then use the plan's routes without any allocation. The network comes from
`topolab.common.network` as every command's does: over ``--machines`` (or ``[emulation] machines``)
the single-path runs are built across those machines; ``--multipath`` is refused there in
one line, its planes are not built across machines.

Over 300 lines: the two modes (search, emulator run on single paths and with the multipath
allocation) fill one results document that the text rendering and --json both print, and
their flags with their bounds live here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from contract.errors import RunError, UsageError

from ..common.network import add_network_arguments, network_config, network_flags, open_network, refuse_machines
from ..common.options import MAX_ITERATIONS, MAX_PAYLOAD_SCALE, MIN_PAYLOAD_SCALE, bounded_float, bounded_int

if TYPE_CHECKING:
    from emulator import EmulationConfig

if TYPE_CHECKING:
    from contract.emulation import EmulationConfig

DEFAULT_MEMORY_GB = 80.0  # one A100 80 GB
MAX_MEMORY_GB = 1e6  # a petabyte per server: beyond any machine
MAX_TIME_LIMIT_S = 3600.0  # an hour of search; the heuristic converges in seconds on fused graphs
DEFAULT_TIME_LIMIT_S = 30.0
DEFAULT_RUN_ITERATIONS = 3
GB = 1e9
MULTIPATH_RUN = "placement + allocation"  # the --multipath run's label

Log = Callable[[str], None]


def add_place_arguments(parser: argparse.ArgumentParser) -> None:
    from planner.scenario import MAX_SERVERS

    parser.add_argument("scenario", help="scenario TOML file (its model, batch, servers and network)")
    parser.add_argument("--no-fusion", action="store_true", help="place the operator graph itself, without fusion")
    parser.add_argument("--json", action="store_true", help="print the placement and figures as JSON")
    parser.add_argument(
        "--servers",
        type=bounded_int(2, MAX_SERVERS),
        metavar="N",
        help="place on N servers instead of the scenario's [cluster] servers",
    )
    parser.add_argument(
        "--time-limit",
        type=bounded_float(0.0, MAX_TIME_LIMIT_S),
        default=DEFAULT_TIME_LIMIT_S,
        metavar="S",
        help=f"search time limit per solver call in seconds (default: {DEFAULT_TIME_LIMIT_S:g})",
    )
    parser.add_argument(
        "--memory-gb",
        type=bounded_float(0.0, MAX_MEMORY_GB),
        default=DEFAULT_MEMORY_GB,
        metavar="GB",
        help=f"memory per server for weights, gradients, Adam state and activations (default: {DEFAULT_MEMORY_GB:g})",
    )
    parser.add_argument(
        "--multipath",
        action="store_true",
        help="let the allocation give a pair more than its path's bottleneck (per-destination multipath); "
        "with --run, also run the placement with its multipath allocation enforced",
    )
    parser.add_argument("--run", action="store_true", help="run the placement on the emulated network (root)")
    parser.add_argument(
        "--iterations",
        type=bounded_int(1, MAX_ITERATIONS),
        default=DEFAULT_RUN_ITERATIONS,
        metavar="N",
        help=f"with --run: timed iterations after one warm-up (default: {DEFAULT_RUN_ITERATIONS})",
    )
    parser.add_argument(
        "--payload-scale",
        type=bounded_float(MIN_PAYLOAD_SCALE, MAX_PAYLOAD_SCALE, low_inclusive=True),
        metavar="F",
        help="with --run: multiply every transfer size (default: [run] payload_scale)",
    )
    add_network_arguments(parser, when="with --run: ")


def _scenario(args: argparse.Namespace) -> Any:
    from planner import ScenarioError, load_scenario
    from planner.scenario import with_overrides

    s = load_scenario(args.scenario)
    if args.servers is not None and args.servers != s.cluster.servers:
        try:
            s = with_overrides(s, cluster={"servers": args.servers})
        except ScenarioError as err:
            raise UsageError(f"--servers {args.servers}: {err.key}: {err.problem}") from None
    return s


def search(
    s: Any, fusion: bool, time_limit: float, memory_bytes: float, single_path: bool = True
) -> tuple[dict[str, Any], Any]:
    """Plan, fuse, place jointly and score the baselines; returns (figures, what `--run` needs)."""
    from planner import build_plan
    from planner.model.fusion import FusionConfig, fuse
    from planner.model.workload_graph import workload_graph
    from planner.placement import (
        allocate_rates,
        contiguous_partition,
        makespan,
        place_heuristic,
        place_jointly,
        plan_capacity,
        round_robin,
        task_graph,
        traffic_matrix,
    )
    from planner.placement.cost import check_memory_feasible, server_memory

    w = s.workload
    plan = build_plan(s)
    k = plan.servers
    rates, egress = plan_capacity(plan, s.emulation.mtu)
    graph = workload_graph(w)
    t0 = time.perf_counter()
    searched = (
        fuse(
            graph,
            FusionConfig(
                batch=w.batch_per_server, device_tflops=w.device_tflops, server_gbps=plan.degree * plan.link_gbps
            ),
        )
        if fusion
        else graph
    )
    fusion_s = time.perf_counter() - t0 if fusion else 0.0
    tasks = task_graph(searched, w.batch_per_server, w.device_tflops)
    check_memory_feasible(tasks, k, memory_bytes)  # one line naming the limit before any search
    # the emulator routes a pair over one path: no pair's allocation can exceed that path
    cap = rates if single_path else None
    joint = place_jointly(tasks, rates, egress, memory_bytes, time_limit=time_limit, pair_cap=cap)
    p = joint.placement
    plain = place_heuristic(tasks, rates, memory_bytes, time_limit)
    baselines: dict[str, Any] = {}
    for placer in (round_robin, contiguous_partition):
        try:
            b = placer(tasks, rates, memory_bytes)
        except UsageError:
            continue  # this placer cannot fit the memory limit
        baselines[b.method] = b

    def at_own_allocation(q: Any) -> float:  # how the joint search scores its placements
        allocated = allocate_rates(traffic_matrix(tasks, q.assignment, k), egress, pair_cap=cap)
        return makespan(tasks, q.assignment, q.order, allocated)

    memory = server_memory(tasks, p.assignment, k)
    compute = [0.0] * k
    for g, server in enumerate(p.assignment):
        compute[server] += tasks.forward[g] + tasks.backward[g]
    doc = {
        "scenario": s.name,
        "model": w.model,
        "batch": w.batch_per_server,
        "topology": plan.topology,
        "servers": k,
        "fusion": fusion,
        "operators": len(graph),
        "groups": len(searched),
        "fusion_s": fusion_s,
        "search_s": p.search_seconds,
        "memory_limit_gb": memory_bytes / GB,
        "method": p.method,
        "predicted_makespan_ms": p.makespan * 1e3,
        "allocation_rounds": len(joint.history),
        "allocation_single_path": single_path,
        "placement": [
            {"group": tasks.names[g], "members": list(searched.ops[g].members), "server": p.assignment[g]}
            for g in p.order
        ],
        "per_server": [
            {
                "server": i,
                "groups": sum(1 for a in p.assignment if a == i),
                "memory_gb": memory[i] / GB,
                "compute_ms": compute[i] * 1e3,
            }
            for i in range(k)
        ],
        "baselines_ms": {
            "placement_only": at_own_allocation(plain) * 1e3,
            **{name: at_own_allocation(b) * 1e3 for name, b in baselines.items()},
        },
    }
    best_baseline = min(baselines.values(), key=at_own_allocation, default=None)
    return doc, (plan, tasks, p, plain, best_baseline)


def data_parallel(s: Any, makespan_ms: float) -> dict[str, Any]:
    """Data parallelism on the same scenario as `topolab predict --strategies data` predicts it
    (`topolab.common.prediction.prepare`, the same call and netem assumption): its iteration is the
    scenario's global batch (``batch_per_server`` on every server), so it is compared with the
    placement (one batch through one copy of the model) in samples per second."""
    from planner import ScenarioError
    from planner.scenario import with_overrides

    from ..common.prediction import netem_assumed, prepare

    batch, servers = s.workload.batch_per_server, s.cluster.servers
    try:
        variant = s if s.parallelism.strategy == "data" else with_overrides(s, parallelism={"strategy": "data"})
    except ScenarioError as err:
        return {"note": f"not predicted: {err.key}: {err.problem}"}
    iteration_ms = prepare(variant, netem=netem_assumed()[0]).predicted["real_ms"]
    return {
        "iteration_ms": iteration_ms,
        "samples": batch * servers,
        "samples_per_s": batch * servers / iteration_ms * 1e3,
        "placement_samples_per_s": batch / makespan_ms * 1e3,
        "as": "topolab predict --strategies data",
    }


def _scaled_tasks(tasks: Any, payload_scale: float) -> Any:
    from planner.placement import TaskGraph

    edges = tuple((u, v, nbytes * payload_scale) for u, v, nbytes in tasks.edges)
    return TaskGraph(tasks.names, tasks.forward, tasks.backward, tasks.memory, tasks.param_bytes, edges)


def allocated_plan(plan: Any, tasks: Any, placement: Any) -> tuple[Any, Any]:
    """``plan`` carrying the max-concurrent-flow allocation of ``placement``'s traffic matrix
    (bytes per ordered server pair per iteration), and that allocation's figures."""
    from planner.bandwidth.multipath import allocate_for_plan
    from planner.placement import traffic_matrix

    matrix = traffic_matrix(tasks, placement.assignment, plan.servers)
    traffic = {(src, dst): float(v) for (src, dst), v in np.ndenumerate(matrix) if v > 0}
    result = allocate_for_plan(plan, traffic)
    return replace(plan, allocation=result.allocation), result


def allocation_pair_rates(plan: Any, rates: np.ndarray, mtu: int) -> np.ndarray:
    """The cost model's pair rates (bytes/s of goodput) on ``plan``'s allocation: an
    allocated pair at its planes' total, the others at ``rates`` (their route)."""
    from contract.physics import cable_goodput

    out = rates.copy()
    for pair in plan.allocation:
        out[pair.src, pair.dst] = cable_goodput(pair.gbps * 1e9, mtu)
    return out


def allocation_summary(plan: Any, result: Any) -> dict[str, Any]:
    split = [pair for pair in plan.allocation if len(pair.paths) > 1]
    return {
        "pairs": len(plan.allocation),
        "pairs_split": len(split),
        "planes": plan.network.planes,
        "lp_ms": result.seconds * 1e3,
        "single_path_ms": result.single_path_seconds * 1e3,
        "lp_speedup": result.speedup,
        "split": [
            {
                "src": pair.src,
                "dst": pair.dst,
                "paths": [{"path": list(share.path), "gbps": share.gbps} for share in pair.paths],
            }
            for pair in split
        ],
    }


def _measure_on(
    s: Any,
    plan: Any,
    tasks: Any,
    runs: dict[str, Any],
    iterations: int,
    payload_scale: float,
    config: EmulationConfig,
    log: Log,
) -> dict[str, Any]:
    """Build ``plan``'s emulated network (with its allocation, if any; over ``config.machines``
    when it has none) and run every placement of ``runs`` (label -> placement) on it; the
    schedules, the flow model and the cost model take the time scale and the MTU of the
    network as built."""
    from planner.placement import makespan, placement_schedule, plan_capacity

    from ..common.prediction import predict_run
    from ..common.schedule_run import run_schedule_on

    scaled = _scaled_tasks(tasks, payload_scale)
    network = plan.network if plan.allocation else None
    out: dict[str, Any] = {}
    with open_network(plan, config, log=log) as net:
        scale = net.time_scale
        rates, _egress = plan_capacity(plan, net.mtu)  # the cost model's pair rates, real bytes/s
        if plan.allocation:
            rates = allocation_pair_rates(plan, rates, net.mtu)
        for label, p in runs.items():
            schedule = placement_schedule(
                tasks, p, plan.servers, time_scale=scale, payload_scale=payload_scale, network=network
            )
            flow = predict_run(plan, schedule, net.rates, net.netem)

            def each(i: int, res: Any, label: str = label) -> None:
                log(f"  {label}: {'warm-up' if i == 0 else i} {res.time_s:.3f} s {'verified' if res.ok else 'FAILED'}")

            run = run_schedule_on(net, schedule.to_dict(), repeat=iterations, timeout_s=s.run.timeout_s, each=each)
            times = [t / scale * 1e3 for t in run.times_s]
            verified, errors = run.verified, run.mismatches
            measured = statistics.median(times)
            model = makespan(scaled, p.assignment, p.order, rates) * 1e3
            out[label] = {
                "method": p.method,
                "multipath": network is not None,
                "cost_model_ms": model,
                "flow_predicted_ms": flow["real_ms"],
                "measured_ms": measured,
                "measured_all_ms": times,
                "cost_model_error": (model - measured) / measured,
                "flow_error": (flow["real_ms"] - measured) / measured,
                "transfers_checked": len(schedule.checks),
                "sends": sum(
                    1 for prog in schedule.programs for ops in prog.values() for op in ops if op.kind == "send"
                ),
                "verified": verified,
                "errors": errors[:5],
            }
    return out


def run_placements(
    s: Any,
    found: Any,
    iterations: int,
    payload_scale: float,
    config: EmulationConfig | None = None,
    log: Log | None = None,
    multipath: bool = False,
) -> dict[str, Any]:
    """Run the placement, "placement only" and the best baseline's (each distinct one once)
    on the plan's emulated network, one worker set each, the same way `topolab collective`
    measures a schedule; measured per-iteration times next to the cost model at the plan's
    pair rates and the flow-level prediction of the same schedule (real ms). ``multipath``:
    those on single paths (the plan without allocation), then the placement again on a
    network enforcing the allocation of its traffic ("placement + allocation"). ``config``: the
    network's (`topolab.common.network.network_config`; None: the scenario's ``[emulation]``)."""
    from contract.emulation import emulated_rates

    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    plan, tasks, placement, plain, baseline = found
    runs = {"placement": placement}
    # the ablation (the same search without allocation) and the best baseline, unless they
    # place the groups exactly as a run before them
    for label, other in (("placement only", plain), ("baseline", baseline)):
        if other is not None and all(other.assignment != p.assignment for p in runs.values()):
            runs[label if other is plain else f"baseline {other.method}"] = other
    config = network_config(s.emulation) if config is None else config
    single = replace(plan, allocation=()) if multipath else plan
    scale = emulated_rates(single.network, config).time_scale  # what the network will be built at
    out: dict[str, Any] = {"time_scale": scale, "payload_scale": payload_scale, "iterations": iterations}
    out["runs"] = _measure_on(s, single, tasks, runs, iterations, payload_scale, config, log)
    if multipath:
        multi, result = allocated_plan(plan, tasks, placement)
        out["allocation"] = allocation_summary(multi, result)
        out["runs"].update(
            _measure_on(s, multi, tasks, {MULTIPATH_RUN: placement}, iterations, payload_scale, config, log)
        )
        out["multipath_speedup_measured"] = (
            out["runs"]["placement"]["measured_ms"] / out["runs"][MULTIPATH_RUN]["measured_ms"]
        )
        out["multipath_speedup_predicted"] = (
            out["runs"]["placement"]["flow_predicted_ms"] / out["runs"][MULTIPATH_RUN]["flow_predicted_ms"]
        )
    return out


def idle_text(doc: dict[str, Any]) -> str:
    """Why servers hold no group, when some do not (module docstring)."""
    used = sum(1 for r in doc["per_server"] if r["groups"])
    if used == doc["servers"]:
        return f"servers used     all {used}"
    return (
        f"servers used     {used} of {doc['servers']}: without pipelining the groups of one batch run one after "
        "another, so spreading them further would only add transfers (data parallelism uses every server)"
    )


def data_parallel_text(dp: dict[str, Any] | None) -> list[str]:
    if not dp:
        return []
    if "iteration_ms" not in dp:
        return [f"data parallel    {dp['note']}"]
    return [
        f"data parallel    {dp['iteration_ms']:.4f} ms per iteration of {dp['samples']:,} samples (the batch on every "
        f"server, as `{dp['as']}`): {dp['samples_per_s']:,.0f} samples/s against the placement's "
        f"{dp['placement_samples_per_s']:,.0f}"
    ]


def format_text(doc: dict[str, Any]) -> str:
    from ..common.plan_text import REAL_TIMES

    size = f"{doc['operators']} operators" + (f" fused into {doc['groups']} groups" if doc["fusion"] else ", no fusion")
    lines = [
        f"{doc['scenario']}: {doc['model']} on {doc['servers']} servers ({doc['topology']}), "
        f"memory limit {doc['memory_limit_gb']:g} GB per server",
        f"iteration        one batch of {doc['batch']:,} samples through one copy of the model, its groups placed on "
        f"the servers: forward, then backward (no pipelining, no optimizer step); {REAL_TIMES}",
        f"graph searched   {size}" + (f" in {doc['fusion_s']:.3f} s" if doc["fusion"] else ""),
        f"search           {doc['method']}: {doc['search_s']:.3f} s, {doc['allocation_rounds']} allocation round(s)",
        f"makespan         {doc['predicted_makespan_ms']:.4f} ms predicted by the placement cost model: from the first "
        "forward's start to the last backward's end, transfers between servers as delays",
        "baselines        "
        + ", ".join(f"{name.replace('_', ' ')} {ms:.4f} ms" for name, ms in doc["baselines_ms"].items())
        + " (the same batch, placed by each)",
        *data_parallel_text(doc.get("data_parallel")),
        idle_text(doc),
        "",
        "server  groups  memory GB  compute ms",
    ]
    lines += [
        f"{r['server']:6d}  {r['groups']:6d}  {r['memory_gb']:9.3f}  {r['compute_ms']:10.4f}"
        for r in doc["per_server"]
        if r["groups"]
    ]
    lines += ["", "group -> server"]
    lines += [f"  {row['group']} -> {row['server']}" for row in doc["placement"]]
    run = doc.get("run")
    if run:
        lines += [
            "",
            f"run on the emulator: median of {run['iterations']} iterations (real ms, payload x{run['payload_scale']:g})",
        ]
        for label, r in run["runs"].items():
            lines.append(
                f"  {label:28s} measured {r['measured_ms']:.4f}  cost model {r['cost_model_ms']:.4f} "
                f"({100 * r['cost_model_error']:+.0f}%)  flow model {r['flow_predicted_ms']:.4f} "
                f"({100 * r['flow_error']:+.0f}%)  {r['transfers_checked']} transfers "
                f"{'verified' if r['verified'] else 'FAILED'}"
            )
        alloc = run.get("allocation")
        if alloc:
            lines += [
                f"allocation       {alloc['pairs']} pairs, {alloc['pairs_split']} split over up to {alloc['planes']} "
                f"planes; traffic {alloc['lp_ms']:.4f} ms vs {alloc['single_path_ms']:.4f} ms on single paths (LP)",
                f"multipath        {run['multipath_speedup_measured']:.2f}x measured, "
                f"{run['multipath_speedup_predicted']:.2f}x predicted (flow model) vs the placement on single paths",
            ]
    return "\n".join(lines)


def run_place(args: argparse.Namespace) -> int:
    s = _scenario(args)
    config = None
    if args.run:
        flags = network_flags(args, "place --run")
        config = network_config(s.emulation, flags)
        if args.multipath:
            refuse_machines(
                config,
                flags,
                "place --run --multipath enforces the allocation with per-destination planes, which are not "
                "built across machines; leave out --multipath",
            )
    elif args.machines is not None:
        raise UsageError("--machines: only with --run (the search builds no network)")
    from planner.placement import PlacementError

    try:
        doc, found = search(s, not args.no_fusion, args.time_limit, args.memory_gb * GB, not args.multipath)
    except PlacementError as err:
        raise UsageError(f"--memory-gb {args.memory_gb:g}: {err}") from None
    doc["data_parallel"] = data_parallel(s, doc["predicted_makespan_ms"])
    if args.run:
        payload = s.run.payload_scale if args.payload_scale is None else args.payload_scale
        doc["run"] = run_placements(s, found, args.iterations, payload, config, multipath=args.multipath)
    print(json.dumps(doc, indent=1) if args.json else format_text(doc))
    if args.run and not all(r["verified"] for r in doc["run"]["runs"].values()):
        raise RunError("a transfer of the placement failed its copy check on the emulator")
    return 0
