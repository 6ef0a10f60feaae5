"""Single ring vs TopoOpt multi-ring vs double binary tree AllReduce, side by side, on one
emulated network (issue 4's comparison). Needs root.

For each size (doubling range) the algorithms run one after the other on the same emulated
network, each with one warm-up and --repeat timed iterations verified by every worker, so
they see the same machine load. Prints a table (time, algbw, busbw, ideal, measured/ideal),
writes benchmarks/results/collective_compare.json and a busbw-vs-size plot (PNG).

With --rates R1,R2,... it instead sweeps the emulated per-link rate (one network per rate)
for the first algorithm at the largest size, and reports the highest rate whose
measured/ideal stays within --target (default 1.10).

    .venv/bin/python benchmarks/collective_compare.py [SCENARIO] [--bytes 1M..64M] [--repeat 3]
    .venv/bin/python benchmarks/collective_compare.py --algorithms topoopt --bytes 64M \\
        --rates 100,200,300,400
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner import build_plan, load_scenario
from topolab.collective.command import format_size, format_table, parse_algorithms, parse_sizes, run_on_emulator
from topolab.common.network import NetworkFlags

OUT = Path(__file__).resolve().parent / "results"


def plot(results: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for alg in dict.fromkeys(r["algorithm"] for r in results):
        rows = [r for r in results if r["algorithm"] == alg]
        xs = [r["bytes"] / (1 << 20) for r in rows]
        ax1.plot(xs, [r["busbw_MBps"] for r in rows], marker="o", label=alg)
        ax2.plot(xs, [r["measured_over_ideal"] for r in rows], marker="o", label=alg)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("AllReduce size (MiB)")
        ax.grid(True, alpha=0.3)
    ax1.set_ylabel("busbw (MB/s, emulated)")
    ax2.set_ylabel("measured / ideal")
    ax2.axhline(1.10, color="grey", linestyle="--", linewidth=1)
    ax1.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", nargs="?", default="scenarios/topoopt-12.toml")
    ap.add_argument("--algorithms", default="ring,topoopt,dbtree")
    ap.add_argument("--bytes", default="1M..64M")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rates", default="", help="comma-separated Mbit/s: sweep the link rate")
    ap.add_argument("--target", type=float, default=1.10)
    ap.add_argument(
        "--wait", type=float, default=600.0, help="wait this long for another emulation run to release the lock"
    )
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("collective_compare: needs root (emulated network)", file=sys.stderr)
        return 2
    algorithms = parse_algorithms(args.algorithms)
    sizes = parse_sizes(args.bytes)
    scenario = load_scenario(args.scenario)
    plan = build_plan(scenario)
    OUT.mkdir(exist_ok=True)
    machine = {"cpus": os.cpu_count(), "kernel": platform.release(), "loadavg_before": os.getloadavg()}

    if args.rates:
        rates = [float(r) for r in args.rates.split(",")]
        rows, best = [], None
        for rate in rates:
            _, results = run_on_emulator(
                scenario,
                plan,
                algorithms[:1],
                sizes[-1:],
                repeat=args.repeat,
                link_mbps=rate,
                flags=NetworkFlags(wait_s=args.wait),
            )
            r = results[0]
            rows.append({"link_mbps": rate, **r.to_dict()})
            if r.verified and r.ratio <= args.target:
                best = rate if best is None else max(best, rate)
        print(
            f"# {scenario.name}: {algorithms[0]} AllReduce of {format_size(sizes[-1])}, "
            f"median of {args.repeat}, per emulated link rate"
        )
        print(f"{'Mbit/s':>8} {'time(ms)':>10} {'ideal(ms)':>10} {'meas/ideal':>10} {'verified':>8}")
        for row in rows:
            print(
                f"{row['link_mbps']:>8g} {row['time_s'] * 1e3:>10.1f} {row['ideal_s'] * 1e3:>10.1f} "
                f"{row['measured_over_ideal']:>10.3f} {'yes' if row['verified'] else 'NO':>8}"
            )
        print(
            f"highest rate within {args.target:.2f}x ideal: "
            f"{'none of those tried' if best is None else f'{best:g} Mbit/s'}"
        )
        out = Path(args.out) if args.out else OUT / "collective_rates.json"
        out.write_text(
            json.dumps(
                {
                    "scenario": scenario.name,
                    "algorithm": algorithms[0],
                    "bytes": sizes[-1],
                    "target": args.target,
                    "highest_rate_within_target": best,
                    "rows": rows,
                    "machine": machine,
                    "date": time.strftime("%Y-%m-%d %H:%M"),
                },
                indent=2,
            )
        )
        print(f"wrote {out}")
        return 0

    collective, results = run_on_emulator(
        scenario, plan, algorithms, sizes, repeat=args.repeat, flags=NetworkFlags(wait_s=args.wait)
    )
    print(collective.header)
    print(format_table(results))
    doc = collective.to_dict()
    doc["machine"] = dict(machine, loadavg_after=os.getloadavg())
    doc["date"] = time.strftime("%Y-%m-%d %H:%M")
    out = Path(args.out) if args.out else OUT / "collective_compare.json"
    out.write_text(json.dumps(doc, indent=2))
    png = out.with_suffix(".png")
    plot(
        doc["results"],
        png,
        f"{scenario.name}: AllReduce on the emulated network ({collective.emulation.link_mbps:g} Mbit/s per link)",
    )
    print(f"wrote {out} and {png}")
    return 0 if all(r.verified for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
