"""The prediction of what is executed: a plan's iteration schedule run through the predictor.

`predict_iteration` is the one way to predict a plan's training iteration. It needs the plan
alone (its `Workload` and `Placement` say what the iteration computes and moves, the plan's
cables and routes where it runs): it builds the schedule the workers run
(`planner.cost.iteration.iteration_schedule`, with ``opts``: time scale, payload scale, buckets)
and predicts it with the flow-level predictor (`planner.cost.predict`) on the plan's network as
the caller describes it (`NetworkArgs`: the arguments of `planner.cost.predict.plan_network`, by
default the plan's own rates at TCP goodput). So a plan reports the time of the schedule it
ships, not of the search's faster flow-level estimate (docs/algorithms.md section 6).

Callers: the search re-scores its final plan (`planner.search.mcmc`), `topolab run`
predicts the run before it emulates it (`topolab.common.prediction.prepare`, at the emulated
rates), and calibration counts the ops on the critical path of the zero-payload twin
(`topolab.common.calibrate.zero_payload_twin`, on infinitely fast links at a unit op cost).
"""

from __future__ import annotations

from typing import TypedDict, Unpack, overload

from contract.emulation import EmulatedRates
from contract.plan import Plan
from contract.schedule import Schedule

from .iteration import IterationOptions, iteration_schedule
from .predict import Prediction, plan_network, predict


class NetworkArgs(TypedDict, total=False):
    """How the predictor sees the plan's network (`planner.cost.predict.plan_network`'s keywords;
    a key left out takes that function's default)."""

    link_bps: float | None  # the rate a cable of plan.link_gbps runs at (None: the plan's own)
    mtu: int  # cables carry TCP goodput at this MTU
    alpha_s: float | None  # per-hop latency (None: the plan's latency_us)
    op_overhead_s: float  # the workers' software cost per send and recv
    reduce_bytes_per_s: float  # the receiver's reduce and copy rate
    reduce_cap_bytes: float  # the largest part of a message whose reduction is exposed
    destination_classes: bool  # an allocation's planes get their assured rates
    rates: EmulatedRates | None  # the cables as an emulated network runs them (replaces link_bps, mtu)
    cores: int | None  # the processors the ranks share (None: one each)


@overload
def predict_iteration(
    plan: Plan, opts: IterationOptions | None = None, *, max_ops: None = None, **network: Unpack[NetworkArgs]
) -> tuple[Schedule, Prediction]: ...


@overload
def predict_iteration(
    plan: Plan, opts: IterationOptions | None = None, *, max_ops: int, **network: Unpack[NetworkArgs]
) -> tuple[Schedule, Prediction | None]: ...


def predict_iteration(
    plan: Plan, opts: IterationOptions | None = None, *, max_ops: int | None = None, **network: Unpack[NetworkArgs]
) -> tuple[Schedule, Prediction | None]:
    """The iteration schedule of ``plan`` run with ``opts``, and its prediction on the plan's
    network as ``network`` describes it. With ``max_ops``, a schedule of more ops is not
    predicted (the prediction is None): the predictor's time grows with the op count."""
    schedule = iteration_schedule(plan, opts)
    if max_ops is not None and schedule.op_count() > max_ops:
        return schedule, None
    return schedule, predict(schedule, plan_network(plan, **network))
