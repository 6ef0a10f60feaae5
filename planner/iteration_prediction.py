"""The prediction of what is executed: a plan's iteration schedule run through the predictor.

`predict_iteration` builds the schedule the workers run (`planner.iteration`) and predicts
it on the plan's network at TCP goodput (`planner.predict`), so a plan reports the time of
the schedule it ships, not of the search's faster flow-level estimate
(docs/algorithms.md section 6).
"""

from __future__ import annotations

from contract.plan import Plan
from contract.schedule import Schedule

from .iteration import IterationOptions, iteration_schedule
from .predict import Network, Prediction, plan_network, predict
from .zoo import Model


def predict_iteration(
    plan: Plan, model: Model, opts: IterationOptions, network: Network | None = None
) -> tuple[Schedule, Prediction]:
    """The iteration schedule of ``plan`` and its prediction on ``network`` (default: the
    plan's own links at TCP goodput)."""
    schedule = iteration_schedule(plan, model, opts)
    return schedule, predict(schedule, network or plan_network(plan))
