"""Checker of exercise 2: the student's stride selection against the planner's
(planner.topology.totient: TotientPerms + SelectPermutations, docs/algorithms.md section 1)."""

from math import gcd

from planner.topology.routing import circulant_hop_counts, coin_change_first_strides
from planner.topology.totient import select_permutations, totient_strides

TITLE = "TotientPerms and SelectPermutations: choose the ring strides"
STUDENT_FILE = "strides.py"
FUNCTIONS = ("select_strides(n, d)",)
# (servers, degree): the prototype, the paper's 128-server evaluation, and odd shapes
CASES = [(12, 4), (16, 8), (32, 4), (64, 6), (128, 8), (210, 8), (1024, 8)]


def diameter(n: int, strides: list[int]) -> int:
    return int(circulant_hop_counts(coin_change_first_strides(n, strides)).max())


def check(student, emulate: bool) -> list[str]:
    problems = []
    for n, d in CASES:
        strides = [int(p) for p in student.select_strides(n, d)]
        if len(strides) != d // 2:
            problems.append(f"n={n}, d={d}: {len(strides)} strides; each stride uses 2 ports, so d/2 = {d // 2}")
            continue
        bad = [p for p in strides if not 0 < p < n or gcd(p, n) != 1]
        if bad:
            problems.append(
                f"n={n}, d={d}: strides {bad} do not make a ring through all {n} servers (gcd(p, n) must be 1)"
            )
            continue
        if len({min(p, n - p) for p in strides}) < len(strides):
            problems.append(f"n={n}, d={d}: {strides} wires a ring twice (p and n - p are the same cables)")
            continue
        planner = select_permutations(totient_strides(n), d // 2, n)
        mine, theirs = diameter(n, strides), diameter(n, planner)
        if mine > theirs:
            problems.append(
                f"n={n}, d={d}: diameter {mine} with {strides}, the planner gets {theirs} with {planner}; "
                "hint: spread the strides geometrically between the smallest and largest candidate"
            )
    return problems
