"""One traffic phase (an all-to-all) under single-path and planned routing, predicted and measured.

The ablation of the per-destination bandwidth allocation (docs/algorithms.md section 4.1):
the same phase, the same network, four ways to carry it.

| variant     | paths per pair                    | per-destination HTB classes |
|-------------|-----------------------------------|-----------------------------|
| `single`    | the destination route (plane 0)   | no: each cable one class    |
| `rates`     | the route, as plane 1 (LP, k = 1) | yes, at the LP's rates      |
| `multipath` | up to k planes (LP, k = 4)        | no                          |
| `planned`   | up to k planes (LP, k = 4)        | yes                         |

The phase is the workload's embedding all-to-all by default (every table owner sends its
lookups to every other server; `planner.bandwidth.multipath.embedding_alltoall_traffic`), or a uniform
all-to-all of ``nbytes_per_pair``. Its bytes are multiplied by one factor so that the
single-path phase lasts about ``PHASE_SECONDS`` emulated: the real phase is a fraction of a
millisecond, which the workers' per-message cost would swamp. Ratios between variants do not
depend on the factor. Each variant is built as its own emulated network (its planes, rules
and classes), its schedule verified by the workers (a copy check per pair), and predicted by
the flow model on the same allocation (`planner.cost.predict.plan_network`).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from contract.emulation import EmulatedRates, EmulationConfig
from contract.errors import UsageError
from contract.physics import tcp_goodput_fraction
from contract.plan import Plan
from contract.schedule import Schedule, ScheduleBuilder
from planner.bandwidth.multipath import (
    K_PATHS,
    BandwidthAllocation,
    allocate_for_plan,
    embedding_alltoall_traffic,
    single_path_seconds,
)
from planner.collectives.p2p import add_p2p_transfers, all_to_all
from planner.cost.predict import plan_network, predict

from ..common.prediction import SOFTWARE_HOP_S
from ..results.collective_results import PhaseResult

if TYPE_CHECKING:
    from emulator import EmulationConfig

VARIANTS: dict[str, tuple[int, bool]] = {  # name -> (paths per pair, 0 = no allocation; classes)
    "single": (0, False),
    "rates": (1, True),
    "multipath": (K_PATHS, False),
    "planned": (K_PATHS, True),
}
ROUTINGS = ("single", "planned")  # what `topolab collective --routing` offers
PHASE_SECONDS = 1.0  # emulated length of the single-path phase the bytes are scaled to
ITEM = 4  # float32: transfers are whole items
Traffic = dict[tuple[int, int], float]


def phase_traffic(plan: Plan, scenario: Any, nbytes_per_pair: int | None = None) -> Traffic:
    """The embedding all-to-all of the scenario's workload, or a uniform one."""
    if nbytes_per_pair:
        return {(s, d): float(v) for s, d, v in all_to_all(range(plan.servers), nbytes_per_pair)}
    traffic = embedding_alltoall_traffic(plan)
    if not traffic:
        raise UsageError(
            f"{scenario.name}: the plan has no embedding all-to-all (strategy {plan.strategy!r}); give --bytes"
        )
    return traffic


def variant_plan(plan: Plan, traffic: Traffic, variant: str) -> tuple[Plan, BandwidthAllocation | None]:
    """The plan carrying the variant's allocation (none for ``single``)."""
    paths, _classes = VARIANTS[variant]
    if paths == 0:
        return dataclasses.replace(plan, allocation=()), None
    result = allocate_for_plan(plan, traffic, k=paths)
    return dataclasses.replace(plan, allocation=result.allocation), result


def phase_transfers(traffic: Traffic, factor: float) -> list[tuple[int, int, int]]:
    """Every pair's bytes times ``factor``, in whole items: (src, dst, bytes), pairs in order."""
    return [
        (s, d, max(ITEM, int(v * factor) // ITEM * ITEM)) for (s, d), v in sorted(traffic.items()) if v > 0 and s != d
    ]


def phase_bytes(traffic: Traffic, factor: float) -> int:
    """The bytes the phase's workers move (`phase_transfers`, summed)."""
    return sum(n for _s, _d, n in phase_transfers(traffic, factor))


def phase_schedule(plan: Plan, traffic: Traffic, factor: float) -> Schedule:
    """Every pair's bytes (`phase_transfers`) as verified transfers, split over the pair's
    planes when ``plan`` carries an allocation."""
    transfers = phase_transfers(traffic, factor)
    b = ScheduleBuilder(plan.servers, "phase")
    add_p2p_transfers(b, transfers, "a2a", 0, "a2a", network=plan.network if plan.allocation else None)
    b.params.update(factor=factor, pairs=len(transfers))
    return b.build()


def scale_factor(plan: Plan, traffic: Traffic, time_scale: float, phase_seconds: float = PHASE_SECONDS) -> float:
    """The byte factor that makes the single-path phase last ``phase_seconds`` emulated, at
    ``time_scale`` (the network's, `contract.emulation.emulated_rates`)."""
    emulated = single_path_seconds(plan.network, traffic) * time_scale
    return max(1.0, phase_seconds / emulated) if emulated > 0 else 1.0


def predict_variant(plan: Plan, schedule: Schedule, classes: bool, rates: EmulatedRates) -> float:
    """The flow model's time (emulated seconds) of the variant on cables at ``rates``."""
    net = plan_network(plan, rates=rates, alpha_s=SOFTWARE_HOP_S, destination_classes=classes)
    return predict(schedule, net).seconds


def measure_phase(
    plan: Plan,
    traffic: Traffic,
    variants: Sequence[str],
    emulation: EmulationConfig,
    *,
    factor: float,
    repeat: int = 3,
    warmup: int = 1,
    timeout_s: float = 60.0,
    log: Callable[[str], None] | None = None,
) -> list[PhaseResult]:
    """Build each variant's network (`topolab.common.network.open_network`: over ``emulation.machines``
    too, where a variant has no planes) and run its phase ``warmup + repeat`` times; each is
    predicted, and bounded by the LP, at the rates and MTU of its network as built."""
    from ..common.network import open_network
    from ..common.schedule_run import run_schedule_on

    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    out = []
    for variant in variants:
        paths, classes = VARIANTS[variant]
        vplan, alloc = variant_plan(plan, traffic, variant)
        schedule = phase_schedule(vplan, traffic, factor)
        lp_real = alloc.seconds if alloc is not None else single_path_seconds(plan.network, traffic)
        with open_network(vplan, dataclasses.replace(emulation, destination_classes=classes), log=log) as net:
            result = PhaseResult(
                variant,
                predict_variant(vplan, schedule, classes, net.rates),
                lp_real * factor * net.time_scale / tcp_goodput_fraction(net.mtu),
                pairs_split=sum(len(p.paths) > 1 for p in vplan.allocation),
                planes=vplan.network.planes,
            )

            def each(i: int, res: Any, result: PhaseResult = result) -> None:
                log(
                    f"  {result.variant}: {'warm-up' if i < warmup else f'{i - warmup + 1}/{repeat}'} "
                    f"{res.time_s:.3f} s (predicted {result.predicted_s:.3f} s, LP {result.bound_s:.3f} s) "
                    f"{'verified' if res.ok else 'VERIFY FAILED'}"
                )

            run = run_schedule_on(net, schedule.to_dict(), repeat=repeat, warmup=warmup, timeout_s=timeout_s, each=each)
        result.times_s, result.verified, result.errors = run.times_s, run.verified, run.mismatches
        out.append(result)
    return out
