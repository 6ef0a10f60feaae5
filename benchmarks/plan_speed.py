"""How long `topolab plan` takes to build a full plan (topology + every route + summary).

Times build_plan for n = 128, 432, 1024 servers with d = 8 on every topology kind (the 2-D
torus has degree 4 by definition), data-parallel ResNet-50 and hybrid DLRM traffic. Prints a
table and writes benchmarks/results/plan_speed.json. Target (issue 2): the 1024-server TopoOpt
plan with all routes in under 2 s on the 2-core reference machine.

    .venv/bin/python benchmarks/plan_speed.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from planner import build_plan, parse_scenario

KINDS = ("topoopt", "switch", "expander", "torus", "ring")
SIZES = (128, 432, 1024)
JOBS = (("resnet50", "data"), ("dlrm", "hybrid"))


def time_plan(n: int, kind: str, model: str, strategy: str, repeat: int) -> dict:
    d = 4 if kind == "torus" else 8
    s = parse_scenario(
        {
            "cluster": {"servers": n, "degree": d, "link_gbps": 100},
            "workload": {"model": model},
            "parallelism": {"strategy": strategy},
            "topology": {"kind": kind},
        }
    )
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        plan = build_plan(s)
        _ = plan.next_hop  # materialize every route
        times.append(time.perf_counter() - t0)
    return {
        "servers": n,
        "degree": d,
        "kind": kind,
        "model": model,
        "strategy": strategy,
        "seconds_median": statistics.median(times),
        "seconds_max": max(times),
        "diameter": plan.summary.diameter,
        "mean_hops": plan.summary.mean_hops,
        "routes": plan.routes.kind,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "plan_speed.json"))
    args = parser.parse_args()
    rows = []
    print(f"{'servers':>7} {'kind':9} {'job':16} {'median s':>9} {'max s':>7} {'diam':>4} {'mean hops':>9}")
    for n in SIZES:
        for kind in KINDS:
            for model, strategy in JOBS:
                r = time_plan(n, kind, model, strategy, args.repeat)
                rows.append(r)
                print(
                    f"{n:>7} {kind:9} {model + '/' + strategy:16} {r['seconds_median']:>9.3f} "
                    f"{r['seconds_max']:>7.3f} {r['diameter']:>4} {r['mean_hops']:>9.3f}",
                    flush=True,
                )
    target = [r for r in rows if r["servers"] == 1024 and r["kind"] == "topoopt"]
    worst = max(r["seconds_max"] for r in target)
    verdict = "PASS" if worst < 2.0 else "FAIL"
    print(f"1024-server TopoOpt plan, slowest run: {worst:.3f} s (target < 2 s): {verdict}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps(
            {
                "machine": platform.node(),
                "cpus": __import__("os").cpu_count(),
                "repeat": args.repeat,
                "rows": rows,
                "topoopt_1024_worst_s": worst,
                "target_s": 2.0,
            },
            indent=1,
        )
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
