"""Per-destination bandwidth allocation and multipath policy routing: the ablation, measured.

Part 1, the embedding all-to-all phase of the DLRM job on the shipped 12-server scenarios
(topoopt, expander, switch), each under four routings (topolab.collective.routing_phase: single,
rates only, multipath only, planned = both), on networks built for each: the LP's bound, the
flow model's prediction and the measured time, emulated seconds (the phase's bytes scaled so
the single-path phase lasts about 1 s; ratios do not depend on it). The same figures as
``topolab collective SCENARIO --algorithm alltoall --routing single,rates,multipath,planned``.

Part 2, whole hybrid DLRM iterations on topoopt-12 (``topolab run``) with the destination
routes and with ``[topology] routing = "planned"`` (the iteration's model-parallel traffic
allocated), runs alternated so both see the same machine.

    sudo .venv/bin/python benchmarks/routing_ablation.py [--repeat 3] [--rounds 3]

Writes benchmarks/results/routing_ablation.json and routing_ablation.png.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from contract.emulation import emulated_rates
from planner import build_plan, load_scenario
from topolab.collective.routing_phase import VARIANTS, measure_phase, phase_traffic, scale_factor
from topolab.common.network import network_config
from topolab.results.collective_results import format_phase_table
from topolab.run.measured_run import execute

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"
SCENARIOS = ("topoopt-12", "expander-12", "switch-12")


def phase_rows(repeat: int) -> list[dict]:
    rows = []
    for name in SCENARIOS:
        s = load_scenario(ROOT / "scenarios" / f"{name}.toml")
        plan = build_plan(s)
        traffic = phase_traffic(plan, s)
        factor = scale_factor(plan, traffic, emulated_rates(plan.network, s.emulation).time_scale)
        results = measure_phase(
            plan, traffic, list(VARIANTS), network_config(s.emulation), factor=factor, repeat=repeat
        )
        print(
            format_phase_table(results, f"{name}: embedding all-to-all phase, emulated seconds (bytes x{factor:.3g})")
        )
        rows.append({"scenario": name, "factor": factor, "variants": [r.to_dict() for r in results]})
    return rows


def iteration_rows(rounds: int) -> dict:
    base = ROOT / "scenarios" / "topoopt-12.toml"
    planned = Path(tempfile.mkdtemp()) / "topoopt-12-planned.toml"
    planned.write_text(base.read_text().replace("[topology]", '[topology]\nrouting = "planned"', 1))
    runs: dict[str, list[dict]] = {"single": [], "planned": []}
    for _ in range(rounds):
        for label, path in (("single", base), ("planned", planned)):
            s = load_scenario(path)
            with tempfile.TemporaryDirectory() as out:
                res = execute(s, Path(out), log=lambda msg: None)
            summ = res.summarize()
            runs[label].append(
                {
                    "measured_ms": summ.median_real_ms,
                    "predicted_ms": res.predicted.real_ms if res.predicted else None,
                    "verified": summ.verified,
                }
            )
            print(f"  iteration {label}: {runs[label][-1]}", flush=True)
    summary = {
        label: {
            "measured_ms": statistics.median(r["measured_ms"] for r in rs),
            "predicted_ms": statistics.median(r["predicted_ms"] for r in rs),
            "verified": all(r["verified"] for r in rs),
        }
        for label, rs in runs.items()
    }
    summary["speedup_measured"] = summary["single"]["measured_ms"] / summary["planned"]["measured_ms"]
    summary["speedup_predicted"] = summary["single"]["predicted_ms"] / summary["planned"]["predicted_ms"]
    print(
        f"topoopt-12 hybrid DLRM iteration: single {summary['single']['measured_ms']:.3f} ms, planned "
        f"{summary['planned']['measured_ms']:.3f} ms measured ({summary['speedup_measured']:.2f}x); predicted "
        f"{summary['single']['predicted_ms']:.3f} / {summary['planned']['predicted_ms']:.3f} ms "
        f"({summary['speedup_predicted']:.2f}x)"
    )
    return {"rounds": runs, "summary": summary}


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 4.2), sharey=True)
    for ax, row in zip(axes, rows):
        names = [v["variant"] for v in row["variants"]]
        x = range(len(names))
        ax.bar([i - 0.2 for i in x], [v["predicted_s"] for v in row["variants"]], 0.4, label="predicted")
        ax.bar([i + 0.2 for i in x], [v["median_s"] for v in row["variants"]], 0.4, label="measured")
        ax.plot(x, [v["bound_s"] for v in row["variants"]], "k_", markersize=22, label="LP bound")
        ax.set_xticks(list(x), names)
        ax.set_title(row["scenario"])
    axes[0].set_ylabel("all-to-all phase, emulated s")
    axes[0].legend()
    fig.suptitle("Embedding all-to-all under each routing (lower is better)")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="timed phases per variant (default 3)")
    ap.add_argument("--rounds", type=int, default=3, help="alternated iteration runs per routing (default 3)")
    ap.add_argument("--no-iteration", action="store_true", help="skip part 2")
    args = ap.parse_args()
    t0 = time.time()
    doc = {"phase": phase_rows(args.repeat)}
    if not args.no_iteration:
        doc["iteration"] = iteration_rows(args.rounds)
    doc["seconds"] = time.time() - t0
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "routing_ablation.json").write_text(json.dumps(doc, indent=1) + "\n")
    plot(doc["phase"], OUT / "routing_ablation.png")
    print(f"wrote {OUT / 'routing_ablation.json'} and routing_ablation.png in {doc['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
