"""The written results of `topolab sweep`: ``sweep.txt`` (what an iteration is, the table, its
legends, the skipped cells) and ``sweep.png`` of a sweep document (``sweep.json``); `topolab
report` renders a sweep folder with the same code.

The plot's iteration times share one axis per (d, B) panel: a linear one from zero while the
times stay within `LOG_AXIS_SPAN` of each other (a 14% difference then looks like 14%), a log
one beyond, and plain tick labels on either (16.5, 100, 0.2; never 1.65x10^1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from contract.files import write_file

from ..common.plan_text import iteration_text

LOG_AXIS_SPAN = 10.0  # slowest / fastest time of a panel from which a log axis shows them better


def write_sweep(out_dir: Path, doc: dict, draw_plot: bool = True) -> tuple[str, list[Path]]:
    """sweep.txt (the table, its legend, the skipped cells) and sweep.png of a sweep document
    (sweep.json); returns the text and the files the folder holds."""
    legend = STRATEGY_LEGEND + "\n" + NETWORK_LEGEND
    skipped = doc.get("skipped", [])
    table = format_table(doc["rows"]) + "\n\n" + legend + "".join(f"\n{note}" for note in skipped)
    if doc.get("servers") and doc.get("batch_per_server"):  # a sweep.json of before they were recorded: none
        table = f"iteration: {iteration_text(doc['servers'], doc['batch_per_server'])}\n" + table
    write_file(out_dir / "sweep.txt", table + "\n")
    written = [out_dir / "sweep.json", out_dir / "sweep.txt"]
    if draw_plot:
        written.append(plot(doc["rows"], out_dir / "sweep.png"))
    return table, written


def _ms(x: float) -> str:
    return f"{x * 1e3:.3f}" if x < 1 else f"{x * 1e3:.1f}"


def format_table(rows: list[dict]) -> str:
    w = max([7] + [len(r["network"]) for r in rows])
    m = max([9] + [len(r["model"]) for r in rows])
    head = f"{'model':{m}} {'d':>2} {'B':>5} {'network':{w}} {'Gbps/srv':>8} {'cost $k':>8} {'iter ms':>9} {'vs TopoOpt':>10} {'DP ms':>9} strategy"
    lines = [head, "-" * len(head)]
    for r in rows:
        vs = f"{r['vs_topoopt']:.2f}x" if r["vs_topoopt"] else "-"
        strat = _strategy_text(r["strategy"])
        lines.append(
            f"{r['model']:{m}} {r['degree']:>2} {r['link_gbps']:>5g} {r['network']:{w}} {r['per_server_gbps']:>8g} "
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


def plain_tick(value: float, _pos: object = None) -> str:
    """A tick label as a reader writes the number: 16.5, 100, 0.2, 1,000 (matplotlib's log
    axis would write 1.65x10^1)."""
    if value == 0 or not math.isfinite(value):
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))  # three significant digits
    text = f"{value:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def time_axis(values: Sequence[float]) -> tuple[str, float, float]:
    """(scale, low, high) of a panel's iteration-time axis (ms): linear from zero while the
    times are within `LOG_AXIS_SPAN` of each other, log from a bit below the fastest to a bit
    above the slowest beyond."""
    shown = [v for v in values if v > 0 and math.isfinite(v)]
    if not shown:
        return "linear", 0.0, 1.0
    low, high = min(shown), max(shown)
    if high / low < LOG_AXIS_SPAN:
        return "linear", 0.0, high * 1.15
    return "log", low / 1.5, high * 1.5


def plot(rows: list[dict], path: Path) -> Path:
    """Per (d, B): iteration time per model and network (points), and relative to TopoOpt (bars)."""
    from .run_report import pyplot, save_figure

    plt = pyplot()
    from matplotlib.ticker import FuncFormatter, NullFormatter

    combos = sorted({(r["degree"], r["link_gbps"]) for r in rows})
    models = list(dict.fromkeys(r["model"] for r in rows))
    networks = list(dict.fromkeys(r["network"] for r in rows))
    fig, axes = plt.subplots(len(combos), 2, figsize=(12, 3.6 * len(combos)), squeeze=False)
    width = 0.8 / len(networks)
    for row_axes, (d, b) in zip(axes, combos):
        cell = {(r["model"], r["network"]): r for r in rows if r["degree"] == d and r["link_gbps"] == b}
        panel_ms: list[float] = []
        for j, net in enumerate(networks):
            xs = [i + (j - (len(networks) - 1) / 2) * width for i in range(len(models))]
            abs_ms = [cell[(m, net)]["iteration_s"] * 1e3 if (m, net) in cell else 0 for m in models]
            rel = [cell[(m, net)]["vs_topoopt"] or 0 if (m, net) in cell else 0 for m in models]
            shown = [(x, t) for x, t in zip(xs, abs_ms) if t > 0]
            panel_ms += [t for _, t in shown]
            row_axes[0].plot([x for x, _ in shown], [t for _, t in shown], "o", label=net)
            row_axes[1].bar(xs, rel, width, label=net)
        scale, low, high = time_axis(panel_ms)
        for ax, title, ylabel in (
            (row_axes[0], "iteration time", f"ms (real cluster{', log axis' if scale == 'log' else ''})"),
            (row_axes[1], "relative to TopoOpt", "x TopoOpt's time"),
        ):
            ax.set_xticks(range(len(models)), models)
            ax.set_title(f"{title}: {rows[0]['servers']} servers, d={d}, B={b:g} Gbps")
            ax.set_ylabel(ylabel)
        row_axes[0].set_yscale(scale)  # points, not bars: a log axis has no zero for a bar to start at
        row_axes[0].set_ylim(low, high)
        row_axes[0].yaxis.set_major_formatter(FuncFormatter(plain_tick))
        row_axes[0].yaxis.set_minor_formatter(NullFormatter())
        row_axes[1].set_ylim(bottom=0)  # bars from zero, so a 0.96x difference looks like one
        row_axes[1].axhline(1.0, color="black", linewidth=0.8)
        row_axes[0].legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)
