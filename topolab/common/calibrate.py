"""Measure the workers' software cost per op, so the prediction can account for it.

An emulated iteration is not only bytes on links: every send and recv costs the worker
some processor time (Python, pyzmq, the kernel's TCP stack), and twelve workers share this
machine's two cores. The cost is a property of the machine and the executor, not of the plan,
so it is measured, not fitted: a *zero-payload twin* of the iteration's schedule (the same
ops and dependencies, 4-byte messages, no compute) runs on the same emulated hosts before the
timed iterations. With bandwidth out of the picture the model's prediction of the twin is
K x op_overhead (K counts the ops on the critical path, including the serialization of each
rank's ops on its processor), so op_overhead = measured twin time / K. When the workers share
this machine's cores, the model shares them too (`planner.cost.predict.Network.cores`): K then
counts the ops each core runs, and op_overhead is an op's time on one core.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace

from contract.errors import RunError
from contract.plan import Plan
from contract.schedule import Schedule
from planner.cost.iteration import IterationOptions
from planner.cost.iteration_prediction import NetworkArgs, predict_iteration
from planner.cost.predict import plan_network, predict

# Links so fast that a twin's 4-byte messages take no time next to the unit op cost (finite:
# the max-min fair sharing subtracts rates, and inf - inf is not a rate).
UNBOUNDED_LINK_BPS = 1e30


def unit_ops(cores: int | None = None) -> NetworkArgs:
    """The network on which a schedule's predicted time is K, its critical path in ops: a unit
    cost per op, no latency, no reduce time, links that take no time; the ranks sharing
    ``cores`` processors (None: one each)."""
    return NetworkArgs(
        link_bps=UNBOUNDED_LINK_BPS, alpha_s=0.0, op_overhead_s=1.0, reduce_bytes_per_s=float("inf"), cores=cores
    )


def critical_ops(plan: Plan, schedule: Schedule, cores: int | None = None) -> float:
    """K of any ``schedule`` on ``plan``'s network: its predicted time with a unit op cost (the
    ops on its critical path, counting the serialization of each rank's ops on its processor,
    and with ``cores``, the ranks' sharing of them)."""
    return float(predict(schedule, plan_network(plan, **unit_ops(cores))).seconds)


def twin_bytes(plan: Plan) -> int:
    """The smallest payload of a zero-payload twin's AllReduce: every ring still gives each
    member a non-empty chunk, so the twin has the same ops as the real one."""
    return 4 * plan.servers * 2 * max(1, len(plan.strides))


def zero_payload_twin(plan: Plan, opts: IterationOptions, cores: int | None = None) -> tuple[Schedule, float]:
    """The zero-payload twin of ``plan``'s iteration run with ``opts``, and K: its predicted
    time with a unit op cost on infinitely fast links (the ops on its critical path, counting
    the serialization of each rank's ops on its processor, and with ``cores``, the ranks'
    sharing of them)."""
    twin_opts = replace(opts, payload_scale=1e-12, time_scale=0.0, min_transfer_bytes=twin_bytes(plan))
    twin, unit = predict_iteration(plan, twin_opts, **unit_ops(cores))
    return twin, unit.seconds


def measure_op_overhead(
    twin: Schedule,
    critical_ops: float,
    hosts: list[str],
    spawn: Callable,
    repeats: int = 3,
    timeout_s: float = 30.0,
    plane_sources: list[dict[int, str]] | None = None,
    control_relay: Callable | None = None,
) -> dict:
    """Run ``twin`` (with ``critical_ops`` = K, both from `zero_payload_twin`) on the given hosts
    and return the per-op cost and what it came from (``control_relay``: as
    `workers.coordinator.Coordinator` takes it)."""
    from workers.coordinator import Coordinator

    with Coordinator(
        twin.to_dict(),
        hosts,
        spawn=spawn,
        timeout_s=timeout_s,
        plane_sources=plane_sources,
        control_relay=control_relay,
    ) as coord:
        results = coord.run(repeats, warmup=1)
    times = [r.time_s for r in results if r.ok]
    if not times:
        raise RunError("calibration: the zero-payload twin of the iteration failed verification")
    measured = statistics.median(times)
    return {
        "op_overhead_s": measured / critical_ops if critical_ops > 0 else 0.0,
        "twin_seconds": measured,
        "critical_ops": critical_ops,
        "twin_ops": twin.op_count(),
    }
