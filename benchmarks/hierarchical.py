"""LIBRA bandwidth allocation on a hierarchical network: predicted (and with --measure,
emulated) hierarchical AllReduce time against how the per-server budget is split.

Case: 12 servers as dims 4 x 3 (fc x ring), a planned budget of 100 Gbit/s per server
emulated at 400 Mbit/s (time scale x250), one 64 MiB AllReduce. Rows (topolab.alloc.command, the
same as ``topolab alloc scenarios/hierarchical-12.toml --sweep``):

- libra: the allocator's pipelined split (B_d proportional to a_d), run as the
  pipelined (tapered-chunk) hierarchical AllReduce;
- equal: the budget split evenly, same pipelined schedule;
- libra-sequential: the allocator's sequential split (B_d proportional to sqrt(a_d)), run one
  dimension after the other (one chunk);
- a sweep of dimension 0's share (pipelined), the allocator's choice marked.

Times are emulated seconds ("model" = the allocator's max_d or sum_d of a_d / B_d at TCP
goodput; "predicted" = planner.cost.predict's flow model of the exact schedule). A 3-D case
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
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from contract.physics import DEFAULT_MTU
from planner.bandwidth.libra import allocate, allreduce_workload, model_seconds
from planner.collectives.hierarchical import hierarchical_allreduce_for_plan
from planner.cost.predict import plan_network, predict
from planner.topology.hierarchical import hierarchical_plan
from topolab.alloc.command import SweepCase, format_sweep, plot, sweep
from topolab.common.network import NetworkFlags, network_config

OUT = Path(__file__).resolve().parent / "results"
DIMS, BLOCKS = [4, 3], ["fc", "ring"]
DIMS_3D, BLOCKS_3D = [4, 4, 8], ["fc", "ring", "switch"]
BUDGET_GBPS = 100.0  # planned per-server budget (4 x 25 Gbit/s NICs)
BUDGET_MBPS = 400.0  # its emulated rate (the emulator's default per-link rate)
NBYTES = 64 << 20
CASE = SweepCase(tuple(DIMS), tuple(BLOCKS), BUDGET_GBPS, BUDGET_MBPS, NBYTES, "pipelined", DEFAULT_MTU)


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
        sequential[f"{name}_predicted_s"] = predict(
            schedule, plan_network(plan, BUDGET_MBPS * 1e6, mtu=DEFAULT_MTU)
        ).seconds
    sequential["predicted_gain"] = sequential["equal_predicted_s"] / sequential["libra_predicted_s"]
    return out


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
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    rows = sweep(CASE, args.measure, args.repeat, network_config(None, NetworkFlags(wait_s=args.wait)), log)
    three_d = three_d_case()
    by_name = {r["name"]: r for r in rows}
    libra, equal = by_name["libra"], by_name["equal"]
    summary = {
        "predicted_gain_over_equal": equal["predicted_s"] / libra["predicted_s"],
        "libra_predicted_over_model": libra["predicted_s"] / libra["model_s"],
    }
    if args.measure:
        summary["measured_gain_over_equal"] = equal["measured_s"] / libra["measured_s"]
        summary["libra_measured_over_model"] = libra["measured_s"] / libra["model_s"]
        summary["libra_measured_over_predicted"] = libra["measured_s"] / libra["predicted_s"]
    print(format_sweep(rows, CASE))
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
    plot(rows, out / "hierarchical.png", "12 servers, 4 x 3 fc x ring, 400 Mbit/s per server (pipelined)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
