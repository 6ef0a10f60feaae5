"""LIBRA bandwidth allocation on a hierarchical network: predicted (and with --measure,
emulated) hierarchical AllReduce time against how the per-server budget is split.

Case: 12 servers as dims 4 x 3 (fc x ring), a planned budget of 100 Gbit/s per server
emulated at 400 Mbit/s (time scale x250), one 64 MiB AllReduce. Rows:

- libra-pipelined: the allocator's pipelined split (B_d proportional to a_d), run as the
  pipelined (tapered-chunk) hierarchical AllReduce;
- equal: the budget split evenly, same pipelined schedule;
- libra-sequential: the allocator's sequential split (B_d proportional to sqrt(a_d)), run one
  dimension after the other (one chunk);
- a sweep of dimension 0's share (pipelined), the allocator's choice marked.

Times are emulated seconds ("model" = the allocator's max_d or sum_d of a_d / B_d at TCP
goodput; "predicted" = planner.predict's flow model of the exact schedule). A 3-D case
(4 x 4 x 8 = 128 servers, fc x ring x switch) is planned and predicted only (see
`three_d_case`).

    .venv/bin/python benchmarks/hierarchical.py             # predictions only (seconds)
    sudo .venv/bin/python benchmarks/hierarchical.py --measure [--repeat 2]

Writes benchmarks/results/hierarchical.json and hierarchical.png (time vs share).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from contract.physics import tcp_goodput_fraction
from planner.allocation import allocate, allreduce_workload, model_seconds
from planner.collectives.hierarchical import PIPELINE_CHUNKS, hierarchical_allreduce_for_plan
from planner.hierarchical import hierarchical_plan
from planner.predict import plan_network, predict

OUT = Path(__file__).resolve().parent / "results"
DIMS, BLOCKS = [4, 3], ["fc", "ring"]
DIMS_3D, BLOCKS_3D = [4, 4, 8], ["fc", "ring", "switch"]
BUDGET_GBPS = 100.0  # planned per-server budget (4 x 25 Gbit/s NICs)
BUDGET_MBPS = 400.0  # its emulated rate (the emulator's default per-link rate)
NBYTES = 64 << 20
MTU = 9000
SWEEP_SHARES = (0.5, 0.6, 0.7, 0.75, 0.85, 0.9, 0.95)  # dimension 0's share; LIBRA's is added


def config_rows(budget_gbps: float) -> list[dict]:
    """The named configurations and the share sweep (dimension 0's share), deduplicated."""
    workload = allreduce_workload(NBYTES)
    pipe = allocate(DIMS, workload, budget_gbps, mode="pipelined")
    seq = allocate(DIMS, workload, budget_gbps, mode="sequential")
    rows = [
        {"name": "libra-pipelined", "shares": list(pipe.shares), "chunks": PIPELINE_CHUNKS, "mode": "pipelined"},
        {"name": "equal", "shares": [0.5, 0.5], "chunks": PIPELINE_CHUNKS, "mode": "pipelined"},
        {"name": "libra-sequential", "shares": list(seq.shares), "chunks": 1, "mode": "sequential"},
    ]
    for share in SWEEP_SHARES:
        if all(abs(r["shares"][0] - share) > 1e-9 or r["mode"] != "pipelined" for r in rows):
            rows.append(
                {
                    "name": f"sweep {share:.2f}",
                    "shares": [share, 1 - share],
                    "chunks": PIPELINE_CHUNKS,
                    "mode": "pipelined",
                }
            )
    a = pipe.dimension_bytes
    goodput = tcp_goodput_fraction(MTU)
    for r in rows:
        emulated_gbps = [s * BUDGET_MBPS / 1e3 * goodput for s in r["shares"]]
        r["model_s"] = model_seconds(a, emulated_gbps, r["mode"])
        r["libra"] = r["name"].startswith("libra")
    return rows


def predict_row(row: dict) -> float:
    plan = hierarchical_plan(DIMS, BLOCKS, BUDGET_GBPS, row["shares"])
    schedule = hierarchical_allreduce_for_plan(plan, NBYTES, row["chunks"])
    return predict(schedule, plan_network(plan, BUDGET_MBPS * 1e6, mtu=MTU)).seconds


def measure_row(row: dict, repeat: int, wait_s: float) -> dict:
    """Build the row's network on the emulator and time the schedule (verified by workers)."""
    from emulator import EmulatedNetwork
    from workers.coordinator import Coordinator

    plan = hierarchical_plan(DIMS, BLOCKS, BUDGET_GBPS, row["shares"])
    schedule = hierarchical_allreduce_for_plan(plan, NBYTES, row["chunks"])
    config = {"link_mbps": BUDGET_MBPS, "reference_gbps": BUDGET_GBPS, "mtu": MTU, "lock_wait_s": wait_s}
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    with EmulatedNetwork(plan, config, log=log) as net:
        hosts = [net.host_address(i) for i in range(plan.servers)]

        def spawn(rank: int, argv: list[str]) -> subprocess.Popen:
            return net.popen(rank, argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

        times, cpu, verified = [], [], True
        with Coordinator(schedule.to_dict(), hosts, spawn=spawn, timeout_s=60.0) as coord:
            for i in range(1 + repeat):  # one warm-up
                res = coord.run_iteration(i)
                verified = verified and res.ok
                log(
                    f"  {row['name']}: {'warm-up' if i == 0 else i} {res.time_s:.3f} s {'verified' if res.ok else 'FAILED'}"
                )
                if i:
                    times.append(res.time_s)
                    cpu.append(sum(r.get("cpu_s", 0.0) for r in res.ranks))
    t = statistics.median(times)
    return {"measured_s": t, "times_s": times, "verified": verified, "worker_cpu_cores": statistics.median(cpu) / t}


def three_d_case() -> dict:
    """128 servers, fc x ring x switch: LIBRA against equal shares. Pipelined by the
    allocator's model; sequential (one chunk) also by the flow model. The flow model of the
    128-rank pipelined schedule is left out: its cost grows with the concurrent flows (four
    chunks already take over a minute), and the 12-server rows check it against the model."""
    workload = allreduce_workload(NBYTES)
    budget = BUDGET_MBPS / 1e3
    equal_shares = [1 / len(DIMS_3D)] * len(DIMS_3D)
    out: dict = {"dims": DIMS_3D, "blocks": BLOCKS_3D, "servers": 128}
    for mode in ("pipelined", "sequential"):
        libra = allocate(DIMS_3D, workload, budget, mode=mode)
        equal = model_seconds(libra.dimension_bytes, [budget * s for s in equal_shares], mode)
        out[mode] = {
            "libra_shares": list(libra.shares),
            "libra_model_s": libra.seconds,
            "equal_model_s": equal,
            "model_gain": equal / libra.seconds,
        }
    sequential = out["sequential"]
    for name, shares in (("libra", sequential["libra_shares"]), ("equal", equal_shares)):
        plan = hierarchical_plan(DIMS_3D, BLOCKS_3D, BUDGET_GBPS, shares)
        schedule = hierarchical_allreduce_for_plan(plan, NBYTES, 1)
        sequential[f"{name}_predicted_s"] = predict(schedule, plan_network(plan, BUDGET_MBPS * 1e6, mtu=MTU)).seconds
    sequential["predicted_gain"] = sequential["equal_predicted_s"] / sequential["libra_predicted_s"]
    return out


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pipelined = sorted((r for r in rows if r["mode"] == "pipelined"), key=lambda r: r["shares"][0])
    xs = [r["shares"][0] for r in pipelined]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(xs, [r["model_s"] for r in pipelined], "k:", label="allocator model (max_d a_d / B_d)")
    ax.plot(xs, [r["predicted_s"] for r in pipelined], "o-", label="predicted (flow model)")
    if all("measured_s" in r for r in pipelined):
        ax.plot(xs, [r["measured_s"] for r in pipelined], "s-", label="measured (emulated)")
    libra = next(r for r in rows if r["name"] == "libra-pipelined")
    ax.axvline(libra["shares"][0], color="grey", linestyle="--", linewidth=1)
    ax.annotate("LIBRA", (libra["shares"][0], libra["predicted_s"]), textcoords="offset points", xytext=(6, 30))
    ax.set_xlabel("share of the budget in dimension 0 (fc, 4 servers)")
    ax.set_ylabel("64 MiB AllReduce time (emulated s)")
    ax.set_title("12 servers, 4 x 3 fc x ring, 400 Mbit/s per server (pipelined)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measure", action="store_true", help="also run every row on the emulator (root)")
    ap.add_argument("--repeat", type=int, default=2, help="timed iterations per row after one warm-up")
    ap.add_argument("--wait", type=float, default=600.0, help="wait this long for another emulation run's lock")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    if args.measure and os.geteuid() != 0:
        print("hierarchical: --measure needs root (emulated network)", file=sys.stderr)
        return 2
    t0 = time.time()
    rows = config_rows(BUDGET_MBPS / 1e3)
    for r in rows:
        r["predicted_s"] = predict_row(r)
        if args.measure:
            r.update(measure_row(r, args.repeat, args.wait))
    three_d = three_d_case()
    by_name = {r["name"]: r for r in rows}
    summary = {
        "predicted_gain_over_equal": by_name["equal"]["predicted_s"] / by_name["libra-pipelined"]["predicted_s"],
        "libra_predicted_over_model": by_name["libra-pipelined"]["predicted_s"] / by_name["libra-pipelined"]["model_s"],
    }
    if args.measure:
        summary["measured_gain_over_equal"] = by_name["equal"]["measured_s"] / by_name["libra-pipelined"]["measured_s"]
        summary["libra_measured_over_model"] = (
            by_name["libra-pipelined"]["measured_s"] / by_name["libra-pipelined"]["model_s"]
        )
        summary["libra_measured_over_predicted"] = (
            by_name["libra-pipelined"]["measured_s"] / by_name["libra-pipelined"]["predicted_s"]
        )
    print(f"# {DIMS} {BLOCKS}, {BUDGET_MBPS:g} Mbit/s per server emulated, 64 MiB AllReduce (emulated seconds)")
    print(
        f"{'config':<17} {'B_0/B_1 (Mbit/s)':>17} {'chunks':>6} {'model':>7} {'predicted':>9} {'measured':>9} {'cpu':>5}"
    )
    for r in rows:
        split = "/".join(f"{s * BUDGET_MBPS:.0f}" for s in r["shares"])
        measured = f"{r['measured_s']:9.3f}" if "measured_s" in r else f"{'-':>9}"
        cpu = f"{r['worker_cpu_cores']:5.2f}" if "worker_cpu_cores" in r else f"{'-':>5}"
        mark = " <- LIBRA" if r["libra"] else ""
        print(
            f"{r['name']:<17} {split:>17} {r['chunks']:>6} {r['model_s']:7.3f} {r['predicted_s']:9.3f} {measured} {cpu}{mark}"
        )
    for key, value in summary.items():
        print(f"{key}: {value:.3f}")
    for mode in ("pipelined", "sequential"):
        case = three_d[mode]
        line = (
            f"3-D {' x '.join(map(str, DIMS_3D))} {' x '.join(BLOCKS_3D)} (128 servers), {mode}: LIBRA "
            f"{'/'.join(f'{s * BUDGET_MBPS:.0f}' for s in case['libra_shares'])} Mbit/s, model "
            f"{case['libra_model_s']:.3f} s vs equal {case['equal_model_s']:.3f} s (gain {case['model_gain']:.2f}x)"
        )
        if "predicted_gain" in case:
            line += (
                f"; predicted {case['libra_predicted_s']:.3f} vs {case['equal_predicted_s']:.3f} s "
                f"(gain {case['predicted_gain']:.2f}x)"
            )
        print(line)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "benchmark": "hierarchical",
        "dims": DIMS,
        "blocks": BLOCKS,
        "budget_gbps": BUDGET_GBPS,
        "budget_mbps": BUDGET_MBPS,
        "bytes": NBYTES,
        "rows": rows,
        "summary": summary,
        "three_d": three_d,
        "measured": args.measure,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "elapsed_s": time.time() - t0,
    }
    (out / "hierarchical.json").write_text(json.dumps(doc, indent=2))
    plot(rows, out / "hierarchical.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
