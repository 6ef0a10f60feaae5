"""Imported models: the zoo against its twins traced by torch, and placement on a real graph.

Part ``zoo`` (needs the ``models`` extra): every model of examples/models/ is imported
(planner.model.model_import: torch.export, torch's FLOP counter) and compared with the zoo's
hand-written entry (planner/model/zoo.py): parameters, and FLOPs per sample of a training
iteration (forward + backward; the zoo's backward is 2x its forward). With
``--write-graphs`` the imported ResNet-50 and BERT-large are written as the graph files
shipped beside them (examples/models/*.json).

Part ``placement`` (no torch: it reads examples/models/bert_large.json): ``topolab place``
on the imported BERT-large (scenarios/bert-large-imported-12.toml), with and without
fusion, from the CLI (``--json``), at the default memory per server and at one that forces
the model over several servers (``--memory-gb``): the search speed-up of fusion + fused search over the
unfused search, and the gap between their predicted makespans. The fused placement is also
scored on the operator graph itself (every operator on its group's server, in the fused
order), with the allocation of its own traffic, as the unfused one is. And the time to fuse
the largest imported graph.

Prints tables, writes benchmarks/results/model_import.json.

    .venv/bin/python benchmarks/model_import.py [--parts zoo,placement] [--write-graphs]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "model_import.json"
PLACE_SCENARIO = REPO / "scenarios" / "bert-large-imported-12.toml"
TWINS = {  # zoo model -> its twin in examples/models/
    "resnet50": "examples/models/resnet50.py:build",
    "bert": "examples/models/bert_large.py:build",
    "vgg16": "examples/models/zoo_twins.py:vgg16",
    "ncf": "examples/models/zoo_twins.py:ncf",
    "dlrm": "examples/models/zoo_twins.py:dlrm",
    "candle": "examples/models/zoo_twins.py:candle",
}
SHIPPED = {"resnet50": "examples/models/resnet50.json", "bert": "examples/models/bert_large.json"}
TOLERANCE = 0.02


def zoo_rows(models: list[str], write_graphs: bool) -> list[dict]:
    from planner.model.graph_file import write_graph
    from planner.model.model_import import import_model
    from planner.model.opgraph import model_graph

    rows = []
    for zoo, spec in TWINS.items():
        if zoo not in models:
            continue
        t0 = time.perf_counter()
        g = import_model(spec, REPO)
        seconds = time.perf_counter() - t0
        z = model_graph(zoo)
        zoo_flops = z.flops + sum(op.backward_flops for op in z.ops)
        flops = (g.forward_flops + g.backward_flops) / g.batch
        row = {
            "model": zoo,
            "twin": spec,
            "operators": len(g.ops),
            "import_s": seconds,
            "params": g.params,
            "zoo_params": z.params,
            "params_diff": g.params / z.params - 1,
            "iteration_flops_per_sample": flops,
            "zoo_iteration_flops_per_sample": zoo_flops,
            "flops_diff": flops / zoo_flops - 1,
            "forward_flops_per_sample": g.forward_flops / g.batch,
            "zoo_forward_flops_per_sample": z.flops,
        }
        rows.append(row)
        print(
            f"{zoo:9s} {len(g.ops):5d} ops  params {g.params:>14,} vs zoo {z.params:>14,} ({100 * row['params_diff']:+.2f}%)"
            f"  FLOPs/sample {flops / 1e9:9.3f} G vs zoo {zoo_flops / 1e9:9.3f} G ({100 * row['flops_diff']:+.2f}%)"
            f"  [{seconds:.1f} s]",
            flush=True,
        )
        if write_graphs and zoo in SHIPPED:
            write_graph(g, REPO / SHIPPED[zoo])
    if "bert" not in models:
        return rows
    t0 = time.perf_counter()
    hf = import_model("examples/models/hf_bert.py:build", REPO)
    rows.append(
        {
            "model": "bert (transformers)",
            "twin": "examples/models/hf_bert.py:build",
            "operators": len(hf.ops),
            "import_s": time.perf_counter() - t0,
            "params": hf.params,
            "iteration_flops_per_sample": (hf.forward_flops + hf.backward_flops) / hf.batch,
        }
    )
    print(f"transformers BertModel (bert-large-uncased config): {hf.params:,} parameters, {len(hf.ops)} operators")
    return rows


def _place(*flags: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "topolab", "place", str(PLACE_SCENARIO), "--json", *flags]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True, cwd=REPO)
    return json.loads(out.stdout)


def placement(time_limit: float, memory_gb: list[float]) -> list[dict]:
    return [placement_at(time_limit, m) for m in memory_gb]


def placement_at(time_limit: float, memory_gb: float) -> dict:
    from planner import build_plan, load_scenario
    from planner.model.fusion import FusionConfig, fuse
    from planner.model.workload_graph import workload_graph
    from planner.placement import allocate_rates, makespan, plan_capacity, task_graph, traffic_matrix

    limit = ("--time-limit", f"{time_limit:g}", "--memory-gb", f"{memory_gb:g}")
    fused = _place(*limit)
    unfused = _place("--no-fusion", *limit)
    s = load_scenario(PLACE_SCENARIO)
    w = s.workload
    graph = workload_graph(w)
    plan = build_plan(s)
    t0 = time.perf_counter()
    fuse(graph, FusionConfig(batch=w.batch_per_server, device_tflops=w.device_tflops))
    fuse_s = time.perf_counter() - t0
    # the fused placement on the operator graph: each operator on its group's server, in the
    # fused order, scored with the allocation of its own traffic (as `topolab place` scores)
    tasks = task_graph(graph, w.batch_per_server, w.device_tflops)
    server = {m: g["server"] for g in fused["placement"] for m in g["members"]}
    assignment = tuple(server[op.name] for op in graph.ops)
    order = tuple(graph.index[m] for g in fused["placement"] for m in sorted(g["members"], key=graph.index.get))
    _, egress = plan_capacity(plan, s.emulation.mtu)
    rates = allocate_rates(traffic_matrix(tasks, assignment, plan.servers), egress, pair_cap=plan_capacity(plan)[0])
    expanded_ms = makespan(tasks, assignment, order, rates) * 1e3
    fused_total = fused["fusion_s"] + fused["search_s"]
    doc = {
        "scenario": str(PLACE_SCENARIO.relative_to(REPO)),
        "memory_gb": memory_gb,
        "operators": unfused["operators"],
        "groups": fused["groups"],
        "time_limit_s": time_limit,
        "fusion_s": fused["fusion_s"],
        "fused_search_s": fused["search_s"],
        "unfused_search_s": unfused["search_s"],
        "speedup": unfused["search_s"] / fused_total,
        "fused_makespan_ms": fused["predicted_makespan_ms"],
        "fused_on_operator_graph_ms": expanded_ms,
        "unfused_makespan_ms": unfused["predicted_makespan_ms"],
        "makespan_gap": fused["predicted_makespan_ms"] / unfused["predicted_makespan_ms"] - 1,
        "makespan_gap_on_operator_graph": expanded_ms / unfused["predicted_makespan_ms"] - 1,
        "largest_graph_fusion_s": fuse_s,
    }
    print(
        f"BERT-large imported, {memory_gb:g} GB per server: {doc['operators']} operators -> {doc['groups']} groups; fusion {doc['fusion_s']:.3f} s "
        f"+ fused search {doc['fused_search_s']:.3f} s vs unfused search {doc['unfused_search_s']:.1f} s: "
        f"{doc['speedup']:.0f}x faster; makespan {doc['fused_makespan_ms']:.3f} ms vs {doc['unfused_makespan_ms']:.3f} ms "
        f"({100 * doc['makespan_gap']:+.2f}%; the fused placement on the operator graph "
        f"{doc['fused_on_operator_graph_ms']:.3f} ms, {100 * doc['makespan_gap_on_operator_graph']:+.2f}%); "
        f"fusing the largest imported graph: {fuse_s:.3f} s",
        flush=True,
    )
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="zoo,placement")
    ap.add_argument("--models", default=",".join(TWINS), help="zoo part: the models to import (others keep their rows)")
    ap.add_argument("--write-graphs", action="store_true", help="rewrite examples/models/*.json from the twins")
    ap.add_argument("--time-limit", type=float, default=30.0, help="topolab place --time-limit")
    ap.add_argument("--memory-gb", default="80,2", help="topolab place --memory-gb, each in turn")
    args = ap.parse_args()
    parts = args.parts.split(",")
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    zoo = previous.get("zoo", [])
    if "zoo" in parts:
        fresh = zoo_rows(args.models.split(","), args.write_graphs)
        done = {r["model"] for r in fresh}
        zoo = [r for r in zoo if r["model"] not in done] + fresh
    doc = {
        "zoo": sorted(zoo, key=lambda r: list(TWINS).index(r["model"].split()[0])),
        "placement": (
            placement(args.time_limit, [float(m) for m in args.memory_gb.split(",")])
            if "placement" in parts
            else previous.get("placement", [])
        ),
    }
    off = [
        r["model"]
        for r in doc["zoo"]
        if abs(r.get("params_diff", 0)) > TOLERANCE or abs(r.get("flops_diff", 0)) > TOLERANCE
    ]
    print(f"zoo entries more than {100 * TOLERANCE:g}% from their twins: {', '.join(off) or 'none'}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
