"""`topolab sweep`: iteration time per model and network, like TopoOpt's evaluation.

For every model x degree x link rate x network of the sweep, the parallelization search
(planner.search) finds the best strategy for that network (alternating with TopologyFinder
on TopoOpt, for a fixed topology on the baselines) and the flow-level simulator predicts
its iteration time. Networks: see planner.cost.costmodel.baselines (the Fat-tree is
cost-matched to the direct-connect cluster with planner.cost.costmodel.price).

Writes, in ``--out`` (default ``results/sweep-<scenario>/``, beside every other command's
results): ``sweep.json`` (every cell, the prices used, the search statistics, the skipped
cells), ``sweep.txt`` (the table and its legend) and ``sweep.png`` (one panel pair per
degree x rate: absolute iteration time as points on a log axis, and time relative to TopoOpt
as bars from zero). A cell that cannot exist (a torus whose degree does not fit the server
count) is skipped with a note instead of ending the sweep. Progress goes to stderr, the
table to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from planner import load_scenario
from planner.cost.costmodel.baselines import NETWORKS
from planner.cost.costmodel.price import PriceModel
from planner.model.zoo import MODELS
from planner.scenario import (
    BOUNDS,
    MAX_DEGREE,
    MAX_LINK_GBPS,
    MAX_SEARCH_STEPS,
    MAX_SEED,
    MIN_LINK_GBPS,
    with_overrides,
)

from .options import bounded_float, bounded_int, check_output_dir
from .sweep_inputs import cell_scenarios, load_prices, split_list

DEFAULT_NETWORKS = ("topoopt", "switch", "fattree", "expander")


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="base scenario TOML (cluster size, batch, latency, search steps and seed)")
    parser.add_argument(
        "--models",
        default=None,
        metavar="LIST",
        help=f"comma-separated models, or 'all' ({', '.join(MODELS)}); default: the scenario's",
    )
    parser.add_argument(
        "--topologies",
        default=",".join(DEFAULT_NETWORKS),
        metavar="LIST",
        help=f"comma-separated networks from {', '.join(NETWORKS)} (fattree = similar-cost "
        f"Fat-tree, switch = ideal switch); default: %(default)s",
    )
    parser.add_argument(
        "--degrees", default=None, metavar="LIST", help="comma-separated interface counts d; default: the scenario's"
    )
    parser.add_argument(
        "--link-gbps",
        default=None,
        metavar="LIST",
        help="comma-separated link rates B in Gbps; default: the scenario's",
    )
    low_tflops, _, high_tflops = BOUNDS[("workload", "device_tflops")]
    parser.add_argument(
        "--device-tflops",
        type=bounded_float(low_tflops, high_tflops, low_inclusive=True),
        default=None,
        metavar="X",
        help="effective compute per server in TFLOPS (the paper's server is 4 A100s: about 4 x 125); "
        "default: the scenario's",
    )
    parser.add_argument(
        "--steps",
        type=bounded_int(1, MAX_SEARCH_STEPS),
        default=None,
        help=f"MCMC steps per search, 1..{MAX_SEARCH_STEPS}; default: the scenario's search_steps",
    )
    parser.add_argument(
        "--seed", type=bounded_int(0, MAX_SEED), default=None, help="search seed; default: the scenario's"
    )
    parser.add_argument(
        "--prices", metavar="FILE", help="JSON price table overriding the defaults (see docs/search.md)"
    )
    parser.add_argument("--out", metavar="DIR", help="output directory; default: results/sweep-<scenario name>")
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG")


def run_sweep(args: argparse.Namespace) -> int:
    from planner.search import SearchConfig, search  # heavy imports only when sweeping

    base = load_scenario(args.scenario)
    models = (
        MODELS if args.models == "all" else (split_list(args.models, "--models", str, MODELS) or [base.workload.model])
    )
    networks = split_list(args.topologies, "--topologies", str, NETWORKS)
    degrees = split_list(args.degrees, "--degrees", int, bounds=(1, MAX_DEGREE)) or [base.cluster.degree]
    rates = split_list(args.link_gbps, "--link-gbps", float, bounds=(MIN_LINK_GBPS, MAX_LINK_GBPS))
    rates = rates or [base.cluster.link_gbps]
    if args.device_tflops is not None:
        base = with_overrides(base, workload={"device_tflops": args.device_tflops})
    prices = load_prices(args.prices) if args.prices else PriceModel()
    steps = args.steps or base.parallelism.search_steps
    seed = base.parallelism.seed if args.seed is None else args.seed
    out_dir = check_output_dir(Path("results") / f"sweep-{base.name}" if args.out is None else args.out, "--out")

    all_cells = [(m, d, b, net) for d in degrees for b in rates for m in models for net in networks]
    possible, skipped = cell_scenarios(base, all_cells, prices)
    for note in skipped:
        print(note, file=sys.stderr)
    rows: list[dict] = []
    t_start = time.perf_counter()
    for k, ((model, d, b, net), network) in enumerate(possible, 1):
        print(
            f"[{k}/{len(possible)}] {model} d={d} B={b:g} {net}: searching {steps} steps ...",
            end="",
            file=sys.stderr,
            flush=True,
        )
        result = search(network.scenario, SearchConfig(steps=steps, seed=seed))
        print(f" {result.cost.iteration_s * 1e3:.3f} ms ({result.seconds:.1f} s)", file=sys.stderr, flush=True)
        rows.append(
            {
                "model": model,
                "degree": d,
                "link_gbps": b,
                "network": net,
                "servers": base.cluster.servers,
                "per_server_gbps": network.per_server_gbps,
                "cost_usd": round(network.cost_usd, 2),
                "note": network.note,
                "iteration_s": result.cost.iteration_s,
                "data_parallel_s": result.data_parallel.iteration_s,
                "compute_s": result.cost.compute_s,
                "allreduce_s": result.cost.allreduce_s,
                "mp_s": result.cost.mp_s,
                "strategy": result.choices(),
                "search_seconds": round(result.seconds, 3),
                "evaluations": result.evaluations,
                "topology_changes": result.topology_changes,
                "d_allreduce": result.plan.extra.get("d_allreduce"),
                "d_mp": result.plan.extra.get("d_mp"),
            }
        )
    _relative(rows)
    doc = {
        "scenario": base.source,
        "servers": base.cluster.servers,
        "batch_per_server": base.workload.batch_per_server,
        "device_tflops": base.workload.device_tflops,
        "steps": steps,
        "seed": seed,
        "prices": prices.to_dict(),
        "seconds": round(time.perf_counter() - t_start, 2),
        "rows": rows,
        "skipped": skipped,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.json").write_text(json.dumps(doc, indent=1))
    table, written = write_sweep(out_dir, doc, draw_plot=not args.no_plot)
    print(table)
    print(f"wrote {', '.join(str(p) for p in written)}", file=sys.stderr)
    return 0


def write_sweep(out_dir: Path, doc: dict, draw_plot: bool = True) -> tuple[str, list[Path]]:
    """sweep.txt (the table, its legend, the skipped cells) and sweep.png of a sweep document
    (sweep.json); returns the text and the files the folder holds."""
    legend = STRATEGY_LEGEND + "\n" + NETWORK_LEGEND
    skipped = doc.get("skipped", [])
    table = format_table(doc["rows"]) + "\n\n" + legend + "".join(f"\n{note}" for note in skipped)
    (out_dir / "sweep.txt").write_text(table + "\n")
    written = [out_dir / "sweep.json", out_dir / "sweep.txt"]
    if draw_plot:
        written.append(plot(doc["rows"], out_dir / "sweep.png"))
    return table, written


def _relative(rows: list[dict]) -> None:
    """Add ``vs_topoopt``: this network's time / TopoOpt's (same model, d, B)."""
    ref = {(r["model"], r["degree"], r["link_gbps"]): r["iteration_s"] for r in rows if r["network"] == "topoopt"}
    for r in rows:
        t = ref.get((r["model"], r["degree"], r["link_gbps"]))
        r["vs_topoopt"] = r["iteration_s"] / t if t else None


def _ms(x: float) -> str:
    return f"{x * 1e3:.3f}" if x < 1 else f"{x * 1e3:.1f}"


def format_table(rows: list[dict]) -> str:
    w = max([7] + [len(r["network"]) for r in rows])
    head = f"{'model':9} {'d':>2} {'B':>5} {'network':{w}} {'Gbps/srv':>8} {'cost $k':>8} {'iter ms':>9} {'vs TopoOpt':>10} {'DP ms':>9} strategy"
    lines = [head, "-" * len(head)]
    for r in rows:
        vs = f"{r['vs_topoopt']:.2f}x" if r["vs_topoopt"] else "-"
        strat = _strategy_text(r["strategy"])
        lines.append(
            f"{r['model']:9} {r['degree']:>2} {r['link_gbps']:>5g} {r['network']:{w}} {r['per_server_gbps']:>8g} "
            f"{r['cost_usd'] / 1e3:>8.0f} {_ms(r['iteration_s']):>9} {vs:>10} {_ms(r['data_parallel_s']):>9} {strat}"
        )
    return "\n".join(lines)


STRATEGY_LEGEND = (
    "strategy: how many operators take each parallel configuration in the best strategy found: "
    "'data' = data parallel (replicated, gradients AllReduced), 'mpK' = tensor parallel over K "
    "consecutive servers, 'table on 1 server' / 'row-sharded table' / 'replicated' = embedding tables. "
    "DP ms = the all-data-parallel strategy on the same network; vs TopoOpt = iteration time / TopoOpt's."
)


NETWORK_LEGEND = (
    "networks: switch = an ideal non-blocking switch giving every server d x B, a bound no real network "
    "of similar cost reaches (it can beat TopoOpt, whose relayed all-to-all and model-parallel traffic pays "
    "the bandwidth tax); fattree = the Fat-tree of similar cost, TopoOpt's baseline in the paper "
    "(Gbps/srv and cost columns; prices in sweep.json)."
)


def _strategy_text(choices: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for v in choices.values():
        key = "table on 1 server" if v.startswith("server ") else ("row-sharded table" if "shards" in v else v)
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{c}x {k}" for k, c in sorted(counts.items()))


def plot(rows: list[dict], path: Path) -> Path:
    """Grouped bars per (d, B): iteration time per model and network, and relative to TopoOpt."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    combos = sorted({(r["degree"], r["link_gbps"]) for r in rows})
    models = list(dict.fromkeys(r["model"] for r in rows))
    networks = list(dict.fromkeys(r["network"] for r in rows))
    fig, axes = plt.subplots(len(combos), 2, figsize=(12, 3.6 * len(combos)), squeeze=False)
    width = 0.8 / len(networks)
    for row_axes, (d, b) in zip(axes, combos):
        cell = {(r["model"], r["network"]): r for r in rows if r["degree"] == d and r["link_gbps"] == b}
        for j, net in enumerate(networks):
            xs = [i + (j - (len(networks) - 1) / 2) * width for i in range(len(models))]
            abs_ms = [cell[(m, net)]["iteration_s"] * 1e3 if (m, net) in cell else 0 for m in models]
            rel = [cell[(m, net)]["vs_topoopt"] or 0 if (m, net) in cell else 0 for m in models]
            shown = [(x, t) for x, t in zip(xs, abs_ms) if t > 0]
            row_axes[0].plot([x for x, _ in shown], [t for _, t in shown], "o", label=net)
            row_axes[1].bar(xs, rel, width, label=net)
        for ax, title, ylabel in (
            (row_axes[0], "iteration time", "ms (log)"),
            (row_axes[1], "relative to TopoOpt", "x TopoOpt's time"),
        ):
            ax.set_xticks(range(len(models)), models)
            ax.set_title(f"{title}: {rows[0]['servers']} servers, d={d}, B={b:g} Gbps")
            ax.set_ylabel(ylabel)
        row_axes[0].set_yscale("log")  # points, not bars: a log axis has no zero for a bar to start at
        row_axes[1].set_ylim(bottom=0)  # bars from zero, so a 0.96x difference looks like one
        row_axes[1].axhline(1.0, color="black", linewidth=0.8)
        row_axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    """``topolab sweep ARGS`` for callers of the former ``topolab.sweep.main`` (the
    benchmarks); new code calls ``topolab.cli.main(["sweep", ...])``."""
    from .cli import main as topolab_main

    return topolab_main(["sweep", *(sys.argv[1:] if argv is None else argv)])
