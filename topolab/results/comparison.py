"""What `topolab compare` computes and writes, apart from its command line: every arm on one
time axis, each arm's scenario, the traffic facts, the table, the verdicts and the plot; `topolab
predict --topologies` and `topolab report` use the same.

Each topology runs through exactly the same path as `topolab run` (plan, predict, emulate,
verified iterations) into ``OUT/<topology>/``; then a table and a bar plot compare them, and
the traffic explains the result: how many bytes each plan relays through other servers (the
forwarding tax), and which links are the bottleneck (the most loaded directed link).
The switch baseline gets one port of ``[topology] switch_gbps`` per server (default d x B:
the same total bandwidth per server as its d direct-connect interfaces, the prototype's
100 Gbps port against 4 x 25 Gbps).

A hierarchical scenario is compared at the same budget per server: the other topologies get
``[cluster] degree`` links of ``budget_gbps / degree`` each (emulated at ``budget_mbps /
degree``), and the hierarchical keys are dropped for them (`scenario_for`).

Every arm runs on one time axis (`time_axis`): the time scale of the fastest arm (the one
whose planned rate stands highest above its emulated rate: the switch's 100 Gbps port against
TopoOpt's 25 Gbps links), each arm's ``link_mbps`` standing for the ``reference_gbps`` that
gives it that scale (docs/emulation.md section 2). So the workers' per-operation cost, real
time on this machine, weighs the same in every arm's planned milliseconds. The table, the
bar plot's title and compare.json say the axis; each arm's results.json records its
``time_scale`` and ``reference_gbps``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.files import write_file
from contract.physics import time_scale
from planner.scenario import HIERARCHICAL_KEYS, Scenario, with_overrides

from .run_results import WORKER_COST_NOTABLE, LinkBytes, RunResults


@dataclass(frozen=True)
class TimeAxis:
    """The one time scale every arm runs at, and the rate each arm's ``link_mbps`` stands for."""

    time_scale: float  # emulated seconds per planned second, in every arm
    fastest: str  # the arm whose own scale it is
    reference_gbps: dict[str, float]  # per arm: what its link_mbps stands for at that scale

    def to_dict(self) -> dict[str, Any]:
        return {"time_scale": self.time_scale, "fastest": self.fastest, "reference_gbps": dict(self.reference_gbps)}

    def line(self) -> str:
        refs = ", ".join(f"{kind} {gbps:g} Gbps" for kind, gbps in self.reference_gbps.items())
        return (
            f"time axis: every arm at time scale x{self.time_scale:g} (the {self.fastest} arm's); "
            f"link_mbps stands for {refs}"
        )


def time_axis(rates: dict[str, tuple[float, float]]) -> TimeAxis:
    """One time scale for arms ``{kind: (plan link_gbps, emulated link_mbps)}``: the largest
    of their own scales, so no arm's links run faster than its ``link_mbps``; each arm's
    ``reference_gbps`` is its link_gbps scaled up to that scale."""
    own = {kind: time_scale(gbps, mbps) for kind, (gbps, mbps) in rates.items()}
    fastest = max(own, key=lambda kind: own[kind])
    scale = own[fastest]
    return TimeAxis(scale, fastest, {kind: gbps * scale / own[kind] for kind, (gbps, _mbps) in rates.items()})


def scenario_for(base: Scenario, kind: str) -> Scenario:
    """``base`` on topology ``kind``; from a hierarchical base, at its budget per server."""
    if base.topology.kind != "hierarchical" or kind == "hierarchical":
        return with_overrides(base, topology={"kind": kind})
    degree = base.cluster.degree
    return with_overrides(
        base,
        drop=HIERARCHICAL_KEYS + (("emulation", "link_mbps"),),
        topology={"kind": kind},
        cluster={"link_gbps": base.topology.budget_gbps / degree},
        emulation={"link_mbps": base.emulation.budget_mbps / degree},
    )


def traffic_facts(results: RunResults) -> dict[str, Any]:
    """Relayed share and bottleneck link of one run's predicted per-link bytes."""
    predicted = results.predicted
    links = predicted.link_bytes if predicted else []
    relayed = sum(r.bytes for r in predicted.relayed_link_bytes) if predicted else 0
    total = sum(r.bytes for r in links) or 1
    top = max(links, key=lambda r: r.bytes, default=LinkBytes(-1, -1, 0))
    servers = results.plan["servers"]
    name = lambda v: "switch" if v >= servers else f"h{v}"  # noqa: E731
    return {
        "relayed_share": relayed / total,
        "link_bytes_total": total,
        "bottleneck": f"{name(top.src)}->{name(top.dst)}",
        "bottleneck_mb": top.bytes / 1e6,
    }


def render_table(rows: list[dict[str, Any]], axis: TimeAxis) -> str:
    """The comparison as a Markdown table, under the line that says its time axis."""
    lines = [
        axis.line(),
        "",
        "| topology | per-server bandwidth | time scale | measured ms | predicted ms | error | verdict | relayed bytes | busiest link (MB/iter) | verified |",
        "|---|---|---:|---:|---:|---:|---|---:|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['topology']} | {r['bandwidth']} | x{r['time_scale']:g} | {r['measured_ms']:.3f} | "
            f"{r['predicted_ms']:.3f} | {100 * r['error']:.1f}% | {verdict(r)} | {100 * r['relayed_share']:.0f}% | "
            f"{r['bottleneck']} ({r['bottleneck_mb']:.1f}) | {'yes' if r['verified'] else 'NO'} |"
        )
    return "\n".join(lines)


def write_compare(out: Path, doc: dict[str, Any]) -> str:
    """compare.md and compare.png of a comparison document (compare.json); returns the table."""
    axis = TimeAxis(**doc["axis"])
    table = render_table(doc["rows"], axis)
    title = doc.get("title") or out.name
    plot_compare(doc["rows"], title, out / "compare.png")
    write_file(out / "compare.md", f"# {title}: topologies compared\n\n{table}\n\n![compare](compare.png)\n")
    return table


def verdict(row: dict[str, Any]) -> str:
    """Whether the arm's prediction held (its scenario's tolerance), and a word when the
    workers' own cost is a large share of its iteration (then the verdict is partly the
    emulator's, not the topology's)."""
    if "over_tolerance" not in row:  # a comparison written before verdicts
        return "-"
    text = (
        f"**MISSED** (over {100 * row['tolerance']:.0f}%)"
        if row["over_tolerance"]
        else f"held (within {100 * row['tolerance']:.0f}%)"
    )
    share = row.get("worker_cost_share")
    if share is not None and share >= WORKER_COST_NOTABLE:
        text += f"; workers' cost {100 * share:.0f}% of the iteration: partly the emulator"
    return text


def plot_compare(rows: list[dict[str, Any]], title: str, path: Path) -> None:
    from .run_report import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.8, 4.0))
    xs = range(len(rows))
    ax.bar(
        [x - 0.2 for x in xs], [r["measured_ms"] for r in rows], width=0.4, label="measured (emulated)", color="#4c78a8"
    )
    ax.bar([x + 0.2 for x in xs], [r["predicted_ms"] for r in rows], width=0.4, label="predicted", color="#f2a541")
    ax.set_xticks(list(xs), [r["topology"] for r in rows])
    ax.set_ylabel("iteration time (real cluster ms)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
