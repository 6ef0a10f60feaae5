"""What `topolab run` predicts: the plan, one iteration's schedule, and the flow-level model's
time for exactly that schedule on the emulated links.

`predict_run` takes the rates the links are emulated at (`contract.emulation.EmulatedRates`:
time scale, every cable's rate, the MTU): before the network is built, the scenario's
(`scenario_rates`); once it is built, the network's own (``net.rates``), which is what a
measured run is compared with: a network over several machines runs its cables at the
tunnels' MTU, not at the scenario's.

Times are emulated seconds; the real cluster's milliseconds divide them by the time scale
(contract.physics.time_scale: real link rate / emulated link rate).
"""

from __future__ import annotations

import time
from typing import Any

from contract.emulation import EmulatedRates, emulated_rates
from planner import Plan, Scenario, build_plan
from planner.iteration import IterationOptions, iteration_schedule
from planner.predict import plan_network, predict
from planner.zoo import get_model

# Per-hop latency of an emulated link without netem: a small-message round trip measured
# 18 us for one hop and 31 us for three on this kernel (docs/emulation.md), i.e. about
# 6.5 us per hop one way plus the fixed software cost, which the model takes per message.
SOFTWARE_HOP_S = 6.5e-6
# The executor reduces a pipelined message chunk by chunk as it arrives, so only the last
# chunk's reduction is exposed; numpy's in-place add of float32 on one core of this machine
# runs at a few GB/s and the workers share the two cores.
EXPOSED_REDUCE_BYTES = 256 << 10


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


def compute_seconds(schedule) -> list[float]:
    """Per rank, the compute stream's busy time (emulated seconds)."""
    return [sum(op.seconds for op in prog.get("compute", []) if op.kind == "compute") for prog in schedule.programs]


def scenario_rates(plan: Plan, s: Scenario) -> EmulatedRates:
    """The rates ``plan``'s network is emulated at as the scenario asks (before it is built)."""
    return emulated_rates(plan.network, s.emulation)


def prepare(s: Scenario, payload_scale: float | None = None) -> tuple[Plan, Any, Any, dict[str, Any]]:
    """Plan, schedule and the emulation's planned facts of a scenario (no root needed)."""
    plan = build_plan(s)
    rates = scenario_rates(plan, s)
    time_scale = rates.time_scale
    scale = s.run.payload_scale if payload_scale is None else payload_scale
    opts = IterationOptions(
        batch=s.workload.batch_per_server,
        device_tflops=s.workload.device_tflops,
        time_scale=time_scale,
        payload_scale=scale,
    )
    schedule = iteration_schedule(plan, get_model(s.workload.model), opts)
    emulated = {
        "time_scale": time_scale,
        "link_mbps": rates.link_mbps,
        "reference_gbps": rates.reference_gbps,
        "plan_link_gbps": plan.link_gbps,
        "mtu": rates.mtu,
        "payload_scale": scale,
    }
    return plan, schedule, opts, emulated


def predict_run(plan: Plan, schedule, rates: EmulatedRates, netem: bool, op_overhead_s: float = 0.0) -> dict[str, Any]:
    """The flow model's time of ``schedule`` on ``plan``'s cables emulated at ``rates`` (a built
    network's ``net.rates``, or `scenario_rates` before the build); records the time scale and
    MTU it used."""
    alpha = SOFTWARE_HOP_S + (plan.latency_us * 1e-6 * rates.time_scale if netem else 0.0)
    net = plan_network(
        plan,
        rates=rates,
        alpha_s=alpha,
        op_overhead_s=op_overhead_s,
        reduce_cap_bytes=EXPOSED_REDUCE_BYTES,
    )
    t0 = time.perf_counter()
    pred = predict(schedule, net)
    return {
        "emulated_s": pred.seconds,
        "real_ms": pred.seconds / rates.time_scale * 1e3,
        "time_scale": rates.time_scale,
        "mtu": rates.mtu,
        "alpha_s": alpha,
        "op_overhead_s": op_overhead_s,
        "model_seconds": time.perf_counter() - t0,
        "link_bytes": pred.link_bytes_list(),
        "relayed_link_bytes": pred.relayed_bytes_list(),
    }
