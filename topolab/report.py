"""Turn a run's results.json into report.md and plots a person would rather look at.

Plots (PNG, matplotlib's Agg backend, no display needed):
- ``topology.png``: servers on a circle, every cable drawn; the width and colour of each cable
  show the bytes it carries per iteration, and the share of those bytes that is *relayed*
  (traffic between two other servers crossing this cable: host-based forwarding's tax);
- ``iterations.png``: measured iteration time per iteration against the prediction, split into
  compute and exposed communication, in the real cluster's milliseconds;
- ``link_bytes.png``: a heat map of bytes per directed link (source row, destination column).

`topolab report DIR` renders them again from a results folder, also from one a killed run
left behind (results.json with status "running" and its iterations.jsonl), marked incomplete.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

from contract.errors import UsageError

from .journal import ITERATIONS_FILE, RESULTS_FILE, read_journal
from .options import check_output_dir


def pyplot():
    """matplotlib, loaded only when a plot is drawn (it takes a good part of a second)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", metavar="DIR", help="a results folder of `topolab run` (results.json inside)")


def run_report(args: argparse.Namespace) -> int:
    folder = Path(args.results_dir)
    if not (folder / RESULTS_FILE).is_file():
        raise UsageError(f"DIR {args.results_dir!r}: no {RESULTS_FILE} in it (not a results folder of topolab run)")
    check_output_dir(folder, "DIR")
    try:
        results = json.loads((folder / RESULTS_FILE).read_text(encoding="utf-8"))
    except ValueError as err:
        raise UsageError(f"DIR {args.results_dir!r}: {RESULTS_FILE} is not valid JSON: {err}") from None
    if not isinstance(results, dict) or "plan" not in results or "scenario" not in results:
        raise UsageError(f"DIR {args.results_dir!r}: {RESULTS_FILE} is not a topolab run's results")
    results = recover(results, read_journal(folder / ITERATIONS_FILE))
    report = write_report(results, folder)
    its = results["summary"]["iterations"]
    print(f"report: {report} ({results['status']}, {its} iteration{'s' if its != 1 else ''})")
    return 0


def recover(results: dict[str, Any], journal: list[dict[str, Any]]) -> dict[str, Any]:
    """``results`` with the iterations of its journal; a run that never finished is marked
    incomplete (its process was killed before it could write its status)."""
    results = dict(results)
    if len(journal) > len(results.get("iterations", [])):
        results["iterations"] = journal
    if results.get("status") == "running":
        results["status"] = "incomplete"
        results["error"] = (
            f"the run stopped without finishing (killed?); {len(results['iterations'])} iteration(s) were on disk"
        )
    results["summary"] = summarize(results)
    return results


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """Median measured time, prediction error and verification over the recorded iterations."""
    its = [it for it in results["iterations"] if it.get("measured_s") is not None]
    out: dict[str, Any] = {"iterations": len(its), "verified": bool(its) and all(it["verified"] for it in its)}
    if its:
        med = statistics.median(it["measured_s"] for it in its)
        out["median_measured_s"] = med
        out["median_real_ms"] = med / results["emulation"]["time_scale"] * 1e3
        pred = results.get("predicted", {}).get("emulated_s")
        if pred is not None:
            out["error"] = abs(pred - med) / med
    return out


def _positions(servers: int, switches: int) -> dict[int, tuple[float, float]]:
    pos = {i: (math.cos(2 * math.pi * i / servers), math.sin(2 * math.pi * i / servers)) for i in range(servers)}
    for k in range(switches):
        pos[servers + k] = (0.0, 0.0)
    return pos


def plot_topology(plan: dict, link_bytes: list[dict], relayed_bytes: dict[tuple[int, int], float], path: Path) -> None:
    servers, switches = plan["servers"], plan.get("switches", 0)
    pos = _positions(servers, switches)
    carried: dict[tuple[int, int], float] = {}
    for row in link_bytes:
        key = (min(row["src"], row["dst"]), max(row["src"], row["dst"]))
        carried[key] = carried.get(key, 0.0) + row["bytes"]
    relayed: dict[tuple[int, int], float] = {}
    for (a, b), v in relayed_bytes.items():
        key = (min(a, b), max(a, b))
        relayed[key] = relayed.get(key, 0.0) + v
    top = max(carried.values(), default=1.0) or 1.0
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 6.4))
    cmap = plt.get_cmap("plasma")
    seen: dict[tuple[int, int], int] = {}
    for link in plan["links"]:
        key = (min(link["a"], link["b"]), max(link["a"], link["b"]))
        seen[key] = seen.get(key, 0) + 1
        (x0, y0), (x1, y1) = pos[key[0]], pos[key[1]]
        share = relayed.get(key, 0.0) / carried[key] if carried.get(key) else 0.0
        width = 0.8 + 5.0 * carried.get(key, 0.0) / top
        bend = 0.08 * (seen[key] - 1)  # parallel cables drawn side by side
        ax.plot([x0 + bend, x1 + bend], [y0, y1], color=cmap(0.15 + 0.75 * share), lw=width, alpha=0.85, zorder=1)
    for node, (x, y) in pos.items():
        is_switch = node >= servers
        ax.scatter(
            [x],
            [y],
            s=500 if not is_switch else 900,
            c="#d9ecff" if not is_switch else "#ffe0b3",
            edgecolors="black",
            zorder=2,
            marker="o" if not is_switch else "s",
        )
        ax.text(x, y, "sw" if is_switch else str(node), ha="center", va="center", fontsize=9, zorder=3)
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, 1))
    cbar = fig.colorbar(sm, ax=ax, shrink=0.7, pad=0.02)
    cbar.set_label("share of the cable's bytes relayed for other servers")
    strides = plan.get("strides") or []
    title = f"{plan['topology']}: {servers} servers" + (
        f", strides ±{', ±'.join(map(str, strides))}" if strides else ""
    )
    ax.set_title(title + "\nline width = bytes per iteration")
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_iterations(results: dict, path: Path) -> None:
    its = [it for it in results["iterations"] if it.get("measured_real_ms") is not None]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    if its:
        idx = [it["index"] for it in its]
        compute = [it.get("compute_real_ms", 0.0) for it in its]
        comm = [max(0.0, it["measured_real_ms"] - c) for it, c in zip(its, compute)]
        ax.bar(idx, compute, color="#8fbf8f", label="compute")
        ax.bar(idx, comm, bottom=compute, color="#7fa7d9", label="exposed communication")
        bad = [i for i, it in zip(idx, its) if not it.get("verified", False)]
        for i in bad:
            ax.annotate("✗ verify", (i, compute[idx.index(i)] + comm[idx.index(i)]), ha="center", color="red")
    pred = results.get("predicted", {}).get("real_ms")
    if pred is not None:
        ax.axhline(pred, color="black", ls="--", lw=1.5, label=f"predicted {pred:.2f} ms")
    ax.set_xlabel("iteration")
    ax.set_ylabel("time (real cluster ms)")
    ax.set_title(f"{results['scenario']['name']}: measured vs predicted iteration time")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_link_bytes(plan: dict, link_bytes: list[dict], path: Path, title: str = "bytes per directed link") -> None:
    import numpy as np

    plt = pyplot()
    nodes = plan["servers"] + plan.get("switches", 0)
    matrix = np.full((nodes, nodes), np.nan)
    for row in link_bytes:
        matrix[row["src"], row["dst"]] = row["bytes"] / 1e6
    fig, ax = plt.subplots(figsize=(6.4, 5.4))
    im = ax.imshow(matrix, cmap="viridis")
    ax.set_xlabel("to node")
    ax.set_ylabel("from node")
    labels = [str(i) for i in range(plan["servers"])] + ["sw"] * plan.get("switches", 0)
    ax.set_xticks(range(nodes), labels, fontsize=7)
    ax.set_yticks(range(nodes), labels, fontsize=7)
    fig.colorbar(im, ax=ax, label="MB per iteration (emulated payload)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fmt(x: Any, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def render_markdown(results: dict) -> str:
    sc, plan, emu, summ = results["scenario"], results["plan"], results["emulation"], results["summary"]
    pred = results.get("predicted", {})
    lines = [
        f"# topolab run: {sc['name']}",
        "",
        f"Status: **{results['status']}**" + (f" ({results['error']})" if results.get("error") else ""),
        "",
        "## Plan",
        "",
        f"- topology: {plan['topology']}, {plan['servers']} servers"
        + (f" + {plan['switches']} switch" if plan.get("switches") else f", degree {plan['degree']}")
        + f", {plan['link_gbps']:g} Gbps per link",
        f"- job: {sc['workload']['model']}, strategy {sc['parallelism']['strategy']}, batch {sc['workload']['batch_per_server']} per server",
    ]
    if plan.get("strides"):
        lines.append(f"- strides: ±{', ±'.join(map(str, plan['strides']))}")
    s = plan["summary"]
    lines += [
        f"- diameter {s['diameter']}, mean hops {s['mean_hops']:.3f}, {s['relayed_fraction']:.0%} of server pairs relayed",
        "",
        "## Emulation",
        "",
        f"- each {emu['plan_link_gbps']:g} Gbps link emulated at {emu['link_mbps']:g} Mbit/s: time scale x{emu['time_scale']:g} "
        "(every time below in real-cluster units is the emulated time divided by it)",
        f"- MTU {emu['mtu']}, latency "
        + (
            "emulated with netem"
            if emu.get("netem")
            else "NOT emulated (this kernel has no netem); modelled as alpha per hop in the prediction"
        ),
        f"- payload scale {results['schedule']['payload_scale']:g}, {results['schedule']['ops']} ops per iteration,"
        f" {results['schedule']['allreduce_buckets']} AllReduce bucket(s)",
        "",
        "## Result",
        "",
        "| | emulated s | real cluster ms |",
        "|---|---:|---:|",
        f"| measured (median of {summ['iterations']}) | {_fmt(summ.get('median_measured_s'), 4)} | {_fmt(summ.get('median_real_ms'), 3)} |",
        f"| predicted (flow-level model of the same schedule) | {_fmt(pred.get('emulated_s'), 4)} | {_fmt(pred.get('real_ms'), 3)} |",
        "",
        f"Prediction error |predicted - measured| / measured: **{_fmt(100 * summ['error'] if summ.get('error') is not None else None, 1)}%**",
        "",
        f"Verification: **{'every AllReduce and transfer verified on every rank in every iteration' if summ.get('verified') else 'FAILED'}**",
        "",
        "| iteration | measured real ms | compute ms | exposed comm ms | verified |",
        "|---:|---:|---:|---:|---|",
    ]
    for it in results["iterations"]:
        m = it.get("measured_real_ms")
        c = it.get("compute_real_ms")
        lines.append(
            f"| {it['index']} | {_fmt(m, 3)} | {_fmt(c, 3)} | {_fmt(None if m is None or c is None else max(0.0, m - c), 3)} | "
            f"{'yes' if it.get('verified') else 'NO: ' + '; '.join(it.get('errors', [])[:2])} |"
        )
    lines += [
        "",
        "## Plots",
        "",
        "![topology](topology.png)",
        "",
        "![iterations](iterations.png)",
        "",
        "![link bytes](link_bytes.png)",
        "",
    ]
    if results.get("notes"):
        lines += ["## Notes", ""] + [f"- {n}" for n in results["notes"]] + [""]
    return "\n".join(lines)


def write_report(results: dict, out_dir: Path) -> Path:
    """Write report.md and the plots next to results.json; returns the report's path."""
    out_dir = Path(out_dir)
    plan = results["plan"]
    link_bytes = results.get("predicted", {}).get("link_bytes", [])
    relayed = {(r["src"], r["dst"]): r["bytes"] for r in results.get("predicted", {}).get("relayed_link_bytes", [])}
    plot_topology(plan, link_bytes, relayed, out_dir / "topology.png")
    plot_iterations(results, out_dir / "iterations.png")
    plot_link_bytes(
        plan,
        link_bytes,
        out_dir / "link_bytes.png",
        "bytes per directed link per iteration (predicted from the schedule)",
    )
    report = out_dir / "report.md"
    report.write_text(render_markdown(results))
    return report
