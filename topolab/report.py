"""Turn a run's results.json into report.md and plots a person would rather look at.

Plots (PNG, matplotlib's Agg backend, no display needed):
- ``topology.png``: servers on a circle, every cable drawn; the width and colour of each cable
  show the bytes it carries per iteration, and the share of those bytes that is *relayed*
  (traffic between two other servers crossing this cable: host-based forwarding's tax);
- ``iterations.png``: per iteration, the measured time (split into compute and exposed
  communication) and the predicted time side by side, in the real cluster's milliseconds;
- ``link_bytes.png``: heat maps of bytes per directed link (source row, destination column),
  predicted from the schedule and, next to it, measured where the run recorded it
  (``results["measured"]["link_bytes"]``, the same rows as the prediction's).

Titles are wrapped and the figures saved with a tight bounding box, so no title is cut off.
A prediction error above the tolerance (``results["tolerance"]``, default
`PREDICTION_TOLERANCE`) is called out at the top of report.md and flagged in the summary
(``error_over_tolerance``).

`topolab report DIR` renders them again from a results folder, also from one a killed run
left behind (results.json with status "running" and its iterations.jsonl), marked incomplete.

The "AllReduce" section lists the algorithm every group size of buckets ran and why
(``results["schedule"]["allreduce"]``), e.g. the forest on cables of different rates.

One module slightly over 300 lines: the three plots and the markdown read the same summary
of the results (`summarize`), and splitting them would only pass that summary around.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

from contract.errors import UsageError
from planner.scenario import DEFAULT_TOLERANCE

from .journal import ITERATIONS_FILE, RESULTS_FILE, read_journal
from .options import check_output_dir
from .plan_cmd import rate_text

# |predicted - measured| / measured above this is called out when the results do not record
# their own tolerance: the scenario's default (run.tolerance)
PREDICTION_TOLERANCE = DEFAULT_TOLERANCE
TITLE_WRAP_CHARS = 60  # a title line wider than this is wrapped (figures are ~7 inches wide)


def wrapped(title: str, width: int = TITLE_WRAP_CHARS) -> str:
    import textwrap

    return "\n".join(textwrap.fill(part, width) for part in title.split("\n"))


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
            out["tolerance"] = results.get("tolerance", PREDICTION_TOLERANCE)
            out["error_over_tolerance"] = out["error"] > out["tolerance"]
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
    ax.set_title(wrapped(title + "\nline width = bytes per iteration"))
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def plot_iterations(results: dict, path: Path) -> None:
    its = [it for it in results["iterations"] if it.get("measured_real_ms") is not None]
    pred = results.get("predicted", {}).get("real_ms")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    half = 0.38  # bar width: measured left of the iteration's tick, predicted right
    if its:
        idx = [it["index"] for it in its]
        compute = [it.get("compute_real_ms", 0.0) for it in its]
        comm = [max(0.0, it["measured_real_ms"] - c) for it, c in zip(its, compute)]
        left = [i - half / 2 for i in idx]
        ax.bar(left, compute, half, color="#8fbf8f", label="measured: compute")
        ax.bar(left, comm, half, bottom=compute, color="#7fa7d9", label="measured: exposed communication")
        if pred is not None:
            ax.bar(
                [i + half / 2 for i in idx],
                [pred] * len(idx),
                half,
                color="#c9c9c9",
                hatch="//",
                edgecolor="black",
                label=f"predicted {pred:.3f} ms",
            )
        for i, it, c, m in zip(idx, its, compute, comm):
            if not it.get("verified", False):
                ax.annotate("✗ verify", (i - half / 2, c + m), ha="center", color="red")
        ax.set_xticks(idx)
    elif pred is not None:
        ax.axhline(pred, color="black", ls="--", lw=1.5, label=f"predicted {pred:.3f} ms (nothing measured)")
    ax.set_xlabel("iteration")
    ax.set_ylabel("time (real cluster ms)")
    error = results.get("summary", {}).get("error")
    title = f"{results['scenario']['name']}: measured vs predicted iteration time"
    if error is not None:
        title += f" (error {error:.1%})"
    ax.set_title(wrapped(title))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # outside: never over a bar
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _link_matrix(nodes: int, link_bytes: list[dict]):
    import numpy as np

    matrix = np.full((nodes, nodes), np.nan)
    for row in link_bytes:
        matrix[row["src"], row["dst"]] = row["bytes"] / 1e6
    return matrix


def plot_link_bytes(
    plan: dict,
    predicted: list[dict],
    measured: list[dict] | None,
    path: Path,
    title: str = "bytes per directed link per iteration",
) -> None:
    """Predicted and measured heat maps side by side, on one colour scale."""
    import numpy as np

    plt = pyplot()
    nodes = plan["servers"] + plan.get("switches", 0)
    panels = [("predicted from the schedule", _link_matrix(nodes, predicted))]
    panels.append(("measured on the cables (tx counters)", _link_matrix(nodes, measured) if measured else None))
    values = [m for _, m in panels if m is not None and not np.isnan(m).all()]
    top = max((float(np.nanmax(m)) for m in values), default=1.0) or 1.0
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.6))
    labels = [str(i) for i in range(plan["servers"])] + ["sw"] * plan.get("switches", 0)
    image = None
    for ax, (name, matrix) in zip(axes, panels):
        ax.set_title(name)
        if matrix is None:
            ax.text(0.5, 0.5, "not recorded by this run", ha="center", va="center", transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        image = ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=top)
        ax.set_xlabel("to node")
        ax.set_ylabel("from node")
        ax.set_xticks(range(nodes), labels, fontsize=7)
        ax.set_yticks(range(nodes), labels, fontsize=7)
    if image is not None:
        fig.colorbar(image, ax=list(axes), label="MB per iteration (emulated payload)", shrink=0.85)
    fig.suptitle(wrapped(title, 2 * TITLE_WRAP_CHARS))
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _fmt(x: Any, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _tolerance_callout(summary: dict) -> list[str]:
    """A warning block when the prediction missed by more than the tolerance, else nothing."""
    if not summary.get("error_over_tolerance"):
        return []
    return [
        f"> **Prediction error {summary['error']:.1%} is above the tolerance {summary['tolerance']:.0%}.** "
        "The measured iterations are not what the planner's model of this schedule predicts: check the "
        "calibration (worker cost per op), CPU load on this machine, and the emulation notes below.",
        "",
    ]


def _allreduce_lines(schedule: dict) -> list[str]:
    """Which AllReduce each group size ran and why (``schedule["allreduce"]``: the iteration
    schedule's ``params["allreduce"]``, `planner.iteration.allreduce_algorithm`)."""
    used = schedule.get("allreduce")
    if not used:
        return []
    lines = ["## AllReduce", "", "| groups | algorithm | why |", "|---|---|---|"]
    lines += [f"| {groups} | {a['algorithm']} | {a['why']} |" for groups, a in used.items()]
    return lines + [""]


def render_markdown(results: dict) -> str:
    sc, plan, emu, summ = results["scenario"], results["plan"], results["emulation"], results["summary"]
    pred = results.get("predicted", {})
    lines = [
        f"# topolab run: {sc['name']}",
        "",
        f"Status: **{results['status']}**" + (f" ({results['error']})" if results.get("error") else ""),
        "",
        *_tolerance_callout(summ),
        "## Plan",
        "",
        f"- topology: {plan['topology']}, {plan['servers']} servers"
        + (f" + {plan['switches']} switch" if plan.get("switches") else f", degree {plan['degree']}")
        + f", {rate_text(plan['topology'], plan['link_gbps'])}",
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
        *_allreduce_lines(results["schedule"]),
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
    measured_links = results.get("measured", {}).get("link_bytes")
    predicted_links = results.get("predicted", {}).get("link_bytes")
    if measured_links and predicted_links:
        total_measured = sum(row["bytes"] for row in measured_links)
        total_predicted = sum(row["bytes"] for row in predicted_links)
        lines += [
            f"Bytes on the cables per timed iteration: measured {total_measured / 1e6:.2f} MB (wire bytes, "
            f"headers included), predicted {total_predicted / 1e6:.2f} MB of payload "
            f"({total_measured / total_predicted:.3f}x).",
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
        results.get("measured", {}).get("link_bytes"),
        out_dir / "link_bytes.png",
        f"{results['scenario']['name']}: bytes per directed link per iteration, predicted and measured",
    )
    report = out_dir / "report.md"
    report.write_text(render_markdown(results))
    return report
