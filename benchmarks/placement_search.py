"""Placement search with and without operator fusion, and joint placement + allocation.

Graph sizes: the zoo's layer graphs (planner.model.opgraph) have 6 to 26 operators; a
framework sees each layer as several operators (the matmul or convolution, then bias,
activation, normalization...). `unrolled_graph` models that: every non-embedding layer
becomes a chain of ``ops_per_layer`` operators, the first carrying the layer's parameters
and FLOPs, the others elementwise (``ELEMENTWISE_FLOPS`` per output element, no
parameters); embedding tables stay single operators. ``ops_per_layer`` 2 to 128 grows BERT
from 52 to 3328 operators.

Part 1, for each model and size on ``--servers`` servers (uniform pair rates): the same
solver (HEFT + local search, `planner.placement.place_heuristic`) with the same time limit
on the unrolled graph and on its fusion (planner.model.fusion); search time (fusion time listed
apart) and the makespan of both placements scored on the unrolled graph (a fused placement
puts every operator on its group's server), against round robin, the memory-balanced
contiguous partition and data parallelism. The exact MILP runs on fused graphs of at most
``--milp-groups`` groups.

Part 2, a 12-server TopoOpt plan (degree 4): the baseline placer (best of round robin and
contiguous) predicted by planner.cost.predict on the plan's network, against joint placement +
per-destination allocation (`place_jointly`) predicted on the allocated per-pair rates
(multipath: a pair may use several cables), and against the joint placement with every
pair capped at its route's bottleneck (single path, as the emulator routes) predicted on
the plan's network.

Prints tables, writes benchmarks/results/placement_search.json and placement_search.png.

    .venv/bin/python benchmarks/placement_search.py [--models bert,dlrm] [--sizes 2,8,32,64] [--parts joint]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from planner import build_plan, parse_scenario
from planner.cost.predict import Network, plan_network, predict
from planner.model.fusion import FusionConfig, fuse
from planner.model.opgraph import Operator, OpGraph, model_graph
from planner.model.zoo import FLOAT_BYTES, MODELS
from planner.placement import (
    contiguous_partition,
    data_parallel_seconds,
    makespan,
    place_heuristic,
    place_jointly,
    place_milp,
    placement_schedule,
    plan_capacity,
    round_robin,
    task_graph,
    uniform_rates,
)

ELEMENTWISE_FLOPS = 2.0  # per output element: a bias add or an activation, read + write
BATCH = 64
DEVICE_TFLOPS = 125.0
MEMORY_BYTES = 80e9  # one A100 80 GB
PAIR_GBPS = 25.0
RESULTS = Path(__file__).parent / "results"


def unrolled_graph(name: str, ops_per_layer: int) -> OpGraph:
    ops: list[Operator] = []
    for op in model_graph(name).ops:
        if op.is_embedding or ops_per_layer == 1:
            ops.append(Operator(op.name, op.kind, op.params, op.flops, op.out_bytes, op.inputs, (op.name,)))
            continue
        elementwise = ELEMENTWISE_FLOPS * op.out_bytes / FLOAT_BYTES
        inputs = op.inputs
        for i in range(ops_per_layer):
            last = i == ops_per_layer - 1
            nm = op.name if last else f"{op.name}/{i}"
            params, flops = (op.params, op.flops) if i == 0 else (0, elementwise)
            ops.append(Operator(nm, op.kind, params, flops, op.out_bytes, inputs, (nm,)))
            inputs = (nm,)
    graph = OpGraph(name, tuple(ops))
    graph.validate()
    return graph


def expand(fused: OpGraph, graph: OpGraph, assignment, order) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A fused placement as a placement of ``graph``'s operators."""
    server = [0] * len(graph)
    out: list[int] = []
    for g in order:
        members = sorted(graph.index[m] for m in fused.ops[g].members)
        for i in members:
            server[i] = assignment[g]
        out += members
    return tuple(server), tuple(out)


def size_sweep(models, sizes, servers, time_limit, milp_groups) -> list[dict]:
    rows = []
    rates = uniform_rates(servers, PAIR_GBPS * 1e9 / 8)
    cfg = FusionConfig(batch=BATCH, device_tflops=DEVICE_TFLOPS)
    for name in models:
        for p in sizes:
            graph = unrolled_graph(name, p)
            tasks = task_graph(graph, BATCH, DEVICE_TFLOPS)
            t0 = time.perf_counter()
            fused = fuse(graph, cfg)
            fusion_s = time.perf_counter() - t0
            ftasks = task_graph(fused, BATCH, DEVICE_TFLOPS)
            f = place_heuristic(ftasks, rates, MEMORY_BYTES, time_limit)
            fa, fo = expand(fused, graph, f.assignment, f.order)
            u = place_heuristic(tasks, rates, MEMORY_BYTES, time_limit)
            row = {
                "model": name,
                "ops_per_layer": p,
                "operators": len(graph),
                "groups": len(fused),
                "fusion_s": fusion_s,
                "fused_search_s": f.search_seconds,
                "unfused_search_s": u.search_seconds,
                "time_limit_s": time_limit,
                "unfused_hit_time_limit": u.search_seconds >= time_limit,
                "fused_makespan_s": makespan(tasks, fa, fo, rates),
                "unfused_makespan_s": u.makespan,
                "round_robin_s": round_robin(tasks, rates, MEMORY_BYTES).makespan,
                "contiguous_s": contiguous_partition(tasks, rates, MEMORY_BYTES).makespan,
                "data_parallel_s": data_parallel_seconds(tasks, rates),
            }
            if len(fused) <= milp_groups:
                m = place_milp(ftasks, rates, MEMORY_BYTES, time_limit)
                ma, mo = expand(fused, graph, m.assignment, m.order)
                row.update(
                    milp_search_s=m.search_seconds,
                    milp_optimal=m.optimal,
                    milp_makespan_s=makespan(tasks, ma, mo, rates),
                )
            row["speedup"] = row["unfused_search_s"] / max(row["fused_search_s"], 1e-9)
            row["speedup_with_fusion"] = row["unfused_search_s"] / (row["fused_search_s"] + fusion_s)
            row["makespan_gap"] = row["fused_makespan_s"] / row["unfused_makespan_s"] - 1
            rows.append(row)
            print(
                f"{name:9s} {len(graph):5d} ops {len(fused):3d} groups | fusion {fusion_s:7.2f} s | search fused "
                f"{f.search_seconds:8.4f} s unfused {u.search_seconds:8.2f} s (x{row['speedup']:.0f}) | makespan ms "
                f"fused {1e3 * row['fused_makespan_s']:.3f} unfused {1e3 * u.makespan:.3f} rr "
                f"{1e3 * row['round_robin_s']:.3f} contig {1e3 * row['contiguous_s']:.3f} dp {1e3 * row['data_parallel_s']:.3f}",
                flush=True,
            )
    return rows


def pair_network(rates: np.ndarray) -> Network:
    k = rates.shape[0]
    capacity = {(a, b): float(rates[a, b]) for a in range(k) for b in range(k) if a != b}
    return Network(capacity, lambda a, b: [a, b], alpha_s=0.0, reduce_bytes_per_s=1e18)


def joint_twelve(models, time_limit) -> list[dict]:
    rows = []
    servers = 12
    for name in models:
        plan = build_plan(
            parse_scenario(
                {
                    "cluster": {"servers": servers, "degree": 4, "link_gbps": PAIR_GBPS, "latency_us": 0},
                    "workload": {"model": name, "batch_per_server": BATCH},
                    "parallelism": {"strategy": "data"},
                }
            )
        )
        rates, egress = plan_capacity(plan)
        tasks = task_graph(fuse(model_graph(name), FusionConfig(batch=BATCH)), BATCH, DEVICE_TFLOPS)
        network = plan_network(plan, alpha_s=0.0, reduce_bytes_per_s=1e18)
        baselines = [placer(tasks, rates, MEMORY_BYTES) for placer in (round_robin, contiguous_partition)]
        base_pred = {b.method: predict(placement_schedule(tasks, b, servers), network).seconds for b in baselines}
        baseline = min(base_pred, key=base_pred.get)
        plain = place_heuristic(tasks, rates, MEMORY_BYTES, time_limit)
        plain_pred = predict(placement_schedule(tasks, plain, servers), network).seconds
        joint = place_jointly(tasks, rates, egress, MEMORY_BYTES, time_limit=time_limit)
        uses_allocation = not np.array_equal(joint.rates, rates)
        joint_net = pair_network(joint.rates) if uses_allocation else network
        joint_pred = predict(placement_schedule(tasks, joint.placement, servers), joint_net).seconds
        single = place_jointly(tasks, rates, egress, MEMORY_BYTES, time_limit=time_limit, pair_cap=rates)
        single_pred = predict(placement_schedule(tasks, single.placement, servers), network).seconds
        row = {
            "model": name,
            "groups": len(tasks),
            "baseline": baseline,
            "baseline_predicted_s": base_pred[baseline],
            "placement_predicted_s": plain_pred,
            "joint_predicted_s": joint_pred,
            "joint_cost_model_s": joint.placement.makespan,
            "joint_rounds": len(joint.history),
            "allocation_used": uses_allocation,
            "reduction_vs_baseline": 1 - joint_pred / base_pred[baseline],
            "single_path_predicted_s": single_pred,
            "single_path_cost_model_s": single.placement.makespan,
            "single_path_reduction_vs_baseline": 1 - single_pred / base_pred[baseline],
            "data_parallel_s": data_parallel_seconds(tasks, rates),
        }
        rows.append(row)
        print(
            f"{name:9s} {len(tasks):3d} groups | baseline ({baseline}) {1e3 * base_pred[baseline]:.3f} ms | placement "
            f"{1e3 * plain_pred:.3f} ms | + allocation {1e3 * joint_pred:.3f} ms "
            f"({100 * row['reduction_vs_baseline']:.0f}% below baseline, {len(joint.history)} rounds) | single path "
            f"{1e3 * single_pred:.3f} ms ({100 * row['single_path_reduction_vs_baseline']:.0f}% below)",
            flush=True,
        )
    return rows


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in sorted({r["model"] for r in rows}):
        rs = sorted((r for r in rows if r["model"] == name), key=lambda r: r["operators"])
        x = [r["operators"] for r in rs]
        (line,) = ax.plot(x, [r["unfused_search_s"] for r in rs], "o-", label=f"{name} unfused")
        stopped = [r for r in rs if r["unfused_hit_time_limit"]]
        ax.plot(
            [r["operators"] for r in stopped],
            [r["unfused_search_s"] for r in stopped],
            "x",
            color="black",
            markersize=9,
            label="unfused stopped at the time limit" if name == rs[0]["model"] and stopped else None,
        )
        fused_total = [max(r["fused_search_s"] + r["fusion_s"], 1e-5) for r in rs]
        ax.plot(x, fused_total, "s--", color=line.get_color(), label=f"{name} fusion + fused search")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("operators in the unrolled graph")
    ax.set_ylabel("placement search time (s)")
    ax.set_title("HEFT + local search, with and without operator fusion (log-log)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--sizes", default="2,8,32,128", help="operators per layer")
    ap.add_argument("--servers", type=int, default=4)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--milp-groups", type=int, default=12)
    ap.add_argument("--out", default=str(RESULTS / "placement_search.json"))
    ap.add_argument("--parts", default="sweep,joint", help="sweep, joint or both; a part left out keeps its results")
    args = ap.parse_args()
    models = args.models.split(",")
    sizes = [int(s) for s in args.sizes.split(",")]
    out = Path(args.out)
    parts = args.parts.split(",")
    previous = json.loads(out.read_text()) if out.exists() else {}
    sweep = previous.get("sweep", [])
    if "sweep" in parts:  # new rows replace the previous ones of the same model and size
        fresh = size_sweep(models, sizes, args.servers, args.time_limit, args.milp_groups)
        done = {(r["model"], r["ops_per_layer"]) for r in fresh}
        sweep = [r for r in sweep if (r["model"], r["ops_per_layer"]) not in done] + fresh
    for r in sweep:  # results written before the limit was kept per row
        r.setdefault("time_limit_s", previous.get("time_limit_s"))
    joint = joint_twelve(models, args.time_limit) if "joint" in parts else previous.get("joint_12_servers", [])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "batch": BATCH,
                "device_tflops": DEVICE_TFLOPS,
                "pair_gbps": PAIR_GBPS,
                "servers": args.servers,
                "sweep": sweep,
                "joint_12_servers": joint,
            },
            indent=1,
        )
    )
    plot(sweep, out.with_suffix(".png"))
    print(acceptance(sweep))
    print(f"wrote {out} and {out.with_suffix('.png')}")


def acceptance(rows: list[dict]) -> str:
    """The issue's figure: on the largest graph, search speedup (fusion time included) and
    makespan gap, per size, saying where the unfused search stopped at its time limit."""
    largest = max(rows, key=lambda r: r["operators"])["model"]
    lines = [f"{largest}, the zoo model with the most operators:"]
    for r in sorted((r for r in rows if r["model"] == largest), key=lambda r: r["operators"]):
        stopped = " (unfused stopped at its time limit: a lower bound)" if r["unfused_hit_time_limit"] else ""
        lines.append(
            f"  {r['operators']:5d} operators -> {r['groups']} groups: fused search incl. fusion "
            f"{r['speedup_with_fusion']:.0f}x faster{stopped}, makespan {100 * r['makespan_gap']:+.2f}%"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
