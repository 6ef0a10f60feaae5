"""Checker of exercise 4: on the 12-server prototype whose stride-5 cables are older and
slower (SLOW_GBPS instead of 25), the student's split of a 64 MiB AllReduce over the four
rings (+1, -1, +5, -5) is predicted with planner.cost.predict (topolab.lab.command.predicted_real_seconds:
the real cluster's seconds) and compared with the lower bound 2 (n-1) S / (n D), D the
per-server egress goodput (docs/algorithms.md section 7)."""

from dataclasses import replace
from pathlib import Path

from contract.physics import DEFAULT_MTU, tcp_goodput_fraction
from contract.schedule import Check, ScheduleBuilder
from planner import build_plan, load_scenario
from planner.collectives.from_plan import allreduce_rings
from planner.collectives.rings import add_multiring_allreduce
from topolab.lab.command import predicted_real_seconds

TITLE = "Multi-ring on uneven cables: split the buffer by ring rate"
STUDENT_FILE = "weights.py"
FUNCTIONS = ("ring_weights(ring_gbps)",)
SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "topoopt-12.toml"
SLOW_STRIDE = 5
SLOW_GBPS = 10.0  # 10 Gbps cables left over from an older cluster
NBYTES = 64 << 20
EMULATED_MBPS = 100.0  # predicted as emulated (a 25 Gbps cable at 100 Mbit/s), reported in real time
WITHIN_BOUND = 1.10  # the weighted split must come within 10% of the bound
EQUAL_OVER_BOUND_AT_LEAST = 1.5  # sanity: the equal split is far from it on this network


def slow_plan():
    plan = build_plan(load_scenario(str(SCENARIO)))
    n = plan.servers
    links = tuple(
        replace(link, gbps=SLOW_GBPS) if (link.b - link.a) % n in (SLOW_STRIDE, n - SLOW_STRIDE) else link
        for link in plan.links
    )
    return replace(plan, links=links)


def ring_gbps(plan, ring) -> float:
    rate = {(link.a, link.b): link.gbps for link in plan.links}
    rate.update({(b, a): g for (a, b), g in list(rate.items())})
    return min(rate[(ring[i], ring[(i + 1) % len(ring)])] for i in range(len(ring)))


def predicted_seconds(plan, rings, weights) -> float:
    b = ScheduleBuilder(plan.servers, "weighted-multiring")
    b.buffer("grad", NBYTES)
    add_multiring_allreduce(b, rings, "grad", 0, NBYTES, weights=weights)
    b.check(Check("allreduce", "grad", 0, NBYTES, groups=[list(range(plan.servers))]))
    return predicted_real_seconds(plan, b.build(), EMULATED_MBPS, DEFAULT_MTU)


def bound_seconds(plan) -> float:
    n = plan.servers
    egress = sum(link.gbps for link in plan.links if 0 in (link.a, link.b)) * 1e9 * tcp_goodput_fraction(DEFAULT_MTU)
    return 2 * (n - 1) * NBYTES * 8 / (n * egress)


def check(student, emulate: bool) -> list[str]:
    plan = slow_plan()
    rings = allreduce_rings(plan)
    rates = [ring_gbps(plan, r) for r in rings]
    weights = [float(w) for w in student.ring_weights(rates)]
    if len(weights) != len(rings) or any(w < 0 for w in weights) or sum(weights) <= 0:
        return [f"ring_weights({rates}) returned {weights}: expected {len(rings)} non-negative weights, not all 0"]
    bound = bound_seconds(plan)
    mine = predicted_seconds(plan, rings, weights)
    equal = predicted_seconds(plan, rings, [1.0] * len(rings))
    print(
        f"  rings at {rates} Gbps: your split {mine * 1e3:.2f} ms, equal split {equal * 1e3:.2f} ms, "
        f"bound {bound * 1e3:.2f} ms"
    )
    problems = []
    if equal < EQUAL_OVER_BOUND_AT_LEAST * bound:
        problems.append("internal: the equal split is unexpectedly close to the bound (report this to the instructor)")
    if mine > WITHIN_BOUND * bound:
        problems.append(
            f"your split takes {mine / bound:.2f}x the bound (at most {WITHIN_BOUND:.2f}x); hint: every ring "
            "finishes when its last chunk does, so give each ring a share of the buffer proportional to its rate"
        )
    return problems
