"""One measured run of a scenario, the service behind `topolab run`, `topolab compare` and the
benchmarks: plan, emulate, run training iterations, record. `execute` runs its stages in order, each visible on stderr:

1. `prepare_run` (no root): plan the scenario (planner.build_plan) and turn one training
   iteration into a schedule (planner.cost.iteration): compute waits dilated by the time scale,
   model-parallel transfers, bucketed gradient AllReduce overlapping the backward pass; start
   the results document (`topolab.results.run_results.RunResults`);
2. in the same stage, predict the iteration with the flow-level model of exactly that
   schedule, from the plan alone (planner.cost.iteration_prediction;
   topolab.common.prediction.prepare does steps 1 and 2 in one call, and its `Prepared` is
   all the later stages take of the plan and the prediction);
3. build the emulated network (`open_network`: namespaces, HTB-shaped veths, static routes,
   host forwarding; on one machine or several) and record its facts (`network_facts`);
   measure the workers' cost per op and predict again with it on the built network's rates
   (`calibrate`: the stage's one prediction, `predict_run_timeline`); start one
   worker per server inside its namespace (workers.Coordinator) and run warm-up and timed
   iterations, every worker verifying every AllReduce and transfer of every iteration
   (`iterate`);
4. tear everything down (also on Ctrl-C / SIGTERM / errors) and write results.json,
   report.md and the plots, partial results included when interrupted (`record`).

With ``trace`` (`topolab run --trace`) the calibrated prediction's replay also records its
timeline (`topolab.common.prediction.predict_run_timeline`), the workers' clocks are measured against
the driver's once they are up (`workers.coordinator.Coordinator.clock_offsets`), and the last
timed iteration alone asks the ranks a trace shows (`topolab.results.trace_events.trace_ranks`) for
every op's start and end; trace.json (that iteration measured beside its prediction,
`topolab.results.trace_events.write_iteration_trace`) is written once the iterations are done, and the
report draws it (timeline.png). Every op's times are recorded in every iteration anyway
(`workers.executor`): the traced iteration differs only in the size of its ``result`` messages,
sent after its end is taken.

Results survive even a SIGKILL: once the network is up, results.json is written with status
"running", and every iteration is appended to ``iterations.jsonl`` (one JSON object a line,
flushed and fsynced) before its progress line; `topolab report DIR` renders such a folder,
marked incomplete.

Times are kept in emulated seconds and converted to the real cluster's milliseconds by the
time-scale factor (real link rate / emulated link rate).

The stages share one `RunState` (the results document a kill must leave consistent on
disk). The command's flags and its results folder are `topolab.run.command`'s.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from contract.emulation import frames_mtu_for, packets_for
from contract.errors import RunError, UsageError
from contract.physics import OFFLOAD_PACKET_BYTES
from contract.plan import Plan
from contract.schedule import Schedule
from planner import Scenario
from planner.topology.routing import hop_counts

from ..common.calibrate import measure_op_overhead, zero_payload_twin
from ..common.network import NetworkFlags, network_config, open_network, refuse_machines
from ..common.phases import measured_phase_ends
from ..common.prediction import Prepared, predict_run, predict_run_timeline, prepare
from ..common.progress import Progress
from ..results.journal import ITERATIONS_FILE, RESULTS_FILE, IterationJournal, write_results_file
from ..results.run_report import write_report
from ..results.run_results import (
    TRACE_FILE,
    Calibration,
    EmulationFacts,
    Environment,
    Iteration,
    Measured,
    Prediction,
    RunResults,
    ScheduleSummary,
    TraceFacts,
    link_rows,
)
from ..results.trace_events import clock_metadata, trace_ranks, write_iteration_trace
from .faults import FaultInjector, injector_for
from .machine_probe import machine_cost
from .time_dilation import (
    FRAMES_MEASURED_SHARE,
    MEASURED_LOAD_RETRIES,
    WORKER_BASE_MIB,
    WORKER_CPU_SHARE,
    Dilation,
    choose,
    closing_warning,
    extra_frame_packets,
    payload_for_memory,
    rate_for_measured_load,
    schedule_buffer_bytes,
    transfer_ops,
)


class RateTooHigh(Exception):
    """The warm-up of a run with an automatic rate kept the workers busier than their share
    (`topolab.run.time_dilation.rate_for_measured_load`): `execute` builds the network again
    at ``link_mbps``. Never leaves `execute`."""

    def __init__(self, link_mbps: float, measured_load: float, at_mbps: float, share: float) -> None:
        super().__init__(f"the warm-up at {at_mbps:g} Mbit/s kept the workers {measured_load:.0%} busy")
        self.link_mbps, self.measured_load, self.at_mbps, self.share = link_mbps, measured_load, at_mbps, share


T = TypeVar("T")
EXIT_OVER_TOLERANCE = 3  # ran and verified, but the prediction missed by more than run.tolerance
FAULTS_OVER_MACHINES = (
    "[[faults]] / --cable-down: not supported over several machines yet (no live cable changes there)"
)


def write_results(results: RunResults, out_dir: Path, report: bool = True) -> Path:
    """results.json (with its summary), then report.md and the plots unless ``report`` is off."""
    path = write_results_file(results, out_dir)
    return write_report(results, out_dir) if report else path


@dataclass
class RunState:
    """What the stages of one run share: the plan, its schedule and prediction as stages 1 and
    2 prepared them (taken once: no later stage goes back to the scenario for them), the
    results document they fill in, where it goes and whom to tell."""

    scenario: Scenario
    prepared: Prepared  # topolab.common.prediction.prepare's
    iterations: int
    injector: FaultInjector | None
    results: RunResults
    out_dir: Path
    log: Callable[[str], None]
    trace: bool = False  # --trace: record the last timed iteration's timeline (trace.json)
    timeline: Any = None  # with trace: the calibrated prediction's `planner.cost.predict.Timeline`
    retune: bool = False  # an automatic rate that the warm-up's measured load may still lower (`RateTooHigh`)

    @property
    def plan(self) -> Plan:
        return self.prepared.plan

    @property
    def schedule(self) -> Schedule:
        return self.prepared.schedule


def prepare_run(
    s: Scenario,
    out_dir: Path,
    iterations: int | None,
    payload_scale: float | None,
    faults: list | None,
    log: Callable[[str], None],
    reference_gbps: float | None = None,
    retune: bool = False,
    notes: Sequence[str] = (),
) -> RunState:
    """Stages 1 and 2, no root needed: plan, schedule and prediction, and the results
    document they start (status "running"). Bad faults are a `UsageError`, nothing built.
    ``retune``: the warm-up may end the run with `RateTooHigh` (an automatic rate only, with a
    warm-up); ``notes``: what earlier attempts said (`with_rate_checks`)."""
    from emulator import netem_present

    iterations = s.run.iterations if iterations is None else iterations
    want_netem = s.emulation.netem == "on" or (s.emulation.netem == "auto" and netem_present())
    prepared = prepare(s, payload_scale, want_netem, reference_gbps)
    asked, dilation = s, None
    s, packets_why = choose_packets(s, prepared.schedule, prepared.plan)  # before the rate: frames cost more
    if s.emulation.mtu != prepared.emulated["mtu"]:
        prepared = prepare(s, payload_scale, want_netem, reference_gbps)
    if not s.emulation.machines:  # the machine's cores carry every worker
        s, prepared, dilation = dilate(
            s, payload_scale, prepared, lambda p, scale: prepare(p, scale, want_netem, reference_gbps), log
        )
    plan, schedule, opts, emulated = prepared.plan, prepared.schedule, prepared.opts, prepared.emulated
    injector = injector_for(faults or [], plan, schedule, iterations, log)  # bad faults: exit 2, nothing built
    log(
        f"[1/4] planned {plan.topology} for {plan.model} on {plan.servers} servers; one iteration is "
        f"{schedule.op_count()} ops; time scale x{emulated['time_scale']:g}"
    )
    if dilation is not None:
        log(f"      link rate {'auto: ' if dilation.auto else ''}{dilation.link_mbps:g} Mbit/s: {dilation.why}")
        if dilation.payload_scale != 1.0 and dilation.auto:
            log(
                f"      payload scale {dilation.payload_scale:g}: the workers ~{dilation.memory_gib:.1f} GiB "
                f"(buffers, ops, {WORKER_BASE_MIB:g} MiB each) of {dilation.memory_available_gib:.1f} GiB available"
            )
        if dilation.warning:
            log(f"      warning: {dilation.warning}")
    if packets_why:
        log(f"      packets auto: {packets_why}")
    results = RunResults(
        scenario=asdict(asked),
        plan=prepared.plan_record,
        emulation=EmulationFacts.from_dict({**emulated, "dilation": dilation.to_dict() if dilation else None}),
        schedule=ScheduleSummary.of(schedule, opts.payload_scale),
        environment=Environment.capture(s.source),
        tolerance=s.run.tolerance,
        started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        notes=list(plan.notes),
    )
    results.predicted = Prediction.from_dict(prepared.predicted)
    log(
        f"[2/4] predicted {results.predicted.real_ms:.3f} ms per iteration "
        f"({results.predicted.emulated_s:.3f} s emulated)"
    )
    results.notes.extend(notes)
    run = RunState(s, prepared, iterations, injector, results, out_dir, log)
    run.retune = retune and dilation is not None and dilation.auto and s.run.warmup > 0
    return run


def choose_packets(s: Scenario, schedule: Schedule, plan: Plan) -> tuple[Scenario, str]:
    """The scenario with ``[emulation] packets = "auto"`` made frames or offload for this
    schedule (`contract.emulation.packets_for`) and, for frames where the scenario states no
    ``mtu``, their MTU (`contract.emulation.frames_mtu_for`: each message's frames on every
    cable of its route in ``plan``, `planner.topology.routing.hop_counts`), and why (empty: the scenario chose)."""
    if s.emulation.packets != "auto" or s.emulation.machines:
        return s, ""
    transfers, lengths = [c.length for c in schedule.checks if c.kind == "copy"], schedule.send_lengths()
    choice = packets_for(lengths, transfers)
    mode, kib = choice.mode, OFFLOAD_PACKET_BYTES // 1024
    why = f"{mode}: {choice.share:.0%} of the bytes sent go in messages of at most {kib} KiB"
    if choice.transfer_share:
        why += f", {choice.transfer_share:.0%} of the point-to-point transfers' bytes in transfers of at most {kib} KiB"
    emulation = replace(s.emulation, packets=mode)
    if mode == "offload":
        why += " (one offload packet each), so the cables keep the kernel's offload packets"
    elif not s.emulation.auto_mtu:
        why += f" (one offload packet each), so the cables carry frames of their MTU, {s.emulation.mtu} bytes"
    else:
        hops, ops = hop_counts(plan.next_hop, plan.servers)[schedule.send_pairs()], transfer_ops(schedule)
        mtu, shares, added = frames_mtu_for(transfers, lengths, ops, hops)
        emulation = replace(emulation, mtu=mtu, auto_mtu=False)
        why += f" (one offload packet each), so the cables carry frames of {mtu} bytes"
        if shares:
            at = ", ".join(
                f"{share:.1%} of their bytes at {m}" if i == 0 else f"{share:.1%} at {m}"
                for i, (m, share) in enumerate(shares.items())
            )
            why += f" (the transfers' last frames: {at}"
            costly = [m for m in added if m not in shares]
            if costly:
                why += "; " + ", ".join(
                    f"{m} would add {added[m] / ops:.0%} of the ops in frames crossing cables" for m in costly
                )
            why += ")"
    return replace(s, emulation=emulation), why


def dilate(
    s: Scenario,
    payload_scale: float | None,
    prepared: Prepared,
    prepare_at: Callable[[Scenario, float | None], Prepared],
    log: Callable[[str], None],
) -> tuple[Scenario, Prepared, Dilation]:
    """The rate and payload scale the run uses (`topolab.run.time_dilation`): with ``link_mbps =
    "auto"`` chosen for this machine (the scenario and the preparation redone at them with
    ``prepare_at``), else the scenario's, checked against the cores."""
    from emulator.validate import mem_available_mib

    plan, schedule, opts = prepared.plan, prepared.schedule, prepared.opts
    auto = s.emulation.auto_rate
    frames = s.emulation.frames
    mtu = int(prepared.emulated["mtu"])
    cost = machine_cost(log, frames_mtu=mtu if frames else None)
    # the workers' memory is what the emulated hosts leave (they are built first)
    hosts = s.emulation.hosts_memory_mib(plan.nodes) * 2**20
    available = max(0.0, mem_available_mib() * 2**20 - hosts)
    if auto and payload_scale is None and s.run.payload_scale == 1.0:
        fit = payload_for_memory(
            plan.servers, schedule_buffer_bytes(schedule), opts.payload_scale, available, schedule.op_count()
        )
        if fit < opts.payload_scale:
            payload_scale = fit
            prepared = prepare_at(s, payload_scale)
            plan, schedule, opts = prepared.plan, prepared.schedule, prepared.opts
    dilation = choose(
        ranks=plan.servers,
        ops=transfer_ops(schedule),
        bytes_sent=sum(schedule.bytes_sent()),
        buffer_bytes=schedule_buffer_bytes(schedule),
        predicted_s=prepared.predicted["emulated_s"],
        link_mbps=prepared.emulated["link_mbps"],
        payload_scale=opts.payload_scale,
        cost=cost,
        auto=auto,
        available=available,
        frames=frames,
        extra_packets=extra_frame_packets(schedule, mtu) if frames else 0,
        packet_cpu_s=(cost.frame_cpu_s(mtu) or 0.0) if frames else 0.0,
    )
    if auto:
        s = replace(s, emulation=replace(s.emulation, link_mbps=dilation.link_mbps, auto_rate=False))
        if dilation.link_mbps != prepared.emulated["link_mbps"]:
            prepared = prepare_at(s, payload_scale)
    return s, prepared, dilation


@dataclass
class Workers:
    """Where a network's workers run: one address per server, how to start a process in
    a server's namespace, each server's plane addresses and the control relay."""

    hosts: list[str]
    spawn: Callable[[int, list[str]], subprocess.Popen]
    plane_sources: list[Any]
    control_relay: Callable | None

    @classmethod
    def on(cls, net: Any, servers: int) -> Workers:
        return cls(
            hosts=[net.host_address(i) for i in range(servers)],
            spawn=lambda rank, argv: net.popen(rank, argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL),
            plane_sources=[net.plane_addresses(i) for i in range(servers)],
            control_relay=net.relay_control,
        )


def network_facts(run: RunState, net: Any) -> Workers:
    """Stage 3 begins: the network's facts into the results, written with status "running"
    (what a SIGKILL leaves)."""
    results, plan = run.results, run.plan
    results.emulation.add_network(net.facts, net.netem)
    if not net.netem:
        results.notes.append(
            "link latency not emulated (no netem in this kernel): the prediction models it as a per-hop software cost"
        )
    write_results(results, run.out_dir, report=False)
    run.log(
        f"[3/4] emulated network up in {net.facts.get('build_s', 0):.2f} s "
        f"({len(plan.links)} cables at {', '.join(f'{r:g}' for r in net.facts['rates_mbps'])} Mbit/s, "
        f"MTU {net.mtu}); starting workers"
    )
    return Workers.on(net, plan.servers)


SILENCE_ITERATIONS = 2.0
"""A worker waits for a silent peer at least this many predicted iterations (emulated) before
it fails the iteration, whatever ``[run] timeout_s`` says: under heavy time dilation an
iteration takes minutes, and a rank the cores served late is silent for a good part of one
(at 128 servers a 60 s limit failed a verified 110-140 s iteration)."""


def silence_limit_s(run: RunState) -> float:
    """How long a worker waits for a silent peer in this run (`SILENCE_ITERATIONS`)."""
    predicted = run.results.predicted
    return max(run.scenario.run.timeout_s, SILENCE_ITERATIONS * (predicted.emulated_s if predicted else 0.0))


def calibrate(run: RunState, net: Any, workers: Workers) -> None:
    """The workers' cost per op from the zero-payload twin; the prediction made again with
    it on the built network (its rates and netem, taken once here); the faults armed with
    that prediction."""
    prepared, results = run.prepared, run.results
    plan, schedule, cores = prepared.plan, prepared.schedule, prepared.cores
    rates, netem = net.rates, net.netem
    twin, critical_ops = zero_payload_twin(plan, prepared.opts, cores)
    cal = measure_op_overhead(
        twin,
        critical_ops,
        workers.hosts,
        workers.spawn,
        timeout_s=silence_limit_s(run),
        plane_sources=workers.plane_sources,
        control_relay=workers.control_relay,
    )
    results.calibration = Calibration.from_dict(cal)
    shown = trace_ranks(schedule) if run.trace else None
    op_overhead_s = cal["op_overhead_s"]
    predicted, run.timeline = predict_run_timeline(
        plan, schedule, rates, netem, op_overhead_s, cores, timeline_ranks=shown
    )
    results.predicted = Prediction.from_dict(predicted)
    if run.injector:  # a fault's reroute is predicted again, on the same network
        repredict = lambda p: predict_run(p, schedule, rates, netem, op_overhead_s, cores)  # noqa: E731
        run.injector.start(net, repredict, predicted)
        results.faults = run.injector.applied
    write_results(results, run.out_dir, report=False)
    run.log(
        f"      measured worker cost {op_overhead_s * 1e6:.0f} us per op"
        + (f" on one of {cores} shared cores" if cores else "")
        + f" (zero-payload twin: {cal['twin_seconds'] * 1e3:.1f} ms); prediction now {results.predicted.real_ms:.3f} ms"
    )


def iterate(run: RunState, net: Any, workers: Workers) -> None:
    """Warm-up and timed iterations, each verified by every worker and journalled before its
    progress line; then the cables' bytes per timed iteration. A failed verification is a
    `RunError` after its iteration is recorded."""
    from emulator.counters import difference
    from workers.coordinator import Coordinator

    s, results, injector = run.scenario, run.results, run.injector
    warmup = s.run.warmup
    time_scale = results.emulation.time_scale
    compute_real_ms = max(run.prepared.compute_s) / time_scale * 1e3
    traced = warmup + run.iterations - 1 if run.timeline is not None and run.iterations else None
    ask = {rank: "ops" for rank in range(run.timeline.ranks)} if traced is not None else None
    with (
        Coordinator(
            run.schedule.to_dict(),
            workers.hosts,
            spawn=workers.spawn,
            timeout_s=silence_limit_s(run),
            plane_sources=workers.plane_sources,
            control_relay=workers.control_relay,
        ) as coord,
        IterationJournal(run.out_dir / ITERATIONS_FILE) as journal,
    ):
        clocks = coord.clock_offsets() if traced is not None else {}
        traced_result = None
        bar = Progress(warmup + run.iterations, "iterations")
        counters_before = net.cable_tx_bytes() if not warmup else {}
        for i in range(warmup + run.iterations):
            warm = i < warmup
            if i == warmup and warmup:
                counters_before = net.cable_tx_bytes()  # the timed iterations' bytes only
            if injector and not warm:
                injector.before(i - warmup)  # faults due now: cable down, reroute
            res = coord.run_iteration(i, ask if i == traced else None)
            if i == traced:
                traced_result = res
            line = f"{'warm-up' if warm else 'timed'} {res.time_s:.3f} s {'verified' if res.ok else 'VERIFY FAILED'}"
            if warm and res.ok:
                bar.step(line)
                if run.retune and i == warmup - 1:
                    check_measured_load(run, res)
                continue
            record = Iteration(
                index=i - warmup,
                warmup=warm,
                measured_s=res.time_s,
                measured_real_ms=res.time_s / time_scale * 1e3,
                compute_real_ms=compute_real_ms,
                verified=res.ok,
                errors=res.mismatches[:10],
                worker_cpu_s=sum(r.get("cpu_s", 0.0) for r in res.ranks),
                phase_end_s=measured_phase_ends(res.ranks) or None,
            )
            if injector:
                injector.annotate(record)
            results.iterations.append(record)
            journal.append(record)  # on disk before the progress line: a kill now keeps it
            bar.step(line)
            if not res.ok:
                raise RunError(f"iteration {i} failed verification: {res.mismatches[:1]}")
        bar.done()
        timed = sum(1 for it in results.iterations if not it.warmup)
        results.measured = Measured(link_rows(difference(net.cable_tx_bytes(), counters_before, timed)))
    if traced_result is not None:
        write_trace(run, traced_result, clocks, traced - warmup)


def check_measured_load(run: RunState, res: Any) -> None:
    """Raise `RateTooHigh` when the last warm-up kept the workers busier than their share of
    the cores and a lower rate exists (`topolab.run.time_dilation`'s module docstring)."""
    dilation = run.results.emulation.dilation or {}
    cores, rate = dilation.get("cores"), dilation.get("link_mbps")
    if not cores or not rate or res.time_s <= 0:
        return
    load = sum(r.get("cpu_s", 0.0) for r in res.ranks) / (cores * res.time_s)
    share = FRAMES_MEASURED_SHARE if run.scenario.emulation.frames else WORKER_CPU_SHARE
    lower = rate_for_measured_load(rate, load, share)
    if lower is not None:
        raise RateTooHigh(lower, load, rate, share)


def write_trace(run: RunState, res: Any, clocks: dict[int, Any], index: int) -> None:
    """trace.json of timed iteration ``index`` (its `workers.coordinator.IterationResult`)
    beside the calibrated prediction's timeline, and its facts in the results."""
    results = run.results
    meta: dict[str, Any] = {
        "timeline": f"timed iteration {index} (the last) of topolab run, measured by the workers, beside the "
        "flow-level model's prediction of the same schedule (calibrated: the workers' cost per op)",
        "scenario": run.scenario.source,
        "iteration": index,
        "predicted_iteration_ms": results.predicted.real_ms if results.predicted else None,
    }
    if results.faults:
        meta["faults"] = "the run injected faults: the prediction beside it is of the plan before the first one"
    written = write_iteration_trace(
        run.out_dir / TRACE_FILE, run.schedule, res.ranks, clocks, run.timeline, results.emulation.time_scale, meta
    )
    facts = clock_metadata(clocks.values())
    results.trace = TraceFacts(
        file=TRACE_FILE,
        iteration=index,
        ranks=written["ranks"],
        ranks_shown=written["ranks_shown"],
        clocks=facts["clocks"],
        clock_max_applied_us=facts["clock_max_applied_us"],
        clock_max_rtt_us=facts["clock_max_rtt_us"],
    )
    path = written["critical_path"]["measured"]
    run.log(
        f"      timeline of timed iteration {index} in {run.out_dir / TRACE_FILE} ({written['ranks_shown']} of "
        f"{written['ranks']} ranks; measured critical path: {path['ops']} ops ending with {path['last_op']})"
    )


def record(run: RunState, on_result: Callable[[RunResults], None] | None) -> None:
    """Stage 4: results.json as the run ended (complete, interrupted or failed), the one
    line of a complete run, then the report and its plots."""
    results = run.results
    write_results(results, run.out_dir, report=False)
    if results.status == "complete" and on_result:
        on_result(results)  # the result first; the plots take a few seconds
    report = write_results(results, run.out_dir)
    run.log(with_closing_warning(f"[4/4] results in {run.out_dir}/{RESULTS_FILE}, report in {report}", results))


def with_closing_warning(line: str, results: RunResults) -> str:
    """``line``, a run's closing line, with the overload warning of its start appended when its
    fixed rate overloaded the cores (`topolab.run.time_dilation.closing_warning`): a reader of the
    figures at the end sees it there, not only at the top of a long log."""
    warning = closing_warning(results.emulation.dilation)
    return f"{line}; {warning}" if warning else line


def execute(
    s: Scenario,
    out_dir: Path,
    iterations: int | None = None,
    payload_scale: float | None = None,
    log: Callable[[str], None] | None = None,
    lock_wait_s: float = 0.0,
    run_dir: str | None = None,
    faults: list | None = None,
    on_result: Callable[[RunResults], None] | None = None,
    reference_gbps: float | None = None,
    trace: bool = False,
) -> RunResults:
    """Run a scenario end to end; once the network is up, always writes results (also partial
    ones) to ``out_dir``. A network another run holds is a `UsageError` and writes nothing.
    ``on_result`` sees the results of a complete run before the report and plots are drawn.
    ``reference_gbps``: the real rate ``[emulation] link_mbps`` stands for (None: the plan's
    ``link_gbps``); `topolab compare` puts its arms on one time scale with it. ``trace``: also
    write trace.json, the last timed iteration measured beside its prediction (module docstring).
    With an automatic rate, a warm-up that kept the workers over their share of the cores builds
    the network again at a lower rate (`RateTooHigh`, at most `MEASURED_LOAD_RETRIES` times)."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    return with_rate_checks(
        s,
        lambda scenario, retune, notes: _execute_once(
            scenario,
            out_dir,
            iterations,
            payload_scale,
            log,
            lock_wait_s,
            run_dir,
            faults,
            on_result,
            reference_gbps,
            trace,
            retune,
            notes,
        ),  # fmt: skip
        log,
    )


def with_rate_checks(
    s: Scenario,
    attempt: Callable[[Scenario, bool, list[str]], T],
    log: Callable[[str], None],
    on_rebuild: Callable[[RateTooHigh], None] | None = None,
) -> T:
    """``attempt(scenario, retune, notes)`` (a run from `prepare_run` with ``retune`` and
    ``notes``), again at the lower rate each time its warm-up raises `RateTooHigh`, at most
    `MEASURED_LOAD_RETRIES` times; ``notes`` says why each earlier attempt was built again."""
    notes: list[str] = []
    for tries in range(MEASURED_LOAD_RETRIES + 1):
        try:
            return attempt(s, tries < MEASURED_LOAD_RETRIES, notes)
        except RateTooHigh as high:
            why = (
                f"automatic rate: {high}, over their share of {high.share:.0%}"
                f"{' with frames' if high.share != WORKER_CPU_SHARE else ''}; "
                f"network built again at {high.link_mbps:g} Mbit/s"
            )
            log(f"      {why}")
            notes.append(why)
            if on_rebuild is not None:
                on_rebuild(high)
            s = replace(s, emulation=replace(s.emulation, link_mbps=high.link_mbps))
    raise AssertionError("unreachable: the last attempt does not retune")


def _execute_once(
    s: Scenario,
    out_dir: Path,
    iterations: int | None,
    payload_scale: float | None,
    log: Callable[[str], None],
    lock_wait_s: float,
    run_dir: str | None,
    faults: list | None,
    on_result: Callable[[RunResults], None] | None,
    reference_gbps: float | None,
    trace: bool,
    retune: bool,
    notes: list[str],
) -> RunResults:
    """One attempt of `execute`; ``retune``: its warm-up may end it with `RateTooHigh` (an
    automatic rate only), and then it records nothing."""
    from emulator import EmulationBusyError

    run = prepare_run(s, out_dir, iterations, payload_scale, faults, log, reference_gbps, retune, notes)
    run.trace = trace
    plan, results = run.plan, run.results
    config = network_config(
        run.scenario.emulation, NetworkFlags(run_dir=run_dir, wait_s=lock_wait_s), reference_gbps=reference_gbps
    )
    if run.injector:
        refuse_machines(config, None, FAULTS_OVER_MACHINES)
    network_up = False
    try:
        with open_network(plan, config, log=log) as net:
            network_up = True
            workers = network_facts(run, net)
            calibrate(run, net, workers)
            iterate(run, net, workers)
        results.emulation.teardown_s = net.facts.get("teardown_s")
        results.status = "complete"
    except RateTooHigh:
        network_up = False  # nothing of this attempt is recorded: the next one starts afresh
        raise
    except EmulationBusyError as err:
        if network_up:
            raise
        raise UsageError(str(err)) from None
    except KeyboardInterrupt:
        results.status = "interrupted"
        results.error = "interrupted by the user or SIGTERM; partial results"
        raise
    except Exception as err:
        results.status = "failed"
        results.error = f"{type(err).__name__}: {err}"
        raise
    finally:
        if network_up:
            record(run, on_result)
    return results


def ensure_network_free(run_dir: str | None, lock_wait_s: float) -> None:
    """Fail at once, before planning, when another topolab network holds the run lock (a
    race with a run starting now is still caught, later, by the emulator's own lock)."""
    from emulator import EmulationBusyError, EmulationConfig
    from emulator.state import RunLock

    if lock_wait_s > 0:
        return  # the emulator waits for the lock
    folder = run_dir or EmulationConfig().run_dir
    if not Path(folder, "lock").exists():
        return
    probe = RunLock(folder)
    try:
        probe.acquire(0.0)
    except EmulationBusyError as err:
        raise UsageError(str(err)) from None
    probe.release()
