"""Faults during `topolab run`: a cable goes down (or slows down) at a given iteration.

TopoOpt (NSDI 2023, section 5) argues that a direct-connect fabric must survive cable
failures by recomputing its routes. A fault comes from the scenario (``[[faults]]``,
docs/scenarios.md) or from ``--cable-down A-B@ITER``; before timed iteration ITER:

- ``down``: the emulator takes the cable down for real (both ends, `emulator.live`). With
  ``reroute`` (default) the planner recomputes shortest routes in the remaining graph
  (`planner.topology.reroute`), the emulator replaces every host's routes in one netlink batch per
  host, the prediction is recomputed on the new routes, and the run goes on; the AllReduce
  rings keep their order, their steps over the dead cable relayed around it. Without
  ``reroute``, the run stops at once with one line naming the cable and the ranks whose
  traffic crossed it (exit 1).
- ``degrade``: the cable's HTB rate becomes ``factor`` x its rate on both ends; the
  prediction is recomputed with the slower cable.

Every timed iteration records the prediction of the routes it ran on, so results.json and
the report's "Faults" section (`topolab.results.run_report.report_section`) show the iterations before and after each fault, predicted
and measured. A fault naming a cable the plan lacks, or an iteration outside the timed
iterations, is a usage error (exit 2) before anything is built.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from contract.errors import RunError, UsageError
from contract.plan import Plan
from planner.scenario import Fault
from planner.topology.reroute import cable_index, ranks_using, rerouted_plan

from ..results.run_results import AppliedFault, Iteration

_FLAG = re.compile(r"^h?(\d+)-h?(\d+)@(\d+)$")


def add_fault_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cable-down",
        action="append",
        default=[],
        metavar="A-B@ITER",
        help="take the cable between servers A and B down before timed iteration ITER (0-based; repeatable)",
    )
    parser.add_argument(
        "--no-reroute",
        action="store_true",
        help="do not reroute around dead cables: a fault that cuts traffic fails the run (exit 1)",
    )


def faults_of(scenario_faults: tuple[Fault, ...], cable_down: list[str], no_reroute: bool) -> list[Fault]:
    """The scenario's faults plus those of ``--cable-down``; ``--no-reroute`` turns rerouting
    off for all of them."""
    faults = list(scenario_faults)
    for value in cable_down:
        m = _FLAG.match(value.strip())
        if not m:
            raise UsageError(f"--cable-down: expected A-B@ITER (e.g. 0-1@2), got {value!r}")
        a, b, it = map(int, m.groups())
        faults.append(Fault(iteration=it, cable=(a, b)))
    if no_reroute:
        faults = [Fault(f.iteration, f.cable, f.action, f.factor, False) for f in faults]
    return sorted(faults, key=lambda f: f.iteration)


@dataclass(frozen=True)
class PlannedFault:
    fault: Fault
    cable: int  # index in plan.links
    name: str  # "h0-h1"


def resolve(faults: list[Fault], plan: Plan, iterations: int) -> list[PlannedFault]:
    """Each fault with its plan cable; `UsageError` naming the first bad one."""
    out = []
    for i, f in enumerate(faults):
        a, b = f.cable
        name = f"h{a}-h{b}"
        if not 0 <= f.iteration < iterations:
            raise UsageError(
                f"fault {i} (cable {name}): iteration {f.iteration} is outside the timed iterations 0..{iterations - 1}"
            )
        k = cable_index(plan, a, b) if max(a, b) < plan.servers else None
        if k is None:
            raise UsageError(f"fault {i}: the plan has no cable {name} (servers {a} and {b} are not cabled)")
        out.append(PlannedFault(f, k, name))
    return out


class FaultInjector:
    """Applies the due faults before each timed iteration and tracks the current plan."""

    def __init__(
        self,
        faults: list[PlannedFault],
        plan: Plan,
        pairs: list[tuple[int, int]],
        log: Callable[[str], None],
    ):
        self.pending = list(faults)
        self.plan = plan
        self.pairs = pairs  # the schedule's (src, dst) rank pairs
        self.log = log
        self.dead: set[int] = set()
        self.applied: list[AppliedFault] = []
        self.predicted: dict[str, Any] = {}
        self._net: Any = None
        self._predict: Callable[[Plan], dict[str, Any]] | None = None

    def start(self, net: Any, predict: Callable[[Plan], dict[str, Any]], predicted: dict[str, Any]) -> None:
        """The running network and the prediction function (emulated links, calibrated)."""
        self._net, self._predict, self.predicted = net, predict, predicted

    def before(self, timed_index: int) -> None:
        """Apply every fault due before timed iteration ``timed_index``."""
        while self.pending and self.pending[0].fault.iteration == timed_index:
            self._apply(self.pending.pop(0))

    def annotate(self, record: Iteration) -> None:
        """The prediction the iteration ran under, and how many faults preceded it."""
        record.predicted_real_ms = self.predicted.get("real_ms")
        record.faults_before = len(self.applied)

    def _apply(self, pf: PlannedFault) -> None:
        assert self._net is not None and self._predict is not None
        f, live, t0 = pf.fault, self._net.live, time.perf_counter()
        if f.action == "down":
            live.cable_down(pf.cable)
            self.dead.add(pf.cable)
            if f.reroute:
                try:
                    self.plan = rerouted_plan(self.plan, self.dead)
                except ValueError as err:
                    raise RunError(f"cable {pf.name} down before iteration {f.iteration}: {err}") from None
                live.replace_routes(self.plan.next_hop)
            else:
                ranks = ranks_using(self.plan, self.pairs, pf.cable)
                if ranks:
                    raise RunError(
                        f"cable {pf.name} went down before iteration {f.iteration} and rerouting is off: "
                        f"ranks {', '.join(map(str, ranks))} send over it"
                    )
        else:
            live.set_cable_rate(pf.cable, round(self._net.link_rate_bps[pf.cable] * f.factor))
            self.plan = rerouted_plan(self.plan, self.dead, {pf.cable: f.factor})
        applied_s = time.perf_counter() - t0
        self.predicted = self._predict(self.plan)
        what = "down" if f.action == "down" else f"degraded to {f.factor:g}x"
        how = " (rerouted)" if f.action == "down" and f.reroute else ""
        self.log(
            f"      fault before iteration {f.iteration}: cable {pf.name} {what}{how} in {applied_s * 1e3:.0f} ms; "
            f"prediction now {self.predicted['real_ms']:.3f} ms"
        )
        self.applied.append(
            AppliedFault(
                iteration=f.iteration,
                cable=pf.name,
                cable_index=pf.cable,
                action=f.action,
                factor=f.factor,
                reroute=f.reroute,
                applied_s=applied_s,
                predicted_real_ms=self.predicted["real_ms"],
                predicted_emulated_s=self.predicted["emulated_s"],
            )
        )


def injector_for(
    faults: list[Fault], plan: Plan, schedule: Any, iterations: int, log: Callable[[str], None]
) -> FaultInjector | None:
    """A `FaultInjector` for the run's faults (checked against the plan), None without any."""
    if not faults:
        return None
    pairs = sorted({(e["src"], e["dst"]) for e in schedule.edge_bytes()})
    return FaultInjector(resolve(faults, plan, iterations), plan, pairs, log)
