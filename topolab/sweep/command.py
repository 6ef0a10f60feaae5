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

from contract.files import write_file
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

from ..common.options import bounded_float, bounded_int, check_output_dir, make_output_dir
from ..results.sweep_report import write_sweep
from .inputs import cell_scenarios, load_prices, model_list, split_list

DEFAULT_NETWORKS = ("topoopt", "switch", "fattree", "expander")


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="base scenario TOML (cluster size, batch, latency, search steps and seed)")
    parser.add_argument(
        "--models",
        default=None,
        metavar="LIST",
        help=f"comma-separated models: zoo names ({', '.join(MODELS)}; 'all' for every one), operator-graph files "
        "(topolab import --out), Chakra traces or file.py:factory; default: the scenario's",
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
    model_scenarios = model_list(args.models, base)
    models = list(model_scenarios)
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
    possible, skipped = cell_scenarios(base, all_cells, prices, model_scenarios)
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
    make_output_dir(out_dir)
    write_file(out_dir / "sweep.json", json.dumps(doc, indent=1))
    table, written = write_sweep(out_dir, doc, draw_plot=not args.no_plot)
    print(table)
    print(f"wrote {', '.join(str(p) for p in written)}", file=sys.stderr)
    return 0


def _relative(rows: list[dict]) -> None:
    """Add ``vs_topoopt``: this network's time / TopoOpt's (same model, d, B)."""
    ref = {(r["model"], r["degree"], r["link_gbps"]): r["iteration_s"] for r in rows if r["network"] == "topoopt"}
    for r in rows:
        t = ref.get((r["model"], r["degree"], r["link_gbps"]))
        r["vs_topoopt"] = r["iteration_s"] / t if t else None
