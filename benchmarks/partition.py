"""How many cables cross machines when a 1024-server TopoOpt network is split over machines.

Partitions the n = 1024, d = 8 TopoOpt network of data-parallel ResNet-50 (the TotientPerms
circulant, strides 1, 7, 33, 181) and of three hybrid jobs over 2 / 4 / 8 / 16 machines with
both engines of planner/partition.py (pymetis when installed, Kernighan-Lin always), and
compares each cut with the contiguous split (servers in index order, equal blocks) and the
spectral lower bound of a balanced k-way cut,

    cut >= lambda_2 / 2 * n * (1 - 1/k)    (Donath and Hoffman 1973; lambda_2 the Laplacian's
                                           second-smallest eigenvalue, exact for a circulant:
                                           lambda_2 = min_j sum_s 2 (1 - cos(2 pi j s / n)))

Prints a table and writes benchmarks/results/partition.json. Acceptance (issue 20): at most
15% of the cables cross at 4 machines.

    .venv/bin/python benchmarks/partition.py
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

from planner import build_plan, parse_scenario
from planner.partition import partition_network, pymetis_available

SERVERS = 1024
DEGREE = 8
MACHINES = (2, 4, 8, 16)
JOBS = (("resnet50", "data"), ("dlrm", "hybrid"), ("candle", "hybrid"), ("ncf", "hybrid"))
ACCEPT_MACHINES, ACCEPT_FRACTION = 4, 0.15


def circulant_lambda2(n: int, strides: tuple[int, ...]) -> float:
    return min(sum(2 * (1 - math.cos(2 * math.pi * j * s / n)) for s in strides) for j in range(1, n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "partition.json"))
    args = parser.parse_args()
    methods = (["pymetis"] if pymetis_available() else []) + ["kernighan-lin"]
    rows = []
    print(
        f"{'job':16} {'strides':18} {'machines':>8} {'method':13} {'cut':>6} {'cut %':>6} {'contig %':>8} {'bound %':>7} {'imbal':>6} {'s':>6}"
    )
    for model, strategy in JOBS:
        s = parse_scenario(
            {
                "cluster": {"servers": SERVERS, "degree": DEGREE, "link_gbps": 100},
                "workload": {"model": model},
                "parallelism": {"strategy": strategy},
                "topology": {"kind": "topoopt"},
            }
        )
        plan = build_plan(s)
        net = plan.network
        edges = [(link.a, link.b) for link in net.links]
        pure_circulant = plan.routes.kind == "circulant" and len(edges) == SERVERS * len(plan.strides)
        lam2 = circulant_lambda2(SERVERS, plan.strides) if pure_circulant else None
        for k in MACHINES:
            block = math.ceil(SERVERS / k)
            contiguous = sum(1 for a, b in edges if a // block != b // block) / len(edges)
            bound = lam2 / 2 * SERVERS * (1 - 1 / k) / len(edges) if lam2 is not None else None
            for method in methods:
                t0 = time.perf_counter()
                p = partition_network(net, k, method=method)
                dt = time.perf_counter() - t0
                row = {
                    "model": model,
                    "strategy": strategy,
                    "strides": list(plan.strides),
                    "servers": SERVERS,
                    "degree": DEGREE,
                    "machines": k,
                    "method": p.method,
                    "cables": p.cables,
                    "cut_cables": p.cut_cables,
                    "cut_fraction": p.cut_fraction,
                    "contiguous_fraction": contiguous,
                    "spectral_bound_fraction": bound,
                    "imbalance": p.imbalance,
                    "seconds": dt,
                }
                rows.append(row)
                print(
                    f"{model + '/' + strategy:16} {','.join(map(str, plan.strides)):18} {k:>8} {p.method:13} "
                    f"{p.cut_cables:>6} {p.cut_fraction:>6.1%} {contiguous:>8.1%} "
                    f"{(f'{bound:.1%}' if bound is not None else '-'):>7} {p.imbalance:>6.3f} {dt:>6.2f}"
                )
    best = {
        (r["model"], r["strategy"]): r["cut_fraction"]
        for r in rows
        if r["machines"] == ACCEPT_MACHINES and r["method"] == methods[0]
    }
    for (model, strategy), fraction in best.items():
        verdict = "meets" if fraction <= ACCEPT_FRACTION else "misses"
        print(
            f"{model}/{strategy} at {ACCEPT_MACHINES} machines: {fraction:.1%} cross, {verdict} the {ACCEPT_FRACTION:.0%} target"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": platform.machine(),
                "python": platform.python_version(),
                "pymetis": pymetis_available(),
                # a random balanced cut, for scale: (1 - 1/k) of the cables cross
                "random_cut_fraction": {str(k): 1 - 1 / k for k in MACHINES},
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"written to {out}")


if __name__ == "__main__":
    main()
