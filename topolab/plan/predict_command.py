"""`topolab predict`: the iteration time of a scenario's own plan, without root.

The scenario is planned with its strategy as written (``data``, ``hybrid``, or ``search``),
one training iteration becomes the schedule `topolab run` emulates, and the flow-level model
predicts exactly that schedule (`topolab.common.prediction.prepare`, the same call `topolab run`
makes before it builds the network, so both print the same predicted time). Times are the
real cluster's milliseconds: the compute of the busiest server, the communication left
exposed after it, and when each phase (model-parallel transfers, AllReduce) ends.

``--topologies`` predicts the same job on other networks side by side, including the
Fat-tree of similar cost that TopoOpt's paper compares against (`fattree`:
`planner.cost.costmodel.price`, whose prices are printed) beside the ideal switch (`switch`: every
server gets d x B through one non-blocking switch, a bound no network of that cost reaches).
Link latency is charged per hop as the emulator would apply it: dilated by netem where the
kernel has it (probed when root; assumed absent otherwise: `topolab.common.prediction.netem_assumed`).

``--strategies data,hybrid,search`` predicts the same job planned with each strategy, side by
side (default: the scenario's, and data parallelism when the scenario's is another), each
planned and predicted as the scenario's own is (`topolab.common.prediction.prepare`); a one-line
remark says when the scenario's strategy is more than `STRATEGY_MARGIN` slower than another
(or faster than every other by that much).

Every output states once what one iteration is (the global batch: samples per server x
servers, `topolab.common.plan_text.iteration_text`) and that its times are the real cluster's
milliseconds. Whether netem would emulate the link latency changes the prediction a little
(`netem_assumed`); the JSON records it, the text leaves it out: no network is built here.

``--trace FILE`` also writes the predicted timeline of the scenario's own iteration in the
Chrome trace event format (Perfetto, chrome://tracing: `topolab.results.trace_events`): the same
replay, recording when each op and message started and ended, in the real cluster's time, so
the trace ends at the predicted iteration time printed. At scale it shows the first ranks
only (`topolab.results.trace_events.trace_ranks`), as the output and the trace's ``otherData`` say.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from contract.errors import UsageError
from planner.scenario import STRATEGIES

from ..common.prediction import Prepared, netem_assumed

NETWORK_KINDS = ("topoopt", "switch", "fattree", "expander", "torus", "ring", "hierarchical")
STRATEGY_MARGIN = 0.05  # a strategy this much slower than another is worth a remark


def add_predict_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML file")
    parser.add_argument(
        "--topologies",
        metavar="LIST",
        help=f"also predict the job on these networks, side by side: comma-separated among {', '.join(NETWORK_KINDS)} "
        "(fattree = the Fat-tree of similar cost, switch = the ideal switch of d x B per server)",
    )
    parser.add_argument(
        "--strategies",
        metavar="LIST",
        help=f"predict the job planned with each of these strategies, side by side: comma-separated among "
        f"{', '.join(STRATEGIES)} (default: the scenario's, and data when the scenario's is another)",
    )
    parser.add_argument("--json", action="store_true", help="print the predictions as JSON")
    parser.add_argument(
        "--trace",
        metavar="FILE",
        help="also write the predicted timeline of one iteration (the scenario's own plan) in the Chrome trace "
        "event format, for Perfetto or chrome://tracing: a process per server, a track per stream and connection",
    )


@dataclass
class JobPrediction:
    """One network's predicted iteration, in the real cluster's milliseconds."""

    network: str
    bandwidth: str  # what one server has
    iteration_ms: float
    compute_ms: float  # the busiest server's compute
    exposed_ms: float  # iteration - compute: communication not hidden behind compute
    phase_end_ms: dict[str, float] = field(default_factory=dict)
    strategy: str = ""
    time_scale: float = 1.0  # the emulation's, at which `topolab run` would run it
    cost_usd: float | None = None
    note: str = ""


def predict_job(s: Any, netem: bool, network: str = "", cost_usd: float | None = None, note: str = "") -> JobPrediction:
    """The scenario's plan, its iteration schedule and that schedule's prediction."""
    from ..common.prediction import prepare

    return job_prediction(prepare(s, netem=netem), network, cost_usd, note)


def job_prediction(
    prepared: Prepared, network: str = "", cost_usd: float | None = None, note: str = ""
) -> JobPrediction:
    """The `JobPrediction` of a scenario prepared by `topolab.common.prediction.prepare`."""
    from ..common.plan_text import bandwidth_of

    plan, predicted = prepared.plan, prepared.predicted
    scale = prepared.emulated["time_scale"]
    ms = lambda seconds: seconds / scale * 1e3  # noqa: E731
    iteration = predicted["real_ms"]
    compute = ms(max(prepared.compute_s, default=0.0))
    return JobPrediction(
        network=network or plan.topology,
        bandwidth=bandwidth_of(prepared.plan_record),
        iteration_ms=iteration,
        compute_ms=compute,
        exposed_ms=max(0.0, iteration - compute),
        phase_end_ms={phase: ms(t) for phase, t in sorted(predicted["phase_end_s"].items())},
        strategy=plan.strategy,
        time_scale=scale,
        cost_usd=cost_usd,
        note=note,
    )


def write_trace(path: str, s: Any, prepared: Prepared, netem: bool) -> dict[str, Any]:
    """Write the predicted timeline of the prepared scenario's iteration to ``path`` (checked
    by `topolab.common.options.check_output_file`); what was written, for the output."""
    from contract.files import write_file
    from planner.cost.predict import plan_network, predict_timeline

    from ..common.prediction import network_args, scenario_rates
    from ..results import trace_events
    from ..results.trace_events import PREDICTED_PID_BASE, predicted_group, trace_document, trace_json, trace_ranks

    plan, schedule, emulated, predicted = prepared.plan, prepared.schedule, prepared.emulated, prepared.predicted
    shown = trace_ranks(schedule)
    network = plan_network(plan, **network_args(plan, scenario_rates(plan, s), netem))
    pred, timeline = predict_timeline(schedule, network, ranks=shown)
    if pred.seconds != predicted["emulated_s"]:  # the replay `prepare` ran: the same network, the same time
        raise RuntimeError(f"the traced replay predicts {pred.seconds} s, not {predicted['emulated_s']} s")
    scale = emulated["time_scale"]
    n = schedule.ranks
    meta = {
        "timeline": "predicted by topolab's flow-level model (topolab predict)",
        "scenario": s.source,
        "time": f"the real cluster's: emulated seconds / time scale {scale:g}",
        "predicted_iteration_ms": pred.seconds / scale * 1e3,
        "ranks": n,
        "ranks_shown": shown,
        "ranks_note": trace_events.ranks_note(shown, n),
        "processes": f"predicted rank r: pid {PREDICTED_PID_BASE} + r",
    }
    doc = trace_document([predicted_group(schedule, timeline, scale)], meta)
    write_file(path, trace_json(doc))
    return {"file": path, "ranks": n, "ranks_shown": shown, "events": len(doc["traceEvents"])}


def network_scenarios(base: Any, kinds: list[str]) -> list[tuple[str, Any, float | None, str]]:
    """(name, scenario, cost, note) per network, with the base scenario's strategy kept."""
    from planner import ScenarioError
    from planner.cost.costmodel.baselines import NETWORKS, network_scenario
    from planner.scenario import with_overrides

    from ..results.comparison import scenario_for

    out = []
    for kind in kinds:
        try:
            if kind in NETWORKS and base.topology.kind != "hierarchical":
                net = network_scenario(base, kind)
                s = with_overrides(net.scenario, parallelism={"strategy": base.parallelism.strategy})
                out.append((kind, s, net.cost_usd, net.note))
            else:
                out.append((kind, scenario_for(base, kind), None, ""))
        except ScenarioError as err:
            raise UsageError(f"--topologies {kind}: {err.problem}") from None
    return out


def format_one(name: str, p: JobPrediction) -> str:
    phases = ", ".join(f"{phase} {t:.3f} ms" for phase, t in p.phase_end_ms.items())
    return "\n".join(
        [
            f"{name}: {p.network}, {p.bandwidth} per server, strategy {p.strategy}",
            f"predicted iteration  {p.iteration_ms:.3f} ms",
            f"  compute            {p.compute_ms:.3f} ms (the busiest server)",
            f"  exposed comm.      {p.exposed_ms:.3f} ms (not hidden behind compute)",
            f"  phases end at      {phases}",
        ]
    )


def strategy_scenarios(base: Any, names: list[str], explicit: bool) -> tuple[list[tuple[str, Any]], list[str]]:
    """(strategy, scenario) per name, the base scenario for its own strategy; and a note per
    strategy the scenario cannot be planned with. A strategy the user asked for
    (``explicit``) that cannot be planned is a `UsageError` naming it instead."""
    from planner import ScenarioError
    from planner.scenario import with_overrides

    out, notes = [], []
    for name in names:
        if name == base.parallelism.strategy:
            out.append((name, base))
            continue
        try:
            out.append((name, with_overrides(base, parallelism={"strategy": name})))
        except ScenarioError as err:
            if explicit:
                raise UsageError(f"--strategies {name}: {err.key}: {err.problem}") from None
            notes.append(f"strategy {name} not predicted: {err.key}: {err.problem}")
    return out, notes


def strategy_remark(rows: list[JobPrediction], own: str) -> str:
    """One line when the scenario's strategy ``own`` (else the first row's) is more than
    `STRATEGY_MARGIN` slower than another strategy, or faster than every other by more than
    that; empty when they are within it (or there is nothing to compare)."""
    if len(rows) < 2:
        return ""
    ref = next((r for r in rows if r.strategy == own), rows[0])
    whose = "the scenario's strategy" if ref.strategy == own else "strategy"
    others = [r for r in rows if r is not ref]
    best = min(others, key=lambda r: r.iteration_ms)
    if ref.iteration_ms > best.iteration_ms * (1 + STRATEGY_MARGIN):
        return (
            f"remark: {whose} {ref.strategy} is {ratio_text(ref.iteration_ms / best.iteration_ms)} slower than "
            f"{best.strategy} ({ref.iteration_ms:.3f} vs {best.iteration_ms:.3f} ms per iteration): "
            f'[parallelism] strategy = "{best.strategy}" plans the faster one'
        )
    if best.iteration_ms > ref.iteration_ms * (1 + STRATEGY_MARGIN):
        return (
            f"remark: {whose} {ref.strategy} is the fastest predicted: {best.strategy}, the next, is "
            f"{ratio_text(best.iteration_ms / ref.iteration_ms)} slower ({best.iteration_ms:.3f} vs "
            f"{ref.iteration_ms:.3f} ms per iteration)"
        )
    return ""


def ratio_text(x: float) -> str:
    """A time ratio as a table shows it: 0.95x, 2.36x, 2,361x, 0.00042x."""
    if x >= 100:
        return f"{x:,.0f}x"
    return f"{x:.2f}x" if x >= 0.01 else f"{x:.2g}x"


def format_strategies(rows: list[JobPrediction], own: str) -> str:
    """The strategies side by side, times relative to the scenario's (else the first row's)."""
    ref = next((r for r in rows if r.strategy == own), rows[0])
    w = max(len("strategy"), *(len(r.strategy) for r in rows))
    head = f"{'strategy':{w}} {'iteration ms':>12} {'compute ms':>10} {'exposed ms':>10} {'vs ' + ref.strategy:>12}"
    lines = [head, "-" * len(head)]
    for r in rows:
        mark = "  (the scenario's)" if r.strategy == own else ""
        lines.append(
            f"{r.strategy:{w}} {r.iteration_ms:>12.3f} {r.compute_ms:>10.3f} {r.exposed_ms:>10.3f} "
            f"{ratio_text(r.iteration_ms / ref.iteration_ms):>12}{mark}"
        )
    return "\n".join(lines)


def format_table(rows: list[JobPrediction]) -> str:
    first = rows[0].iteration_ms
    w = max(len("network"), *(len(r.network) for r in rows))
    head = f"{'network':{w}} {'per server':>24} {'cost $k':>8} {'iteration ms':>12} {'compute ms':>10} {'exposed ms':>10} {'vs ' + rows[0].network:>12}"
    lines = [head, "-" * len(head)]
    for r in rows:
        cost = f"{r.cost_usd / 1e3:.0f}" if r.cost_usd is not None else "-"
        lines.append(
            f"{r.network:{w}} {r.bandwidth:>24} {cost:>8} {r.iteration_ms:>12.3f} {r.compute_ms:>10.3f} "
            f"{r.exposed_ms:>10.3f} {r.iteration_ms / first:>11.2f}x"
        )
    notes = [f"{r.network}: {r.note}" for r in rows if r.note]
    return "\n".join(lines + notes)


def parse_list(text: str, flag: str, known: tuple[str, ...]) -> list[str]:
    """A comma-separated ``flag`` value, every item among ``known``, each once."""
    items = list(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    bad = [k for k in items if k not in known]
    if bad or not items:
        raise UsageError(f"{flag}: {','.join(bad) or '(empty)'} is not among {', '.join(known)}")
    return items


def run_predict(args: argparse.Namespace) -> int:
    from planner import load_scenario

    from ..common.options import check_output_file
    from ..common.plan_text import iteration_facts, iteration_text
    from ..common.prediction import prepare

    base = load_scenario(args.scenario)
    kinds = None if args.topologies is None else parse_list(args.topologies, "--topologies", NETWORK_KINDS)
    own_strategy = base.parallelism.strategy
    if args.strategies is None:
        names = list(dict.fromkeys([own_strategy, "data"]))
    else:
        names = parse_list(args.strategies, "--strategies", STRATEGIES)
    variants, skipped = strategy_scenarios(base, names, explicit=args.strategies is not None)
    trace = check_output_file(args.trace, "--trace", inputs=(args.scenario,))
    netem, netem_note = netem_assumed()
    prepared = prepare(base, netem=netem)
    own = job_prediction(prepared)
    servers, batch = prepared.plan.servers, base.workload.batch_per_server
    doc: dict[str, Any] = {
        "scenario": base.source,
        "iteration": iteration_facts(servers, batch),
        "netem": netem,
        "netem_note": netem_note,
        "prediction": asdict(own),
    }
    header, rest = format_one(base.name, own).split("\n", 1)
    text = "\n".join([header, f"{'iteration':<20} {iteration_text(servers, batch)}", rest])
    if trace is not None:
        written = write_trace(str(trace), base, prepared, netem)
        doc["trace"] = written
        ranks = "all ranks" if written["ranks_shown"] == written["ranks"] else f"the first {written['ranks_shown']}"
        text += (
            f"\npredicted timeline written to {written['file']} ({ranks} of {written['ranks']} servers; Chrome trace "
            "event format: open it in Perfetto or chrome://tracing)"
        )
    rows = [own if s is base else predict_job(s, netem, own.network) for _name, s in variants]
    if len(rows) > 1 or args.strategies is not None:
        remark = strategy_remark(rows, own_strategy)
        doc["strategies"] = [asdict(r) for r in rows]
        doc["strategy_remark"] = remark
        text += (
            "\n\n" + format_strategies(rows, own_strategy) + "".join(f"\n{line}" for line in [remark, *skipped] if line)
        )
    if skipped:
        doc["strategies_skipped"] = skipped
    if kinds:
        from planner.cost.costmodel.price import PriceModel

        rows = [predict_job(s, netem, name, cost, note) for name, s, cost, note in network_scenarios(base, kinds)]
        doc["networks"] = [asdict(r) for r in rows]
        text += "\n\n" + format_table(rows)
        if "fattree" in kinds:
            prices = PriceModel().to_dict()
            doc["prices"] = prices
            text += "\nprices assumed (USD, planner.cost.costmodel.price; docs/search.md): " + json.dumps(prices)
    if args.json:
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    else:
        print(text)
    return 0
