"""`topolab alloc`: how LIBRA splits a hierarchical scenario's per-server budget over the
dimensions, against equal shares and the scenario's own split (docs/algorithms.md section 3).

    topolab alloc SCENARIO [--json]
    topolab alloc SCENARIO --sweep [--measure] [--bytes 64M] [--out DIR]

Without ``--sweep``: per dimension the bytes one server sends per training iteration and
the Gbit/s of each split; per split the allocator's model (communication seconds on the
planned network) and the flow model's prediction of one iteration (planner.cost.predict on the
schedule ``topolab run`` executes, at ``[emulation] budget_mbps``, in real milliseconds).

``--sweep``: one AllReduce of ``--bytes`` on the scenario's network at LIBRA's split for that
AllReduce, at equal shares, at LIBRA's split of the other schedule (run as that schedule),
and at a range of dimension-0 shares (the other dimensions keep LIBRA's proportions). For
each: the model (max or sum over d of a_d / B_d at TCP goodput), the flow model's prediction
and, with ``--measure`` (root), the time on the emulated network, every AllReduce verified
by the workers. Times are the real cluster's milliseconds, as ``alloc`` without ``--sweep``
gives them: the emulated seconds over the time scale (``budget_gbps`` x 1000 /
``budget_mbps``); alloc.json keeps both (``*_s`` emulated, ``*_ms`` real). Writes alloc.json
and alloc.png (time against dimension 0's share, LIBRA's choice marked) into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.emulation import EmulatedRates, EmulationConfig, emulated_rates
from contract.errors import UsageError
from contract.files import write_file
from contract.physics import DEFAULT_MTU, tcp_goodput_fraction, time_scale
from planner.bandwidth.libra import allocate, allreduce_workload, model_seconds
from planner.collectives.hierarchical import PIPELINE_CHUNKS, hierarchical_allreduce_for_plan
from planner.cost.predict import plan_network, predict
from planner.topology.hierarchical import hierarchical_plan

from ..common.network import add_network_arguments, network_config, network_flags, open_network
from ..common.options import bounded_int, check_output_dir, make_output_dir
from ..common.plan_text import REAL_TIMES, iteration_text
from ..results.collective_results import parse_size

if TYPE_CHECKING:
    from emulator import EmulationConfig

DEFAULT_SWEEP_BYTES = 64 << 20  # nccl-tests' usual large message; seconds per AllReduce emulated
SWEEP_SHARES = (0.5, 0.6, 0.7, 0.75, 0.85, 0.9, 0.95)  # dimension 0's share; LIBRA's is added
SAME_SHARE = 1e-9
MAX_SWEEP_BYTES = 256 << 20  # every worker holds the whole buffer: 12 x 256 MiB at most
Log = Callable[[str], None]


@dataclass(frozen=True)
class SweepCase:
    """One AllReduce of ``nbytes`` on a hierarchical network emulated at ``budget_mbps``."""

    dims: tuple[int, ...]
    blocks: tuple[str, ...]
    budget_gbps: float
    budget_mbps: float
    nbytes: int
    schedule: str = "pipelined"
    mtu: int = DEFAULT_MTU
    latency_us: float = 1.0

    @classmethod
    def of(cls, s: Any, nbytes: int) -> SweepCase:
        t = s.topology
        return cls(t.dims, t.blocks, t.budget_gbps, s.emulation.budget_mbps, nbytes, t.schedule, s.emulation.mtu)

    def emulation(self) -> EmulationConfig:
        """How a row's network is emulated: the budget per server at ``budget_mbps``."""
        return EmulationConfig(link_mbps=self.budget_mbps, mtu=self.mtu)

    @property
    def time_scale(self) -> float:
        """Emulated seconds per real second: the budget emulated at ``budget_mbps``."""
        return time_scale(self.budget_gbps, self.budget_mbps)


def _row(name: str, shares, mode: str) -> dict:
    chunks = PIPELINE_CHUNKS if mode == "pipelined" else 1
    return {"name": name, "shares": [float(x) for x in shares], "mode": mode, "chunks": chunks}


def config_rows(case: SweepCase) -> list[dict]:
    """LIBRA, equal, LIBRA of the other schedule, and the dimension-0 share sweep."""
    workload = allreduce_workload(case.nbytes)
    other = "sequential" if case.schedule == "pipelined" else "pipelined"
    libra = allocate(case.dims, workload, case.budget_gbps, mode=case.schedule)
    libra_other = allocate(case.dims, workload, case.budget_gbps, mode=other)
    count = len(case.dims)
    rows = [
        _row("libra", libra.shares, case.schedule),
        _row("equal", [1 / count] * count, case.schedule),
        _row(f"libra-{other}", libra_other.shares, other),
    ]
    rest = sum(libra.shares[1:])
    for share in SWEEP_SHARES:
        if all(abs(r["shares"][0] - share) > SAME_SHARE or r["mode"] != case.schedule for r in rows):
            shares = [share] + [(1 - share) * x / rest for x in libra.shares[1:]]
            rows.append(_row(f"sweep {share:.2f}", shares, case.schedule))
    goodput = tcp_goodput_fraction(case.mtu)
    for r in rows:
        emulated_gbps = [x * case.budget_mbps / 1e3 * goodput for x in r["shares"]]
        r["model_s"] = model_seconds(libra.dimension_bytes, emulated_gbps, r["mode"])
        r["libra"] = r["name"] == "libra"
    return rows


def _plan_and_schedule(case: SweepCase, row: dict):
    plan = hierarchical_plan(case.dims, case.blocks, case.budget_gbps, row["shares"], case.latency_us)
    return plan, hierarchical_allreduce_for_plan(plan, case.nbytes, row["chunks"])


def predict_row(case: SweepCase, row: dict, rates: EmulatedRates | None = None) -> float:
    """The flow model's time of the row's AllReduce (emulated seconds) on cables at ``rates``
    (a built network's; default: as the case's network will be built)."""
    plan, schedule = _plan_and_schedule(case, row)
    rates = rates or emulated_rates(plan.network, case.emulation())
    return predict(schedule, plan_network(plan, rates=rates)).seconds


def measure_row(
    case: SweepCase,
    row: dict,
    repeat: int,
    config: EmulationConfig | None,
    log: Log,
    timeout_s: float = 120.0,
) -> dict:
    """Build the row's network on the emulator (``config``, the command's: on this machine or
    over its machines, at the case's budget and MTU) and time its AllReduce (one warm-up, then
    ``repeat`` timed runs, each verified by the workers)."""
    from ..common.schedule_run import run_schedule_on

    plan, schedule = _plan_and_schedule(case, row)
    config = network_config(config, link_mbps=case.budget_mbps, mtu=case.mtu)

    def each(i: int, res: Any) -> None:
        log(f"  {row['name']}: {'warm-up' if i == 0 else i} {res.time_s:.3f} s {'verified' if res.ok else 'FAILED'}")

    with open_network(plan, config, log=log) as net:
        predicted = predict_row(case, row, net.rates)
        run = run_schedule_on(net, schedule.to_dict(), repeat=repeat, timeout_s=timeout_s, each=each)
    times, cpu, verified = run.times_s, run.cpu_s, run.verified
    t = statistics.median(times)
    return {
        "predicted_s": predicted,
        "measured_s": t,
        "times_s": times,
        "verified": verified,
        "worker_cpu_cores": statistics.median(cpu) / t,
    }


def plot(rows: list[dict], path: Path, title: str) -> None:
    """Model, predicted and (if measured) measured time against dimension 0's share."""
    from ..results.run_report import pyplot, save_figure

    plt = pyplot()

    libra = next(r for r in rows if r["libra"])
    same = sorted((r for r in rows if r["mode"] == libra["mode"]), key=lambda r: r["shares"][0])
    xs = [r["shares"][0] for r in same]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(xs, [r["model_ms"] for r in same], "k:", label="allocator model")
    ax.plot(xs, [r["predicted_ms"] for r in same], "o-", label="predicted (flow model)")
    if all("measured_ms" in r for r in same):
        ax.plot(xs, [r["measured_ms"] for r in same], "s-", label="measured on the emulator")
    ax.axvline(libra["shares"][0], color="grey", linestyle="--", linewidth=1)
    ax.annotate("LIBRA", (libra["shares"][0], libra["predicted_ms"]), textcoords="offset points", xytext=(6, 30))
    ax.set_xlabel("share of the budget in dimension 0")
    ax.set_ylabel("AllReduce time (ms, real cluster)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def sweep(case: SweepCase, measure: bool, repeat: int, config: EmulationConfig | None, log: Log) -> list[dict]:
    """`config_rows` with each row's prediction and, if ``measure``, its measurement on the
    network ``config`` describes (`measure_row`)."""
    rows = config_rows(case)
    for r in rows:
        r["predicted_s"] = predict_row(case, r)
        if measure:
            r.update(measure_row(case, r, repeat, config, log))
        for key in ("model", "predicted", "measured"):  # the real cluster's ms beside the emulated s
            if f"{key}_s" in r:
                r[f"{key}_ms"] = r[f"{key}_s"] / case.time_scale * 1e3
    return rows


def format_sweep(rows: list[dict], case: SweepCase) -> str:
    measured = any("measured_ms" in r for r in rows)
    lines = [
        f"# one {case.nbytes >> 20} MiB AllReduce (not a training iteration) on {' x '.join(map(str, case.dims))} "
        f"servers, {case.budget_gbps:g} Gbit/s per server; {REAL_TIMES}"
        + (
            f" (measured on the emulator at {case.budget_mbps:g} Mbit/s per server, x{case.time_scale:g})"
            if measured
            else ""
        ),
        f"{'split':<20} {'shares':>13} {'chunks':>6} {'model ms':>9} {'predicted ms':>12} {'measured ms':>11}",
    ]
    for r in rows:
        shown = f"{r['measured_ms']:11.3f}" if "measured_ms" in r else f"{'-':>11}"
        shares = "/".join(f"{x:.3f}" for x in r["shares"])
        mark = " <- LIBRA" if r["libra"] else ""
        lines.append(
            f"{r['name']:<20} {shares:>13} {r['chunks']:>6} {r['model_ms']:9.3f} {r['predicted_ms']:12.3f} {shown}{mark}"
        )
    return "\n".join(lines)


def iteration_splits(s: Any) -> dict[str, dict]:
    """LIBRA, equal and (if it differs) the scenario's split of one training iteration:
    Gbit/s per dimension, the allocator's model and the flow model's prediction (real ms)."""
    from planner.scenario import with_overrides

    from ..common.prediction import prepare

    chosen = s.topology.allocation
    names = ["libra", "equal"] + ([] if isinstance(chosen, str) else ["scenario"])
    out: dict[str, dict] = {}
    for name in names:
        variant = s if name == "scenario" else with_overrides(s, topology={"allocation": name})
        prepared = prepare(variant)
        plan, predicted = prepared.plan, prepared.predicted
        allocation = plan.extra["allocation"]
        out[name] = {
            "shares": allocation["shares"],
            "gbps": allocation["gbps"],
            "model_ms": allocation["model_s"] * 1e3,
            "predicted_ms": predicted["real_ms"],
        }
        out["dimension_bytes"] = allocation["dimension_bytes"]
    return out


def format_splits(s: Any, splits: dict) -> str:
    t = s.topology
    names = [k for k in splits if k != "dimension_bytes"]
    lines = [
        f"# {s.name}: {s.cluster.servers} servers as {' x '.join(map(str, t.dims))} ({' x '.join(t.blocks)}), "
        f"budget {t.budget_gbps:g} Gbit/s per server, {t.schedule}, objective {t.objective}, "
        f"allocation {t.allocation if isinstance(t.allocation, str) else list(t.allocation)}",
        f"# iteration: {iteration_text(s.cluster.servers, s.workload.batch_per_server)}",
        f"{'dim':<4}{'size':>5} {'block':<7}{'MB/iter':>9}" + "".join(f"{n + ' Gbit/s':>17}" for n in names),
    ]
    for d, (p, block) in enumerate(zip(t.dims, t.blocks)):
        row = f"{d:<4}{p:>5} {block:<7}{splits['dimension_bytes'][d] / 1e6:>9.1f}"
        lines.append(row + "".join(f"{splits[n]['gbps'][d]:>17.2f}" for n in names))
    libra = splits["libra"]["predicted_ms"]
    lines.append(f"{'split':<10}{'model (ms)':>12}{'predicted (ms/iter)':>21}{'vs libra':>10}")
    for n in names:
        x = splits[n]
        lines.append(f"{n:<10}{x['model_ms']:>12.3f}{x['predicted_ms']:>21.3f}{x['predicted_ms'] / libra:>9.2f}x")
    lines.append(
        "# model: communication of the full-size job; predicted: one iteration as topolab run executes it"
        f" (compute included, transfers x {s.run.payload_scale:g})"
    )
    return "\n".join(lines)


def add_alloc_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help='scenario TOML file with [topology] kind = "hierarchical"')
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument(
        "--sweep", action="store_true", help="one AllReduce at a range of shares; writes alloc.json/png"
    )
    parser.add_argument(
        "--measure", action="store_true", help="with --sweep: also run every split on the emulator (root)"
    )
    parser.add_argument("--bytes", default="64M", help="with --sweep: AllReduce size (K/M/G suffixes; default 64M)")
    parser.add_argument("--repeat", type=bounded_int(1, 1000), default=2, help="timed runs per split after a warm-up")
    parser.add_argument("--out", default=None, metavar="DIR", help="where alloc.json and alloc.png go (--sweep)")
    add_network_arguments(parser, when="with --measure: ")


def run_alloc(args: argparse.Namespace) -> int:
    """Entry point of `topolab alloc`."""
    from planner import load_scenario

    s = load_scenario(args.scenario)
    if s.topology.kind != "hierarchical":
        raise UsageError(f'{s.source}: topology.kind: alloc needs "hierarchical", got {s.topology.kind!r}')
    if args.measure and not args.sweep:
        raise UsageError("--measure: only with --sweep")
    if args.machines is not None and not args.measure:
        raise UsageError("--machines: only with --sweep --measure (nothing else builds a network)")
    if not args.sweep:
        splits = iteration_splits(s)
        print(json.dumps(splits, indent=2) if args.json else format_splits(s, splits))
        return 0
    nbytes = parse_size(args.bytes)
    if nbytes > MAX_SWEEP_BYTES:
        raise UsageError(f"--bytes {args.bytes}: at most {MAX_SWEEP_BYTES >> 20}M")
    out = check_output_dir(args.out or f"results/alloc-{s.name}", "--out")
    config = network_config(s.emulation, network_flags(args, "alloc --measure")) if args.measure else None
    case = SweepCase.of(s, nbytes)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    rows = sweep(case, args.measure, args.repeat, config, log)
    doc = {
        "scenario": s.name,
        "case": asdict(case),
        "time_scale": case.time_scale,
        "times": "*_s: emulated seconds; *_ms: the real cluster's milliseconds (emulated / time_scale)",
        "rows": rows,
        "measured": args.measure,
        "cpus": os.cpu_count(),
    }
    make_output_dir(out)
    write_file(out / "alloc.json", json.dumps(doc, indent=2))
    title = (
        f"{' x '.join(map(str, case.dims))} {' x '.join(case.blocks)}, "
        f"{case.budget_mbps:g} Mbit/s per server, {case.nbytes >> 20} MiB ({case.schedule})"
    )
    plot(rows, out / "alloc.png", title)
    print(json.dumps(doc, indent=2) if args.json else format_sweep(rows, case))
    log(f"wrote {out / 'alloc.json'} and {out / 'alloc.png'}")
    return 0 if all(r.get("verified", True) for r in rows) else 1
