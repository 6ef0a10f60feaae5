"""How fast the parallelization search and its simulator are at the paper's scale.

For each of the six models on 128 servers, d = 4 and 8, B = 100 Gbps (TopoOpt's evaluation
setting), runs the alternating MCMC search (`planner.search.search`, TopoOpt topology,
paper degree split) with the authors' budget of 4000 steps and reports wall time,
simulator evaluations per minute, TopologyFinder builds and the result. Separately times
the simulator alone on random strategies (one fixed plan, warm per-plan caches, as during
a search). Targets (issue 6): every search under 60 s; thousands of evaluations per minute.
Prints a table and writes benchmarks/results/search_speed.json.

    .venv/bin/python benchmarks/search_speed.py [--steps 4000] [--models dlrm,bert]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from pathlib import Path

from planner import parse_scenario
from planner.build import build_plan
from planner.cost.costmodel import CostConfig, Simulator
from planner.model.fusion import FusionConfig, fuse
from planner.model.zoo import MODELS
from planner.search import SearchConfig, data_parallel, model_graph, search, strategy_demand
from planner.search.mcmc import propose

TARGET_S = 60.0


def scenario(model: str, n: int, d: int, gbps: float, steps: int):
    return parse_scenario(
        {
            "cluster": {"servers": n, "degree": d, "link_gbps": gbps, "latency_us": 1},
            "workload": {"model": model, "batch_per_server": 128},
            "parallelism": {"strategy": "search", "search_steps": steps, "seed": 1},
            "topology": {"kind": "topoopt", "degree_split": "paper"},
        }
    )


def simulator_throughput(model: str, n: int, d: int, gbps: float, seconds: float = 3.0) -> dict:
    """Evaluations per minute of random one-operator changes on a fixed plan."""
    s = scenario(model, n, d, gbps, 1)
    graph = fuse(model_graph(model), FusionConfig(server_gbps=d * gbps))
    plan = build_plan(s, strategy_demand(graph, data_parallel(graph), n, 128))
    sim = Simulator(plan, graph, CostConfig(batch=128))
    rng = random.Random(1)
    strategy = data_parallel(graph)
    count = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        strategy = propose(graph, strategy, n, rng, SearchConfig())
        sim.iteration(strategy)
        count += 1
    elapsed = time.perf_counter() - t0
    return {"evaluations": count, "seconds": elapsed, "per_minute": count / elapsed * 60}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--servers", type=int, default=128)
    parser.add_argument("--degrees", default="4,8")
    parser.add_argument("--link-gbps", type=float, default=100.0)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "search_speed.json"))
    args = parser.parse_args()
    models = args.models.split(",")
    degrees = [int(x) for x in args.degrees.split(",")]
    rows = []
    print(
        f"search: {args.servers} servers, B = {args.link_gbps:g} Gbps, {args.steps} MCMC steps, TopoOpt (paper split)"
    )
    print(
        f"{'model':9} {'d':>2} {'search s':>9} {'cpu s':>6} {'evals':>6} {'evals/min':>9} {'topo builds':>11} {'changes':>7} "
        f"{'best ms':>9} {'DP ms':>9} {'speedup':>7} {'d_AR+d_MP':>9}"
    )
    for model in models:
        for d in degrees:
            cpu0 = time.process_time()
            r = search(
                scenario(model, args.servers, d, args.link_gbps, args.steps), SearchConfig(steps=args.steps, seed=1)
            )
            cpu = time.process_time() - cpu0
            row = {
                "model": model,
                "servers": args.servers,
                "degree": d,
                "link_gbps": args.link_gbps,
                "steps": args.steps,
                "seconds": r.seconds,
                "cpu_seconds": cpu,
                "evaluations": r.evaluations,
                "evaluations_per_minute": r.evaluations / r.seconds * 60,
                "topology_builds": r.topology_builds,
                "topology_changes": r.topology_changes,
                "accepted": r.accepted,
                "best_iteration_s": r.cost.iteration_s,
                "data_parallel_iteration_s": r.data_parallel.iteration_s,
                "d_allreduce": r.plan.extra.get("d_allreduce"),
                "d_mp": r.plan.extra.get("d_mp"),
                "strategy": r.choices(),
            }
            rows.append(row)
            print(
                f"{model:9} {d:>2} {r.seconds:>9.1f} {cpu:>6.1f} {r.evaluations:>6} {row['evaluations_per_minute']:>9.0f} "
                f"{r.topology_builds:>11} {r.topology_changes:>7} {r.cost.iteration_s * 1e3:>9.3f} "
                f"{r.data_parallel.iteration_s * 1e3:>9.3f} {r.speedup_over_data_parallel:>6.2f}x "
                f"{row['d_allreduce']:>4}+{row['d_mp']}",
                flush=True,
            )
    print("\nsimulator alone (fixed plan, random one-operator changes, d = 8):")
    sim_rows = []
    for model in models:
        t = simulator_throughput(model, args.servers, 8, args.link_gbps)
        t["model"] = model
        sim_rows.append(t)
        print(f"  {model:9} {t['per_minute']:>9.0f} evaluations/min")
    worst = max(r["seconds"] for r in rows)
    worst_cpu = max(r["cpu_seconds"] for r in rows)
    load = os.getloadavg()[0]
    slowest_sim = min(t["per_minute"] for t in sim_rows)
    print(
        f"\nslowest search: {worst:.1f} s wall, {worst_cpu:.1f} s CPU (target < {TARGET_S:g} s; "
        f"load average {load:.1f} on {os.cpu_count()} CPUs): {'PASS' if worst < TARGET_S else 'FAIL'}"
    )
    print(
        f"slowest simulator: {slowest_sim:.0f} evaluations/min (target: thousands): "
        f"{'PASS' if slowest_sim >= 1000 else 'FAIL'}"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps(
            {
                "machine": platform.node(),
                "cpus": os.cpu_count(),
                "steps": args.steps,
                "rows": rows,
                "simulator": sim_rows,
                "slowest_search_s": worst,
                "slowest_search_cpu_s": worst_cpu,
                "load_average_1min": load,
                "target_s": TARGET_S,
                "slowest_simulator_per_minute": slowest_sim,
            },
            indent=1,
        )
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
