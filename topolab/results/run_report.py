"""Turn a run's results (`topolab.results.run_results.RunResults`, results.json) into report.md and plots
a person would rather look at.

Plots (PNG, matplotlib's Agg backend, no display needed):
- ``topology.png``: servers on a circle, every cable drawn; the width and colour of each cable
  show the bytes it carries per iteration, and the share of those bytes that is *relayed*
  (traffic between two other servers crossing this cable: host-based forwarding's tax);
- ``iterations.png``: per iteration, the measured time (split into compute and exposed
  communication) and the predicted time side by side, in the real cluster's milliseconds;
- ``link_bytes.png``: heat maps of bytes per directed link (source row, destination column),
  predicted from the schedule and, next to it, measured where the run recorded it
  (``results.measured.link_bytes``, the same rows as the prediction's).

Titles are wrapped and the figures saved with a tight bounding box, so no title is cut off.
A prediction error above the run's tolerance (the scenario's ``run.tolerance``, recorded in
the results) is called out at the top of report.md and flagged in the summary
(``error_over_tolerance``).

`topolab report DIR` renders them again from a results folder, also from one a killed run
left behind (results.json with status "running" and its iterations.jsonl), marked incomplete;
a results.json of an unknown or newer format is one line naming it (exit 2).

- ``timeline.png`` (a run with ``--trace``): the traced iteration as measured above its
  prediction on one time axis, a row per rank with a lane per phase, each side's critical
  path outlined (`plot_timeline`, drawn from trace.json: `topolab.results.trace_events`).

The "AllReduce" section lists the algorithm every group size of buckets ran and why
(``results.schedule.allreduce``), e.g. the forest on cables of different rates; a run with
faults gets a "Faults" section (`report_section`).

Over 300 lines: the plots and the markdown read the same results and their summary
(`RunResults.summarize`), and splitting them would only pass those around.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contract.files import write_file

from ..common.plan_text import rate_text
from .run_results import LinkBytes, RunResults, Summary

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


def save_figure(fig: Any, path: Path, **savefig: Any) -> Path:
    """Render ``fig`` in memory (the format named by ``path``'s suffix) and write it to ``path``
    with `contract.files.write_file`, never through a link planted at its name; the figure is
    closed. ``savefig``: matplotlib's options (``dpi``, ``bbox_inches``)."""
    import io

    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format=Path(path).suffix.lstrip(".") or "png", **savefig)
    finally:
        pyplot().close(fig)
    write_file(path, buffer.getvalue())
    return Path(path)


def _positions(servers: int, switches: int) -> dict[int, tuple[float, float]]:
    pos = {i: (math.cos(2 * math.pi * i / servers), math.sin(2 * math.pi * i / servers)) for i in range(servers)}
    for k in range(switches):
        pos[servers + k] = (0.0, 0.0)
    return pos


def plot_topology(
    plan: dict, link_bytes: Sequence[LinkBytes], relayed_bytes: dict[tuple[int, int], float], path: Path
) -> None:
    servers, switches = plan["servers"], plan.get("switches", 0)
    pos = _positions(servers, switches)
    carried: dict[tuple[int, int], float] = {}
    for row in link_bytes:
        key = (min(row.src, row.dst), max(row.src, row.dst))
        carried[key] = carried.get(key, 0.0) + row.bytes
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
    save_figure(fig, path, dpi=110, bbox_inches="tight")


def plot_iterations(results: RunResults, path: Path) -> None:
    its = results.iterations
    pred = results.predicted.real_ms if results.predicted else None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    half = 0.38  # bar width: measured left of the iteration's tick, predicted right
    if its:
        idx = [it.index for it in its]
        compute = [it.compute_real_ms for it in its]
        comm = [max(0.0, it.measured_real_ms - c) for it, c in zip(its, compute)]
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
            if not it.verified:
                ax.annotate("✗ verify", (i - half / 2, c + m), ha="center", color="red")
        ax.set_xticks(idx)
    elif pred is not None:
        ax.axhline(pred, color="black", ls="--", lw=1.5, label=f"predicted {pred:.3f} ms (nothing measured)")
    ax.set_xlabel("iteration")
    ax.set_ylabel("time (real cluster ms)")
    error = results.summarize().error
    title = f"{results.scenario['name']}: measured vs predicted iteration time"
    if error is not None:
        title += f" (error {error:.1%})"
    ax.set_title(wrapped(title))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # outside: never over a bar
    fig.tight_layout()
    save_figure(fig, path, dpi=110, bbox_inches="tight")


def _link_matrix(nodes: int, link_bytes: Sequence[LinkBytes]):
    import numpy as np

    matrix = np.full((nodes, nodes), np.nan)
    for row in link_bytes:
        matrix[row.src, row.dst] = row.bytes / 1e6
    return matrix


def plot_link_bytes(
    plan: dict,
    predicted: Sequence[LinkBytes],
    measured: Sequence[LinkBytes] | None,
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
    save_figure(fig, path, dpi=110, bbox_inches="tight")


TIMELINE_LANES = ("compute", "model-parallel", "AllReduce", "other")  # a rank's row, top to bottom
TIMELINE_COLOURS = {"compute": "#8fbf8f", "model-parallel": "#f0a860", "AllReduce": "#7fa7d9", "other": "#b0b0b0"}
CRITICAL_COLOUR = "#d62728"


def timeline_rows(doc: dict[str, Any]) -> dict[str, dict[int, dict[str, list[tuple[float, float, bool]]]]]:
    """The op slices of a trace (`topolab.results.trace_events`) as side ("measured", "predicted") ->
    rank -> phase -> [(start ms, duration ms, on the critical path)]; the predicted side's
    wire tracks (no phase) are left out."""
    names = {
        e["pid"]: e["args"]["name"]
        for e in doc.get("traceEvents", [])
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    rows: dict[str, dict[int, dict[str, list[tuple[float, float, bool]]]]] = {}
    for e in doc.get("traceEvents", []):
        args = e.get("args") or {}
        if e.get("ph") != "X" or "phase" not in args or e.get("pid") not in names:
            continue
        side, _, host = names[e["pid"]].partition(" h")
        phase = args["phase"] if args["phase"] in TIMELINE_LANES else "other"
        lanes = rows.setdefault(side, {}).setdefault(int(host), {})
        lanes.setdefault(phase, []).append((e["ts"] / 1e3, e["dur"] / 1e3, bool(args.get("critical_path"))))
    return rows


def plot_timeline(doc: dict[str, Any], path: Path, title: str) -> None:
    """``timeline.png``: the measured iteration above its prediction on one time axis (the
    real cluster's ms), a row per rank, in each row a lane per phase (compute,
    model-parallel, AllReduce: its streams' ops on one lane), the critical path's ops outlined
    in red and joined by a red line, each side's end marked."""
    from matplotlib.patches import Patch

    rows = timeline_rows(doc)
    sides = [side for side in ("measured", "predicted") if side in rows]
    ranks = max((len(rows[side]) for side in sides), default=1)
    present = {phase for side in sides for lanes in rows[side].values() for phase in lanes}
    lanes_drawn = [phase for phase in TIMELINE_LANES if phase in present] or ["other"]
    plt = pyplot()
    fig, axes = plt.subplots(
        len(sides) or 1, 1, figsize=(11, 1.4 + 0.4 * ranks * max(1, len(sides))), sharex=True, squeeze=False
    )
    lane_h = 0.84 / len(lanes_drawn)
    end_all = 0.0
    for ax, side in zip(axes[:, 0], sides):
        chain: list[tuple[float, float, float]] = []  # end, start, y of each op on the critical path
        end = 0.0
        for rank, lanes in rows[side].items():
            for k, phase in enumerate(lanes_drawn):
                bars = lanes.get(phase, [])
                if not bars:
                    continue
                y = rank - 0.42 + k * lane_h  # rank 0 on top (the axis is inverted), lanes top to bottom
                ax.broken_barh([(a, d) for a, d, _ in bars], (y, lane_h * 0.86), facecolors=TIMELINE_COLOURS[phase])
                hot = [(a, d) for a, d, c in bars if c]
                if hot:
                    ax.broken_barh(
                        hot, (y, lane_h * 0.86), facecolors="none", edgecolors=CRITICAL_COLOUR, linewidth=1.6, zorder=3
                    )
                    chain += [(a + d, a, y + lane_h * 0.43) for a, d in hot]
                end = max(end, max(a + d for a, d, _ in bars))
        # the path as a staircase in the order its ops end: from each op's end down (or up) to
        # the next op's row, then along it to its end
        chain.sort()
        xs: list[float] = []
        ys: list[float] = []
        for b, a, y in chain:
            start = max(a, xs[-1]) if xs else a
            xs += [start, b]
            ys += [y, y]
        ax.plot(xs, ys, color=CRITICAL_COLOUR, lw=1.2, alpha=0.9, zorder=4)
        ax.axvline(end, color="black", ls="--", lw=1)
        ax.annotate(
            f"{side} ends at {end:.3g} ms",
            (end, -0.5),
            xytext=(-4, 4),
            textcoords="offset points",
            ha="right",
            fontsize=9,
        )
        end_all = max(end_all, end)
        ax.set_yticks(range(ranks), [f"h{r}" for r in range(ranks)], fontsize=8)
        ax.set_ylim(ranks - 0.5, -0.6)
        ax.set_ylabel(side, fontsize=11, fontweight="bold")
        ax.grid(axis="x", color="#dddddd", lw=0.6)
        ax.set_axisbelow(True)
    axes[-1, 0].set_xlim(0, end_all * 1.08 or 1.0)
    axes[-1, 0].set_xlabel("time from the iteration's start (real cluster ms)")
    handles = [Patch(facecolor=TIMELINE_COLOURS[p], label=p) for p in lanes_drawn]
    handles.append(Patch(facecolor="none", edgecolor=CRITICAL_COLOUR, label="critical path (the chain that ends last)"))
    axes[0, 0].legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.02), ncol=4, fontsize=8, frameon=False)
    axes[0, 0].set_title(wrapped(title, 2 * TITLE_WRAP_CHARS), pad=28)
    fig.tight_layout()
    save_figure(fig, path, dpi=110, bbox_inches="tight")


def _fmt(x: Any, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _tolerance_callout(summary: Summary) -> list[str]:
    """A warning block when the prediction missed by more than the tolerance, else nothing."""
    if not summary.error_over_tolerance or summary.error is None or summary.tolerance is None:
        return []
    return [
        f"> **Prediction error {summary.error:.1%} is above the tolerance {summary.tolerance:.0%}.** "
        "The measured iterations are not what the planner's model of this schedule predicts: check the "
        "calibration (worker cost per op), CPU load on this machine, and the emulation notes below.",
        "",
    ]


def _allreduce_lines(used: dict[str, dict[str, Any]]) -> list[str]:
    """Which AllReduce each group size ran and why (``results.schedule.allreduce``: the
    iteration schedule's ``params["allreduce"]``, `planner.collectives.from_plan.choose_allreduce`)."""
    if not used:
        return []
    lines = ["## AllReduce", "", "| groups | algorithm | why |", "|---|---|---|"]
    lines += [f"| {groups} | {a['algorithm']} | {a['why']} |" for groups, a in used.items()]
    return lines + [""]


def _phase_lines(results: RunResults) -> list[str]:
    """When each phase ends, predicted beside measured (the median over the timed iterations),
    in real-cluster ms from the iteration's start: where a prediction gains or loses time."""
    pred, scale = results.predicted, results.emulation.time_scale
    timed = [it.phase_end_s for it in results.iterations if not it.warmup and it.phase_end_s]
    if not pred or not pred.phase_end_s or not timed:
        return []
    lines = [
        "",
        "When each phase ends (real cluster ms from the iteration's start; its slowest rank):",
        "",
        "| phase | predicted | measured (median) |",
        "|---|---:|---:|",
    ]
    for phase in sorted(pred.phase_end_s, key=pred.phase_end_s.__getitem__):
        measured = [ends[phase] for ends in timed if phase in ends]
        med = statistics.median(measured) / scale * 1e3 if measured else None
        lines.append(f"| {phase} | {_fmt(pred.phase_end_s[phase] / scale * 1e3, 3)} | {_fmt(med, 3)} |")
    return lines


def _cpu_line(results: RunResults, summ: Summary) -> str:
    """The workers' CPU load and CPU seconds an iteration, beside the estimate of their CPU
    demand the cable rate was chosen or checked with (`topolab.run.time_dilation`)."""
    cpu_s = statistics.median(it.worker_cpu_s for it in results.iterations if it.worker_cpu_s is not None)
    line = (
        f"- the workers kept {summ.cpu_load:.0%} of the {results.environment.cpus} cores busy, "
        f"{cpu_s:.3g} CPU-s an iteration (median over the timed iterations)"
    )
    dilation = results.emulation.dilation
    if dilation and dilation.get("cpu_demand_s"):
        line += (
            f"; the estimate the rate was checked against: ~{dilation['cpu_demand_s']:.3g} CPU-s,"
            f" {dilation['cpu_load']:.0%} (measured {cpu_s / dilation['cpu_demand_s']:.2f}x)"
        )
    return line


def render_markdown(results: RunResults) -> str:
    sc, plan, emu, summ = results.scenario, results.plan, results.emulation, results.summarize()
    cpu_note = results.cpu_bound_note()
    pred, sched = results.predicted, results.schedule
    lines = [
        f"# topolab run: {sc['name']}",
        "",
        f"Status: **{results.status}**" + (f" ({results.error})" if results.error else ""),
        "",
        *_tolerance_callout(summ),
        *([f"> **{cpu_note}**", ""] if cpu_note else []),
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
        f"- each {emu.plan_link_gbps:g} Gbps link emulated at {emu.link_mbps:g} Mbit/s: time scale x{emu.time_scale:g} "
        "(every time below in real-cluster units is the emulated time divided by it)",
        f"- MTU {emu.mtu}, latency "
        + (
            "emulated with netem"
            if emu.netem
            else "NOT emulated (this kernel has no netem); modelled as alpha per hop in the prediction"
        ),
        f"- payload scale {sched.payload_scale:g}, {sched.ops} ops per iteration,"
        f" {sched.allreduce_buckets} AllReduce bucket(s)",
        *(
            [
                f"- link rate {'chosen automatically' if emu.dilation['auto'] else 'of the scenario'}: {emu.dilation['why']}"
            ]
            if emu.dilation
            else []
        ),
        *([_cpu_line(results, summ)] if summ.cpu_load is not None else []),
        "",
        *_allreduce_lines(sched.allreduce),
        "## Result",
        "",
        "| | emulated s | real cluster ms |",
        "|---|---:|---:|",
        f"| measured (median of {summ.iterations}) | {_fmt(summ.median_measured_s, 4)} | {_fmt(summ.median_real_ms, 3)} |",
        f"| predicted (flow-level model of the same schedule) | {_fmt(pred.emulated_s if pred else None, 4)} | {_fmt(pred.real_ms if pred else None, 3)} |",
        "",
        f"Prediction error |predicted - measured| / measured: **{_fmt(100 * summ.error if summ.error is not None else None, 1)}%**",
        "",
        f"Verification: **{'every AllReduce and transfer verified on every rank in every iteration' if summ.verified else 'FAILED'}**",
        "",
        "| iteration | measured real ms | compute ms | exposed comm ms | verified |",
        "|---:|---:|---:|---:|---|",
    ]
    for it in results.iterations:
        m, c = it.measured_real_ms, it.compute_real_ms
        lines.append(
            f"| {it.index} | {_fmt(m, 3)} | {_fmt(c, 3)} | {_fmt(max(0.0, m - c), 3)} | "
            f"{'yes' if it.verified else 'NO: ' + '; '.join(it.errors[:2])} |"
        )
    lines += _phase_lines(results)
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
    measured_links = results.measured.link_bytes if results.measured else []
    predicted_links = pred.link_bytes if pred else []
    if measured_links and predicted_links:
        total_measured = sum(row.bytes for row in measured_links)
        total_predicted = sum(row.bytes for row in predicted_links)
        lines += [
            f"Bytes on the cables per timed iteration: measured {total_measured / 1e6:.2f} MB (wire bytes, "
            f"headers included), predicted {total_predicted / 1e6:.2f} MB of payload "
            f"({total_measured / total_predicted:.3f}x).",
            "",
        ]
    if results.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in results.notes] + [""]
    return "\n".join(lines) + report_section(results)


def _fmt_ms(ms: float | None) -> str:
    return "-" if ms is None else f"{ms:.3f}"


def report_section(results: RunResults) -> str:
    """The report's "Faults" section (markdown), '' without faults."""
    faults = results.faults or []
    if not faults:
        return ""
    lines = ["", "## Faults", ""]
    for f in faults:
        what = "down" if f.action == "down" else f"degraded to {f.factor:g}x"
        how = ", rerouted" if f.action == "down" and f.reroute else ""
        lines.append(f"- before iteration {f.iteration}: cable {f.cable} {what}{how}")
    lines += [
        "",
        "| iterations | faults before | measured ms (median) | predicted ms | slowdown measured | predicted |",
    ]
    lines.append("|---|---|---|---|---|---|")
    for ph in results.fault_phases():
        sm, sp = ph.measured_slowdown, ph.predicted_slowdown
        lines.append(
            f"| {ph.iterations[0]}..{ph.iterations[-1]} | {ph.faults_before} | "
            f"{ph.measured_real_ms:.3f} | {_fmt_ms(ph.predicted_real_ms)} | "
            f"{f'{sm:.3f}x' if sm else '-'} | {f'{sp:.3f}x' if sp else '-'} |"
        )
    return "\n".join(lines) + "\n"


def read_trace(results: RunResults, out_dir: Path) -> tuple[dict[str, Any] | None, str]:
    """The trace a run with ``--trace`` wrote (``results.trace``), read back under
    `topolab.results.trace_events.MAX_TRACE_BYTES`, or None and why not ("" when the run took none)."""
    import json

    from contract.files import FileInputError, read_capped_text

    from .trace_events import MAX_TRACE_BYTES

    if results.trace is None:
        return None, ""
    path = Path(out_dir) / Path(results.trace.file).name
    try:
        doc = json.loads(read_capped_text(path, MAX_TRACE_BYTES, "trace"))
    except FileInputError as err:
        return None, f"{path.name}: {err.problem}"
    except (ValueError, RecursionError) as err:
        return None, f"{path.name} is not JSON ({err})"
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return None, f"{path.name} has no traceEvents list"
    return doc, ""


def _timeline_lines(results: RunResults, doc: dict[str, Any] | None, problem: str) -> list[str]:
    """The "Timeline" section: where the trace is, what timeline.png shows, both critical paths."""
    trace = results.trace
    if trace is None:
        return []
    lines = ["## Timeline", ""]
    if doc is None:
        return lines + [f"The run wrote a trace, but it cannot be drawn: {problem}.", ""]
    other = doc.get("otherData", {})
    shown = "all ranks" if trace.ranks_shown == trace.ranks else f"the first {trace.ranks_shown} of {trace.ranks} ranks"
    lines += [
        f"Timed iteration {trace.iteration} (the last), as the workers measured it, beside the prediction of the "
        f"same iteration, {shown}: `{trace.file}` in the Chrome trace event format (open it at "
        "https://ui.perfetto.dev or in chrome://tracing: a process per server and side, a track per stream, "
        "an arrow from each send to its receive). Clocks: " + trace.clocks + ".",
        "",
        "| critical path | ops | ends (ms) | time on it by phase (ms) |",
        "|---|---:|---:|---|",
    ]
    for side, path in other.get("critical_path", {}).items():
        if not isinstance(path, dict) or "ops" not in path:
            continue
        parts = ", ".join(f"{phase} {ms:.3g}" for phase, ms in path.get("ms_by_phase", {}).items())
        if path.get("gaps_ms"):
            parts += f", waiting on none of its ops {path['gaps_ms']:.3g}"
        lines.append(f"| {side} | {path['ops']} | {_fmt(path.get('ends_ms'), 3)} | {parts} |")
    return lines + ["", "![timeline](timeline.png)", ""]


def write_report(results: RunResults, out_dir: Path) -> Path:
    """Write report.md and the plots next to results.json; returns the report's path."""
    out_dir = Path(out_dir)
    plan = results.plan
    link_bytes = results.predicted.link_bytes if results.predicted else []
    relayed = {(r.src, r.dst): r.bytes for r in results.predicted.relayed_link_bytes} if results.predicted else {}
    plot_topology(plan, link_bytes, relayed, out_dir / "topology.png")
    plot_iterations(results, out_dir / "iterations.png")
    plot_link_bytes(
        plan,
        link_bytes,
        results.measured.link_bytes if results.measured else None,
        out_dir / "link_bytes.png",
        f"{results.scenario['name']}: bytes per directed link per iteration, predicted and measured",
    )
    trace, problem = read_trace(results, out_dir)
    if trace is not None:
        plot_timeline(
            trace,
            out_dir / "timeline.png",
            f"{results.scenario['name']}: timed iteration {results.trace.iteration if results.trace else ''}, "
            "measured (top) and predicted (bottom), real cluster ms",
        )
    report = out_dir / "report.md"
    timeline = _timeline_lines(results, trace, problem)
    text = render_markdown(results)
    if timeline:
        text = text.rstrip("\n") + "\n\n" + "\n".join(timeline)
    write_file(report, text)
    return report
