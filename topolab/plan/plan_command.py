"""`topolab plan`: print a plan's summary, or its JSON.

The summary lists the model-parallel cables (the matchings TopologyFinder added beside the
AllReduce rings) with the bytes the job sends directly between their ends, and remarks on a
large diameter or a low bisection, which a reader should weigh before emulating.

When the scenario asks for a per-destination allocation (``[topology] routing = "planned"``)
and the job has model-parallel or embedding all-to-all traffic, the summary also shows the
allocation of those phases (`planner.bandwidth.multipath`, docs/algorithms.md section 4.1): how many
pairs are split over several paths, paths per pair, and each phase's time on the allocation
against single-path routing (the JSON gets the same figures in ``extra["bandwidth"]``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import TYPE_CHECKING, Any

from contract.files import write_file

from ..common.options import check_output_file
from ..common.plan_text import iteration_text, rate_text

if TYPE_CHECKING:
    from planner import Plan

MAX_ALLOCATED_SERVERS = 32  # larger jobs: the generic LP takes tens of seconds (planner.bandwidth.multipath)
LARGE_DIAMETER = 5  # hops; from here a relayed transfer pays a bandwidth tax worth a remark
LOW_BISECTION = 0.25  # share of a non-blocking network's bisection below which the summary remarks on it
MP_CABLES_LISTED = 8  # the summary names this many model-parallel cables, then counts the rest


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML file (see scenarios/)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON instead of a summary")
    parser.add_argument("--out", metavar="FILE", help="also write the plan JSON to FILE")
    parser.add_argument(
        "--partition",
        type=int,
        metavar="M",
        help="also partition the servers over M machines (as a run over M --machines would) and print the cut",
    )


def _gb(x: float) -> str:
    return f"{x / 1e9:.3f} GB" if x >= 1e8 else f"{x / 1e6:.2f} MB"


def describe(plan: Plan) -> str:
    """The human summary `topolab plan` prints."""
    s = plan.summary
    lines = [
        f"topology        {plan.topology}: {plan.servers} servers"
        + (f" + {plan.switches} switch" if plan.switches else f", degree {plan.degree}")
        + f", {rate_text(plan.topology, plan.link_gbps)}, {len(plan.links)} cables",
        f"job             {plan.model}, strategy {plan.strategy}",
    ]
    if plan.workload is not None:
        from planner.model.workload_graph import describe_workload

        lines.append(f"model           {describe_workload(plan.workload)}")
        lines.append(f"iteration       {iteration_text(plan.servers, plan.workload.batch_per_server)}")
    if plan.strides:
        lines.append(f"strides         {', '.join(f'±{p}' for p in plan.strides)}  (full-ring AllReduce, TotientPerms)")
    cls = plan.extra.get("class_strides")
    if cls and set(cls) != {str(plan.servers)}:
        lines.append(
            "group strides   " + "; ".join(f"groups of {k}: {', '.join(f'±{p}' for p in v)}" for k, v in cls.items())
        )
    if "d_allreduce" in plan.extra:
        lines.append(f"degree split    {degree_split(plan)}")
    lines += [
        f"diameter        {s.diameter} hops",
        f"mean hops       {s.mean_hops:.3f}",
        f"relayed pairs   {s.relayed_fraction:.1%} of ordered server pairs cross another server",
        f"bisection       {s.bisection_gbps:g} Gbps (estimate)",
        f"routes          {plan.routes.kind} ({'per-offset first strides' if plan.routes.kind == 'circulant' else 'next-hop table'})",
        f"traffic/iter    AllReduce {_gb(plan.demand.allreduce_bytes)} in {len(plan.demand.allreduce)} group(s), "
        f"model-parallel {_gb(plan.demand.mp_bytes)} in {len(plan.demand.mp)} flow(s)",
    ]
    lines += mp_cable_lines(plan)
    lines += remarks(plan)
    for phase in plan.extra.get("bandwidth", ()):
        lines.append(
            f"allocation      {phase['phase']}: {phase['pairs_split']}/{phase['pairs']} pairs split, "
            f"paths/pair max {phase['paths_max']} mean {phase['paths_mean']:.2f}; "
            f"{phase['planned_s'] * 1e3:.3g} ms vs {phase['single_path_s'] * 1e3:.3g} ms single-path "
            f"({phase['speedup']:.2f}x)"
        )
    lines += [f"note            {n}" for n in plan.notes]
    return "\n".join(lines)


def degree_split(plan: Plan) -> str:
    """How TopologyFinder split each server's interfaces, said in interfaces (cables), not
    traffic: a plan with no model-parallel interface still sends its model-parallel bytes,
    relayed over the AllReduce rings."""
    d_ar, d_mp = plan.extra["d_allreduce"], plan.extra["d_mp"]
    text = f"{d_ar} of {plan.degree} interfaces per server for AllReduce rings, {d_mp} for model-parallel matchings"
    if not d_mp and plan.demand.mp_bytes:
        text += " (the model-parallel traffic below crosses the ring cables)"
    return text


def mp_cables(plan: Plan) -> list[tuple[int, int, int]]:
    """The model-parallel cables of a TopoOpt plan (TopologyFinder's matchings, the links after
    its ``extra["ring_cables"]`` ring cables), as (a, b, bytes per iteration the job sends
    directly between a and b, both ways)."""
    rings = plan.extra.get("ring_cables")
    if plan.topology != "topoopt" or rings is None:
        return []
    direct: dict[tuple[int, int], int] = {}
    for f in plan.demand.mp:
        key = (min(f.src, f.dst), max(f.src, f.dst))
        direct[key] = direct.get(key, 0) + f.bytes
    return [(l.a, l.b, direct.get((min(l.a, l.b), max(l.a, l.b)), 0)) for l in plan.links[rings:]]


def mp_cable_lines(plan: Plan) -> list[str]:
    cables = mp_cables(plan)
    if not cables:
        return []
    shown = sorted(cables, key=lambda c: -c[2])[:MP_CABLES_LISTED]
    listed = ", ".join(f"{a}-{b} ({_gb(carried)}/iter)" for a, b, carried in shown)
    more = f", and {len(cables) - len(shown)} more" if len(cables) > len(shown) else ""
    return [
        f"model-parallel  {len(cables)} of {len(plan.links)} cables are matchings for model-parallel traffic "
        f"(bytes sent directly between their ends): {listed}{more}"
    ]


def remarks(plan: Plan) -> list[str]:
    """What a reader should weigh before emulating: a large diameter, a low bisection."""
    s, out = plan.summary, []
    if s.diameter >= LARGE_DIAMETER:
        out.append(
            f"remark          diameter {s.diameter}: a transfer between the farthest servers is relayed over "
            f"{s.diameter} cables, each carrying all of it (the bandwidth tax); all-to-all traffic crosses "
            f"{s.mean_hops:.2f} cables per byte on average, so it gets about 1/{s.mean_hops:.2f} of the cables' capacity"
        )
    full = plan.servers / 2 * plan.degree * plan.link_gbps if not plan.switches else 0.0
    if full and s.bisection_gbps < LOW_BISECTION * full:
        out.append(
            f"remark          bisection {s.bisection_gbps:g} Gbps is {s.bisection_gbps / full:.0%} of a non-blocking "
            f"network's {full:g} Gbps: traffic between the two halves (all-to-all, model-parallel) is limited by it"
        )
    return out


def describe_partition(plan: Plan, machines: int) -> str:
    """The cut of the servers over ``machines`` (`topolab plan --partition M`)."""
    from contract.errors import UsageError
    from planner.topology.partition import partition_network

    if not 1 <= machines <= plan.network.nodes:
        raise UsageError(f"--partition must be between 1 and {plan.network.nodes}, not {machines}")
    p = partition_network(plan.network, machines)
    loads = ", ".join(f"{load:g}" for load in p.loads)
    return (
        f"partition       {machines} machines ({p.method}): {p.cut_cables} of {p.cables} cables cross ({p.cut_fraction:.1%}), "
        f"load per machine {loads} (cable ends; imbalance {p.imbalance:.3f})"
    )


def bandwidth_phases(plan: Plan) -> list[dict[str, Any]]:
    """The allocation summary of the plan's embedding all-to-all and model-parallel phases,
    when the plan has an allocation (its scenario asks ``routing = "planned"``)."""
    if not plan.allocation or not plan.demand.mp or plan.servers > MAX_ALLOCATED_SERVERS:
        return []
    # scipy and networkx (half a second) only for plans that have an allocation
    from planner.bandwidth.multipath import allocate_for_plan, embedding_alltoall_traffic, iteration_mp_traffic

    phases = {
        "embedding all-to-all": embedding_alltoall_traffic(plan),
        "model-parallel iteration": iteration_mp_traffic(plan),
    }
    out = []
    for name, traffic in phases.items():
        if not traffic:
            continue
        result = allocate_for_plan(plan, traffic)
        paths = [len(pair.paths) for pair in result.allocation]
        out.append(
            {
                "phase": name,
                "pairs": len(paths),
                "pairs_split": sum(p > 1 for p in paths),
                "paths_max": max(paths),
                "paths_mean": sum(paths) / len(paths),
                "planned_s": result.seconds,
                "single_path_s": result.single_path_seconds,
                "speedup": result.speedup,
            }
        )
    return out


def check_partition(machines: int | None, servers: int) -> None:
    """``--partition M`` before any planning: M machines for the scenario's servers."""
    from contract.errors import UsageError

    if machines is not None and not 1 <= machines <= servers:
        raise UsageError(f"--partition must be between 1 and {servers} (the scenario's servers), not {machines}")


def run_plan(args: argparse.Namespace) -> int:
    from planner import build_plan, load_scenario

    out = check_output_file(args.out, "--out", inputs=(args.scenario,))
    scenario = load_scenario(args.scenario)
    check_partition(args.partition, scenario.cluster.servers)
    plan = build_plan(scenario)
    phases = bandwidth_phases(plan)
    if phases:
        plan = dataclasses.replace(plan, extra={**plan.extra, "bandwidth": phases})
    text = plan.to_json() if args.json or out is not None else ""  # large plans take a while to serialize
    if out is not None:
        write_file(out, text)
    if args.json:
        sys.stdout.write(text + "\n")
    else:
        print(describe(plan))
        if args.partition is not None:
            print(describe_partition(plan, args.partition))
        if out is not None:
            print(f"plan written to {args.out}")
    return 0
