"""Checker of exercise 8: the student's spanning-tree packing rate (Nash-Williams and Tutte's
partition bound) of small cable graphs against the planner's packing LP
(planner.collectives.tree_packing.spanning_tree_packing, docs/algorithms.md section 10), and
their AllReduce times on the 8-server circulant with one slow cable (slow-cable-8.toml beside
this file) against the planner: the rate-weighted multi-ring predicted by planner.cost.predict
(topolab.lab.command.allreduce_real_seconds, the real cluster's seconds) and the packing bound S / tau.
The forest the planner packs is predicted too and printed beside them. ``--emulate`` measures
the multi-ring and the forest on the emulated network with `topolab collective`'s engine."""

from functools import lru_cache
from pathlib import Path

from planner import build_plan, load_scenario
from planner.collectives.forest import plan_capacities
from planner.collectives.tree_packing import spanning_tree_packing
from topolab.lab.command import allreduce_real_seconds

TITLE = "Forest packing on a slow cable: the Nash-Williams/Tutte bound, trees vs rings"
STUDENT_FILE = "forest.py"
FUNCTIONS = ("packing_rate(n, cables)", "allreduce_seconds(nbytes)")
SCENARIO = Path(__file__).resolve().parent / "slow-cable-8.toml"
SIZES = [1 << 20, 64 << 20]
HINT = (
    "hint: tau is the minimum over EVERY partition of the servers (not only into single servers) of the "
    "rate of the cables between parts over (parts - 1); a ring runs at its slowest cable; rates are TCP "
    "goodput (README.md)"
)
PACKING_TOLERANCE = 1e-6  # the packing LP is solved to optimality
# The multi-ring: the README's formula leaves out only each chunk's reduce (0.6% of the
# bandwidth term on the real cluster's clock), as exercise 1's; the bound is exact
RINGS_TOLERANCE = 0.01
BOUND_TOLERANCE = 0.001
EMULATED_BYTES = 64 << 20  # about 7 s of emulated time per repetition for both
SLOW_GBPS = 5.0


def clique(nodes: list[int], gbps: float) -> list[tuple[int, int, float]]:
    return [(a, b, gbps) for i, a in enumerate(nodes) for b in nodes[i + 1 :]]


@lru_cache(maxsize=1)
def lab_plan():
    return build_plan(load_scenario(str(SCENARIO)))


def lab_cables() -> list[tuple[int, int, float]]:
    """The lab network's cables as (a, b, gbps), one entry per cable."""
    return [(link.a, link.b, link.gbps) for link in lab_plan().links]


def graphs() -> dict[str, tuple[int, list[tuple[int, int, float]]]]:
    """Small cable graphs (n, cables) the student's packing rate is checked on."""
    return {
        "the lab's 8-server circulant": (8, lab_cables()),
        "two 4-server cliques joined by one slow cable": (
            8,
            clique([0, 1, 2, 3], 25.0) + clique([4, 5, 6, 7], 25.0) + [(3, 4, SLOW_GBPS)],
        ),
        "a ring of 6 with one slow cable": (6, [(i, (i + 1) % 6, SLOW_GBPS if i == 0 else 25.0) for i in range(6)]),
        "a square with one doubled cable and a diagonal": (
            4,
            [(0, 1, 25.0), (0, 1, 25.0), (1, 2, 25.0), (2, 3, 10.0), (3, 0, 25.0), (0, 2, 10.0)],
        ),
        "a path with a slow middle cable": (4, [(0, 1, 25.0), (1, 2, SLOW_GBPS), (2, 3, 25.0)]),
    }


def planner_packing_rate(cables: list[tuple[int, int, float]]) -> float:
    """The packing LP's tau in Gbit/s (parallel cables add up)."""
    capacities: dict[tuple[int, int], float] = {}
    for a, b, gbps in cables:
        capacities[(a, b)] = capacities.get((a, b), 0.0) + gbps
    return spanning_tree_packing(capacities).tau


@lru_cache(maxsize=1)
def packing_bytes_per_s() -> float:
    """tau of the lab network in bytes/s of TCP goodput (the real cluster's cables)."""
    return spanning_tree_packing(plan_capacities(lab_plan())).tau


def planner_seconds(nbytes: int) -> dict[str, float]:
    """The planner's real-cluster seconds: the rate-weighted multi-ring (``topoopt``)
    predicted, and the packing bound S / tau."""
    return {
        "rings": allreduce_real_seconds(SCENARIO, "topoopt", nbytes),
        "packing_bound": nbytes / packing_bytes_per_s(),
    }


def forest_seconds(nbytes: int) -> float:
    """The planner's forest (its packed trees, pipelined) predicted, real seconds."""
    return allreduce_real_seconds(SCENARIO, "forest", nbytes)


def check(student, emulate: bool) -> list[str]:
    problems = []
    for name, (n, cables) in graphs().items():
        got = float(student.packing_rate(n, list(cables)))
        want = planner_packing_rate(cables)
        if abs(got - want) > PACKING_TOLERANCE * want:
            problems.append(f"{name}: packing rate {got:.4f} Gbit/s, the packing LP gives {want:.4f}")
    tolerance = {"rings": RINGS_TOLERANCE, "packing_bound": BOUND_TOLERANCE}
    for nbytes in SIZES:
        answer = student.allreduce_seconds(nbytes)
        missing = sorted(set(tolerance) - set(answer))
        if missing:
            problems.append(f"{nbytes >> 20} MiB: no time for {missing} (expected keys {sorted(tolerance)})")
            continue
        want = planner_seconds(nbytes)
        for key, share in tolerance.items():
            got = float(answer[key])
            if abs(got - want[key]) > share * want[key]:
                problems.append(
                    f"{key}, {nbytes >> 20} MiB: {got * 1e3:.4f} ms, the planner gives {want[key] * 1e3:.4f} ms"
                )
        forest = forest_seconds(nbytes)
        print(
            f"  {nbytes >> 20} MiB: rings {want['rings'] * 1e3:.4g} ms, the planner's forest {forest * 1e3:.4g} ms "
            f"({forest / want['packing_bound']:.2f}x the bound {want['packing_bound'] * 1e3:.4g} ms), real cluster"
        )
    if emulate and not problems:
        problems += measure_emulated()
    return problems


def measure_emulated() -> list[str]:
    """The multi-ring and the forest on the emulated network (EMULATED_BYTES, median of 3),
    printed next to their predictions."""
    from topolab.collective.command import run_on_emulator

    scenario = load_scenario(str(SCENARIO))
    _, results = run_on_emulator(
        scenario, lab_plan(), ["topoopt", "forest"], [EMULATED_BYTES], repeat=3, log=lambda _m: None
    )
    problems = []
    for r in results:
        predicted_ms = allreduce_real_seconds(SCENARIO, r.algorithm, EMULATED_BYTES) * 1e3
        print(
            f"  {r.algorithm}, {EMULATED_BYTES >> 20} MiB: measured {r.time_s / r.time_scale * 1e3:.3f} ms, "
            f"predicted {predicted_ms:.3f} ms (real cluster), {'verified' if r.verified else 'WRONG'}"
        )
        if not r.verified:
            problems.append(f"{r.algorithm}: the emulated AllReduce did not verify")
    return problems
