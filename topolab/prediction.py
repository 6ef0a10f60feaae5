"""What `topolab run` predicts before it emulates: the plan, one iteration's schedule, and
the flow-level model's time for exactly that schedule on the emulated links.

Times are emulated seconds; the real cluster's milliseconds divide them by the time scale
(contract.physics.time_scale: real link rate / emulated link rate).
"""

from __future__ import annotations

import time
from typing import Any

from contract import physics
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


def prepare(
    s: Scenario, payload_scale: float | None = None, reference_gbps: float | None = None
) -> tuple[Plan, Any, Any, dict[str, Any]]:
    """Plan, schedule and prediction of a scenario (no root needed). ``reference_gbps``: the
    real rate ``link_mbps`` stands for (the emulator's ``reference_gbps``; None: the plan's
    ``link_gbps``), which sets the time scale."""
    plan = build_plan(s)
    link_mbps = s.emulation.link_mbps
    reference = reference_gbps or plan.link_gbps
    time_scale = physics.time_scale(reference, link_mbps)
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
        "link_mbps": link_mbps,
        "reference_gbps": reference,
        "plan_link_gbps": plan.link_gbps,
        "mtu": s.emulation.mtu,
        "payload_scale": scale,
    }
    return plan, schedule, opts, emulated


def predict_run(
    plan: Plan, schedule, emulated: dict[str, Any], netem: bool, op_overhead_s: float = 0.0
) -> dict[str, Any]:
    alpha = SOFTWARE_HOP_S + (plan.latency_us * 1e-6 * emulated["time_scale"] if netem else 0.0)
    net = plan_network(
        plan,
        link_bps=plan.link_gbps * 1e9 / emulated["time_scale"],  # a plan link's emulated rate
        mtu=emulated["mtu"],
        alpha_s=alpha,
        op_overhead_s=op_overhead_s,
        reduce_cap_bytes=EXPOSED_REDUCE_BYTES,
    )
    t0 = time.perf_counter()
    pred = predict(schedule, net)
    return {
        "emulated_s": pred.seconds,
        "real_ms": pred.seconds / emulated["time_scale"] * 1e3,
        "alpha_s": alpha,
        "op_overhead_s": op_overhead_s,
        "model_seconds": time.perf_counter() - t0,
        "link_bytes": pred.link_bytes_list(),
        "relayed_link_bytes": pred.relayed_bytes_list(),
    }
