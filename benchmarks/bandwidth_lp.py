"""How long the per-destination bandwidth LP takes, and what it buys on the 12-server scenarios.

1. The LP of a full uniform all-to-all on a 128-server, degree-8 TopoOpt plan (target of
   issue 15: under 30 s; planner.bandwidth.multipath solves it rotation-reduced with k = 4 paths per
   pair), and optionally (``--generic N``) the unreduced LP of an N-server expander.
2. On the shipped 12-server scenarios (topoopt, expander, switch): the DLRM embedding
   all-to-all phase's LP time against single-path routing, and the flow-level prediction
   (planner.cost.predict at the scenario's emulated link rate, in emulated seconds) of that phase's
   transfers (planner.collectives.p2p), single-path vs planned.

Prints a table and writes benchmarks/results/bandwidth_lp.json.

    .venv/bin/python benchmarks/bandwidth_lp.py [--generic 48]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import time
from pathlib import Path

from contract.emulation import emulated_rates
from contract.schedule import ScheduleBuilder
from planner import build_plan, load_scenario, parse_scenario
from planner.bandwidth.multipath import allocate_for_plan, embedding_alltoall_traffic
from planner.collectives.p2p import add_p2p_transfers, all_to_all
from planner.cost.predict import plan_network, predict

RESULTS = Path(__file__).resolve().parent / "results"
SCENARIOS = ("topoopt-12", "expander-12", "switch-12")
LARGE_PAIR_BYTES = 2**20
ITEM = 4


def time_alltoall_lp(n: int, kind: str) -> dict:
    scenario = {
        "cluster": {"servers": n, "degree": 8, "link_gbps": 100},
        "workload": {"model": "resnet50"},
        "parallelism": {"strategy": "data"},
        "topology": {"kind": kind},
    }
    plan = build_plan(parse_scenario(scenario))
    traffic = {(s, d): float(v) for s, d, v in all_to_all(range(n), LARGE_PAIR_BYTES)}
    t0 = time.perf_counter()
    result = allocate_for_plan(plan, traffic)
    return {
        "servers": n,
        "degree": 8,
        "topology": kind,
        "pairs": len(traffic),
        "lp_columns": result.columns,
        "seconds": time.perf_counter() - t0,
        "phase_planned_s": result.seconds,
        "phase_single_path_s": result.single_path_seconds,
    }


def scenario_phase(name: str) -> dict:
    scenario = load_scenario(f"scenarios/{name}.toml")
    plan = build_plan(scenario)
    traffic = embedding_alltoall_traffic(plan)
    result = allocate_for_plan(plan, traffic)
    planned_plan = dataclasses.replace(plan, allocation=result.allocation)
    rates = emulated_rates(plan.network, scenario.emulation)
    transfers = [(s, d, int(v) // ITEM * ITEM) for (s, d), v in sorted(traffic.items())]
    predicted = {}
    for routing, p in (("single", plan), ("planned", planned_plan)):
        b = ScheduleBuilder(plan.servers, f"embedding-alltoall/{routing}")
        add_p2p_transfers(b, transfers, "a2a", network=p.network)
        predicted[routing] = predict(b.build(), plan_network(p, rates=rates)).seconds
    paths = [len(p.paths) for p in result.allocation]
    return {
        "scenario": name,
        "pairs": len(paths),
        "pairs_split": sum(p > 1 for p in paths),
        "lp_seconds": result.solve_seconds,
        "lp_phase_planned_s": result.seconds,
        "lp_phase_single_path_s": result.single_path_seconds,
        "phase_bytes": sum(v for _, _, v in transfers),
        "emulated_link_mbps": scenario.emulation.link_mbps,
        "time_scale": rates.time_scale,
        "predicted_single_s": predicted["single"],
        "predicted_planned_s": predicted["planned"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generic", type=int, default=0, metavar="N", help="also time the unreduced LP on N servers")
    args = parser.parse_args()
    lps = [time_alltoall_lp(128, "topoopt")]
    if args.generic:
        lps.append(time_alltoall_lp(args.generic, "expander"))
    for r in lps:
        print(
            f"{r['topology']:>9} n={r['servers']:<4} d=8 all-to-all: {r['pairs']} pairs, {r['lp_columns']} LP columns, "
            f"{r['seconds']:.2f} s; phase {r['phase_planned_s'] * 1e3:.3f} ms vs {r['phase_single_path_s'] * 1e3:.3f} ms"
        )
    phases = [scenario_phase(name) for name in SCENARIOS]
    print("DLRM embedding all-to-all: LP (real ms) and flow-level prediction (emulated s)")
    print(f"{'scenario':<12} {'split':>7} {'LP bound':>10} {'LP single':>10} {'pred single':>12} {'pred planned':>13}")
    for p in phases:
        print(
            f"{p['scenario']:<12} {p['pairs_split']:>3}/{p['pairs']:<3} {p['lp_phase_planned_s'] * 1e3:>8.3f}ms "
            f"{p['lp_phase_single_path_s'] * 1e3:>8.3f}ms {p['predicted_single_s']:>11.4f}s {p['predicted_planned_s']:>12.4f}s"
        )
    RESULTS.mkdir(exist_ok=True)
    out = {"machine": platform.node(), "python": platform.python_version(), "lp": lps, "phases": phases}
    (RESULTS / "bandwidth_lp.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"written to {RESULTS / 'bandwidth_lp.json'}")


if __name__ == "__main__":
    main()
