"""Predicted vs measured iteration time on the 12-server scenarios (issue 5's fidelity target).

Runs `topolab run` (the same code path) on TopoOpt, switch and expander with hybrid DLRM and
data-parallel ResNet-50, one after another in one invocation, and prints the median
|predicted - measured| / measured per scenario; writes benchmarks/results/run_accuracy.json.
Needs root. Target: every error under 10%.

    .venv/bin/python benchmarks/run_accuracy.py [--iterations 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from planner import load_scenario
from topolab.run.measured_run import execute

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = (
    "topoopt-12",
    "switch-12",
    "expander-12",
    "resnet50-topoopt-12",
    "resnet50-switch-12",
    "resnet50-expander-12",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--wait", type=float, default=600.0, help="wait for another run's lock")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "run_accuracy.json"))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="topolab-acc-") as tmp:
        for name in SCENARIOS:
            s = load_scenario(REPO / "scenarios" / f"{name}.toml")
            res = execute(s, Path(tmp) / name, args.iterations, lock_wait_s=args.wait, log=lambda m: None)
            summ = res.summarize()
            rows.append(
                {
                    "scenario": name,
                    "topology": s.topology.kind,
                    "model": s.workload.model,
                    "measured_ms": summ.median_real_ms,
                    "predicted_ms": res.predicted.real_ms,
                    "error": summ.error,
                    "verified": summ.verified,
                    "op_overhead_us": res.calibration.op_overhead_s * 1e6,
                    "time_scale": res.emulation.time_scale,
                }
            )
            r = rows[-1]
            print(
                f"{name:22} measured {r['measured_ms']:8.3f} ms  predicted {r['predicted_ms']:8.3f} ms  "
                f"error {100 * r['error']:5.1f}%  verified {r['verified']}",
                flush=True,
            )
    med = statistics.median(r["error"] for r in rows)
    worst = max(r["error"] for r in rows)
    print(f"median error {100 * med:.1f}%, worst {100 * worst:.1f}% (target: under 10%)")
    Path(args.out).write_text(
        json.dumps({"iterations": args.iterations, "rows": rows, "median_error": med, "worst_error": worst}, indent=1)
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
