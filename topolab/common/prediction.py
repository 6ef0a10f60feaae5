"""What `topolab run` predicts: the plan, one iteration's schedule, and the flow-level model's
time for exactly that schedule on the emulated links
(`planner.cost.iteration_prediction.predict_iteration`); `predict_run` predicts that schedule again
once the workers' cost per op is measured.

A measured run enters here once per stage: `prepare` (stages 1 and 2, before anything is
built) returns a `Prepared` holding all that the later stages take of the plan and its
prediction (what results.json keeps of the plan, each rank's compute, the cores the workers
share), and `predict_run_timeline` (stage 3, once the workers' cost per op is measured on the
built network) predicts it again; only a fault's reroute enters again (`predict_run`).

Both take the rates the links are emulated at (`contract.emulation.EmulatedRates`: time
scale, every cable's rate, the MTU): before the network is built, the scenario's
(`scenario_rates`); once it is built, the network's own (``net.rates``), which is what a
measured run is compared with: a network over several machines runs its cables at the
tunnels' MTU, not at the scenario's.

Times are emulated seconds; the real cluster's milliseconds divide them by the time scale
(contract.physics.time_scale: real link rate / emulated link rate).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from typing import Any

from contract.emulation import EmulatedRates, emulated_rates
from contract.schedule import Schedule
from planner import Plan, Scenario, build_plan
from planner.cost.iteration import IterationOptions
from planner.cost.iteration_prediction import NetworkArgs, predict_iteration
from planner.cost.predict import Prediction, Timeline, plan_network, predict, predict_timeline

from .phases import phase_ends

# Per-hop latency of an emulated link without netem: a small-message round trip measured
# 18 us for one hop and 31 us for three on this kernel (docs/emulation.md), i.e. about
# 6.5 us per hop one way plus the fixed software cost, which the model takes per message.
SOFTWARE_HOP_S = 6.5e-6
# The executor reduces a pipelined message chunk by chunk as it arrives, so only the last
# chunk's reduction is exposed; numpy's in-place add of float32 on one core of this machine
# runs at a few GB/s and the workers share the two cores.
EXPOSED_REDUCE_BYTES = 256 << 10


def netem_assumed() -> tuple[bool, str]:
    """Whether a run's emulator would apply link latency with netem, and how that is known
    (`topolab predict` and `topolab place` predict as a run would, without building anything)."""
    if os.geteuid() != 0:
        return False, "netem assumed absent (probing it needs root): latency charged as the software hop cost"
    from emulator import netem_present

    present = netem_present()
    return (
        present,
        "netem present: link latency dilated"
        if present
        else "no netem in this kernel: latency charged as the software hop cost",
    )


def plan_dict(plan: Plan) -> dict[str, Any]:
    """What the report needs of the plan (links, summary), without the routes table."""
    d = plan.to_dict()
    d.pop("routes", None)
    d["demand"] = {
        "allreduce_bytes": plan.demand.allreduce_bytes,
        "mp_bytes": plan.demand.mp_bytes,
        "allreduce_groups": len(plan.demand.allreduce),
        "mp_flows": len(plan.demand.mp),
    }
    return d


def compute_seconds(schedule: Schedule) -> list[float]:
    """Per rank, the compute stream's busy time (emulated seconds)."""
    return [sum(op.seconds for op in prog.get("compute", []) if op.kind == "compute") for prog in schedule.programs]


def scenario_rates(plan: Plan, s: Scenario, reference_gbps: float | None = None) -> EmulatedRates:
    """The rates ``plan``'s network is emulated at as the scenario asks (before it is built);
    ``reference_gbps``: the real rate ``link_mbps`` stands for, if not the plan's."""
    config = s.emulation if reference_gbps is None else dataclasses.replace(s.emulation, reference_gbps=reference_gbps)
    return emulated_rates(plan.network, config)


def shared_cores(machines: Sequence[object]) -> int | None:
    """The processors the workers share, as the predictor takes them (`Network.cores`): this
    machine's cores when every worker runs here; None (each rank a processor of its own) when
    the network spans ``machines``."""
    return None if machines else os.cpu_count() or 1


def network_args(
    plan: Plan, rates: EmulatedRates, netem: bool, op_overhead_s: float = 0.0, cores: int | None = None
) -> NetworkArgs:
    """The emulated network as the predictor sees it: cables at their emulated rates and MTU,
    per-hop latency (the software hop, plus the plan's latency dilated when netem emulates
    it), the workers' cost per op and the processors they share (`shared_cores`), and the
    reduce cost of a pipelined message's last chunk."""
    alpha = SOFTWARE_HOP_S + (plan.latency_us * 1e-6 * rates.time_scale if netem else 0.0)
    return NetworkArgs(
        rates=rates,
        alpha_s=alpha,
        op_overhead_s=op_overhead_s,
        reduce_cap_bytes=EXPOSED_REDUCE_BYTES,
        cores=cores,
    )


def _predicted(pred: Prediction, rates: EmulatedRates, args: NetworkArgs, seconds: float) -> dict[str, Any]:
    """The ``predicted`` record of results.json: the time, and the time scale and MTU it is at."""
    return {
        "emulated_s": pred.seconds,
        "real_ms": pred.seconds / rates.time_scale * 1e3,
        "time_scale": rates.time_scale,
        "mtu": rates.mtu,
        "phase_end_s": phase_ends((stream, end) for (_, stream), end in pred.stream_end.items()),
        "alpha_s": args["alpha_s"],
        "op_overhead_s": args["op_overhead_s"],
        "cores": args.get("cores"),
        "model_seconds": seconds,
        "link_bytes": pred.link_bytes_list(),
        "relayed_link_bytes": pred.relayed_bytes_list(),
    }


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A scenario planned and predicted before its network is built (`prepare`): all a measured
    run's later stages take of the plan and of its prediction, so none goes back to the scenario."""

    plan: Plan
    schedule: Schedule  # one iteration, as the workers run it
    opts: IterationOptions  # what the schedule was built with (time scale, payload scale)
    emulated: dict[str, Any]  # the emulation facts the prediction is made at (results.json's ``emulation``)
    predicted: dict[str, Any]  # results.json's ``predicted`` record
    plan_record: dict[str, Any]  # results.json's ``plan``: `plan_dict`
    compute_s: list[float]  # per rank, the compute stream's busy time (`compute_seconds`)
    cores: int | None  # the processors the workers share (`shared_cores`)


def prepare(
    s: Scenario, payload_scale: float | None = None, netem: bool = False, reference_gbps: float | None = None
) -> Prepared:
    """Plan a scenario, and its iteration's schedule and prediction on the emulated network
    (`planner.cost.iteration_prediction.predict_iteration`; ``netem``: link latency emulated) before
    it is built: the plan, the schedule, its options, the emulation facts, the ``predicted``
    record and what a run records of them (no root needed). ``reference_gbps``: the real rate
    ``link_mbps`` stands for (the emulator's ``reference_gbps``; None: the plan's ``link_gbps``),
    which sets the time scale."""
    plan = build_plan(s)
    rates = scenario_rates(plan, s, reference_gbps)
    scale = s.run.payload_scale if payload_scale is None else payload_scale
    opts = IterationOptions(time_scale=rates.time_scale, payload_scale=scale)
    emulated = {
        "time_scale": rates.time_scale,
        "link_mbps": rates.link_mbps,
        "reference_gbps": rates.reference_gbps,
        "plan_link_gbps": plan.link_gbps,
        "mtu": rates.mtu,
        "payload_scale": scale,
    }
    args = network_args(plan, rates, netem)
    t0 = time.perf_counter()
    schedule, pred = predict_iteration(plan, opts, **args)
    predicted = _predicted(pred, rates, args, time.perf_counter() - t0)
    return Prepared(
        plan=plan,
        schedule=schedule,
        opts=opts,
        emulated=emulated,
        predicted=predicted,
        plan_record=plan_dict(plan),
        compute_s=compute_seconds(schedule),
        cores=shared_cores(s.emulation.machines),
    )


def predict_run(
    plan: Plan,
    schedule: Schedule,
    rates: EmulatedRates,
    netem: bool,
    op_overhead_s: float = 0.0,
    cores: int | None = None,
) -> dict[str, Any]:
    """The prediction of ``schedule`` (already built: the workers run it) on ``plan``'s cables
    emulated at ``rates`` (a built network's ``net.rates``), e.g. once the workers' cost per op
    is measured (on ``cores`` shared processors: `shared_cores`), or on a plan rerouted by a
    fault."""
    return predict_run_timeline(plan, schedule, rates, netem, op_overhead_s, cores)[0]


def predict_run_timeline(
    plan: Plan,
    schedule: Schedule,
    rates: EmulatedRates,
    netem: bool,
    op_overhead_s: float = 0.0,
    cores: int | None = None,
    timeline_ranks: int | None = None,
) -> tuple[dict[str, Any], Timeline | None]:
    """`predict_run`, and with ``timeline_ranks`` the replay's `Timeline` of ranks ``0 ..
    timeline_ranks - 1`` (`planner.cost.predict.predict_timeline`: the same replay, recorded,
    so the same prediction) for a trace of the iteration (`topolab.results.trace_events`); None without."""
    args = network_args(plan, rates, netem, op_overhead_s, cores)
    network = plan_network(plan, **args)
    t0 = time.perf_counter()
    timeline = None
    if timeline_ranks is None:
        pred = predict(schedule, network)
    else:
        pred, timeline = predict_timeline(schedule, network, ranks=timeline_ranks)
    return _predicted(pred, rates, args, time.perf_counter() - t0), timeline
