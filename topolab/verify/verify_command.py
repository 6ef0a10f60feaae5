"""`topolab verify SCENARIO`: build the scenario's network and prove it is the plan.

Checks, in order: every ordered pair of servers reaches every other, the path each pair's
packets take (traceroute, hop by hop) equals ``plan.path``, and every cable carries, both
ways at once, within 5% of the TCP maximum of its shaped rate at the MTU. Prints a table
(or JSON with ``--json``), exits 0 only if everything matches, and always tears down.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import asdict

from contract.errors import UsageError

from ..common.network import add_network_arguments, open_network, plan_and_config
from ..common.options import add_link_mbps_argument, bounded_float

MAX_REFERENCE_GBPS = 1600.0  # the scenario's maximum link_gbps (docs/scenarios.md)
MAX_MEASURE_S = 600.0  # iperf3 time per batch; all cables are measured in several batches
MAX_BUDGET_GBPS = 100.0  # far above what two cores move through veths


def add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML file (its [emulation] table sets rate, MTU, netem)")
    parser.add_argument("--json", action="store_true", help="print the full report as JSON instead of a table")
    add_link_mbps_argument(parser)
    parser.add_argument(
        "--reference-gbps",
        type=bounded_float(0.0, MAX_REFERENCE_GBPS),
        default=None,
        metavar="G",
        help="the real rate link_mbps stands for (default: the plan's link_gbps, as topolab run "
        "does; give the cluster's link_gbps to emulate a switch port at its 4x rate)",
    )
    parser.add_argument(
        "--links",
        default="all",
        metavar="all|N",
        help="measure goodput on all cables (default) or on a reproducible sample of N",
    )
    parser.add_argument("--no-goodput", action="store_true", help="skip the goodput measurement")
    parser.add_argument(
        "--seconds",
        type=bounded_float(0.0, MAX_MEASURE_S),
        default=3.0,
        help=f"iperf3 measuring time per batch, at most {MAX_MEASURE_S:g} (default 3)",
    )
    parser.add_argument(
        "--budget-gbps",
        type=bounded_float(0.0, MAX_BUDGET_GBPS),
        default=8.0,
        help="shaped traffic measured at once, both directions (default 8: well under the "
        "45-55 Gbit/s both cores of the reference machine saturate at)",
    )
    parser.add_argument(
        "--tolerance",
        type=bounded_float(0.0, 1.0),
        default=0.05,
        help="allowed goodput deviation, in (0, 1] (default 0.05)",
    )
    add_network_arguments(parser)


def run_verify(args) -> int:
    from emulator.checks import check_goodput, check_paths, check_plane_paths, sample_links

    if args.links != "all" and not (args.links.isdigit() and int(args.links) > 0):
        raise UsageError(f"--links {args.links!r}: use 'all' or a positive number")
    # The same network `topolab run` builds: link_mbps stands for plan.link_gbps (for the switch
    # baseline the planner sets that to the port rate). `--reference-gbps` pins another rate.
    pinned = {"reference_gbps": args.reference_gbps} if args.reference_gbps else {}
    scenario, plan, config, _flags = plan_and_config(args, "verify", **pinned)

    def progress(msg):
        return print(f"verify: {msg}", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    report: dict = {
        "scenario": args.scenario,
        "topology": plan.topology,
        "servers": plan.servers,
        "switch_nodes": plan.switches,
        "cables": len(plan.links),
    }
    with open_network(plan, config, log=progress) as net:
        report["facts"] = dict(net.facts)
        progress(
            f"network up in {net.facts['build_s']:.2f} s: {net.nodes} hosts, {len(plan.links)} cables, "
            f"{', '.join(f'{r:g}' for r in net.facts['rates_mbps'])} Mbit/s, time scale {net.time_scale:g}x"
        )
        paths = check_paths(net)
        progress(f"paths traced: {sum(p.ok for p in paths)}/{len(paths)} equal the plan")
        plane_paths = check_plane_paths(net)  # [] without a per-destination allocation
        if plane_paths:
            progress(f"plane paths traced: {sum(p.ok for p in plane_paths)}/{len(plane_paths)} equal the allocation")
        goodput = None
        if not args.no_goodput:
            chosen = None if args.links == "all" else sample_links(len(plan.links), int(args.links))
            goodput = check_goodput(
                net,
                chosen,
                seconds=args.seconds,
                budget_gbps=args.budget_gbps,
                tolerance=args.tolerance,
                progress=progress,
            )
    report["facts"]["teardown_s"] = net.facts.get("teardown_s")
    report["seconds"] = time.perf_counter() - t0
    reached = sum(p.reached for p in paths)
    report["reachability"] = {"pairs": len(paths), "reached": reached}
    report["paths"] = {
        "pairs": len(paths),
        "equal": sum(p.ok for p in paths),
        "hops": dict(sorted(Counter(len(p.expected) - 1 for p in paths).items())),
        "mismatches": [asdict(p) for p in paths if not p.ok],
    }
    report["plane_paths"] = {
        "planes": len(plane_paths),
        "equal": sum(p.ok for p in plane_paths),
        "mismatches": [asdict(p) for p in plane_paths if not p.ok],
    }
    if goodput is not None:
        ratios = [r for l in goodput.links for r in (l.ratio(l.a_to_b_mbps), l.ratio(l.b_to_a_mbps)) if r is not None]
        report["goodput"] = {
            "cables": len(goodput.links),
            "of_cables": len(plan.links),
            "sampled": goodput.sampled,
            "directions_ok": sum(
                1
                for l in goodput.links
                for r in (l.ratio(l.a_to_b_mbps), l.ratio(l.b_to_a_mbps))
                if r is not None and abs(r - 1) <= args.tolerance
            ),
            "directions": 2 * len(goodput.links),
            "tolerance": args.tolerance,
            "ratio_min": min(ratios, default=None),
            "ratio_mean": sum(ratios) / len(ratios) if ratios else None,
            "ratio_max": max(ratios, default=None),
            "batches": goodput.batches,
            "retried_alone": goodput.retried,
            "budget_gbps": goodput.budget_gbps,
            "seconds": goodput.seconds,
            "links": [asdict(l) for l in goodput.links],
        }
    ok = (
        reached == len(paths)
        and report["paths"]["equal"] == len(paths)
        and report["plane_paths"]["equal"] == len(plane_paths)
        and (goodput is None or all(l.ok for l in goodput.links))
    )
    report["ok"] = ok
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_table(report, plan)
    return 0 if ok else 1


def _print_table(r: dict, plan) -> None:
    f = r["facts"]
    print(
        f"topolab verify {r['scenario']}: {r['topology']}, {r['servers']} servers"
        + (f" + {r['switch_nodes']} switch node(s)" if r["switch_nodes"] else "")
        + f", {r['cables']} cables"
    )
    print(
        f"  emulated: {', '.join(f'{x:g}' for x in f['rates_mbps'])} Mbit/s per cable (time scale "
        f"{f['time_scale']:g}x), MTU {f['mtu']}, netem: {'yes, ' + format(f['delay_us'], 'g') + ' us' if f['netem'] else 'absent (no link latency)'}"
    )
    print(f"  build {f['build_s']:.2f} s, teardown {f['teardown_s']:.2f} s, total {r['seconds']:.1f} s")
    reach, paths = r["reachability"], r["paths"]
    mark = lambda good: "ok  " if good else "FAIL"  # noqa: E731
    print(f"{mark(reach['reached'] == reach['pairs'])} reachability: {reach['reached']}/{reach['pairs']} ordered pairs")
    hops = ", ".join(f"{h} hop{'s' if h > 1 else ''}: {n}" for h, n in paths["hops"].items())
    print(f"{mark(paths['equal'] == paths['pairs'])} paths: {paths['equal']}/{paths['pairs']} equal the plan ({hops})")
    for m in paths["mismatches"][:20]:

        def show(p):
            return " ".join("?" if n is None else (f"h{n}" if n < plan.servers else f"s{n - plan.servers}") for n in p)

        print(f"     h{m['src']} -> h{m['dst']}: plan {show(m['expected'])}, observed {show(m['observed'])}")
    planes = r["plane_paths"]
    if planes["planes"]:
        print(
            f"{mark(planes['equal'] == planes['planes'])} plane paths: {planes['equal']}/{planes['planes']} "
            "(source, destination, plane) equal the allocation"
        )
        for m in planes["mismatches"][:20]:
            print(f"     h{m['src']} -> h{m['dst']} plane {m['plane']}: plan {m['expected']}, observed {m['observed']}")
    g = r.get("goodput")
    if g is None:
        print("-    goodput: skipped")
        return
    what = f"{g['cables']} of {g['of_cables']} cables (sample)" if g["sampled"] else f"all {g['cables']} cables"
    print(
        f"{mark(g['directions_ok'] == g['directions'])} goodput: {g['directions_ok']}/{g['directions']} directions "
        f"within {g['tolerance']:.0%} of the TCP maximum ({what}, {g['batches']} batches of <= "
        f"{g['budget_gbps']:g} Gbit/s, {g['seconds']:.0f} s"
        + (f"; {g['retried_alone']} cable(s) re-measured alone after missing under load" if g["retried_alone"] else "")
        + ")"
    )
    if g["ratio_min"] is not None:
        print(
            f"     goodput / TCP max: min {g['ratio_min']:.3f}, mean {g['ratio_mean']:.3f}, max {g['ratio_max']:.3f}"
            f" (TCP max = {f['tcp_max_fraction']:.4f} x shaped rate at MTU {f['mtu']})"
        )
    print(f"     {'cable':>5} {'a':>4} {'b':>4} {'rate':>7} {'TCPmax':>7} {'a->b':>7} {'b->a':>7}  Mbit/s")
    for l in g["links"]:
        name = lambda n: f"h{n}" if n < plan.servers else f"s{n - plan.servers}"  # noqa: E731
        fmt = lambda v: "   -   " if v is None else f"{v:7.1f}"  # noqa: E731
        print(
            f"{mark(not l['error'] and l['a_to_b_mbps'] is not None and l['b_to_a_mbps'] is not None and abs(l['a_to_b_mbps'] / l['tcp_max_mbps'] - 1) <= l['tolerance'] and abs(l['b_to_a_mbps'] / l['tcp_max_mbps'] - 1) <= l['tolerance'])} "
            f"{l['link']:>5} {name(l['a']):>4} {name(l['b']):>4} {l['rate_mbps']:7.1f} {l['tcp_max_mbps']:7.1f} "
            f"{fmt(l['a_to_b_mbps'])} {fmt(l['b_to_a_mbps'])}"
            + (f"  {l['error']}" if l["error"] else "")
            + (
                f"  (first try {fmt(l['first_try'][0]).strip()} / {fmt(l['first_try'][1]).strip()})"
                if l.get("first_try")
                else ""
            )
        )
