"""Exercise 2, reference solution: TotientPerms + SelectPermutations (TopoOpt, NSDI 2023, section 4)."""

from math import gcd


def candidates(n: int) -> list[int]:
    """TotientPerms for the full group: the strides p with gcd(p, n) = 1."""
    return [p for p in range(1, n) if gcd(p, n) == 1]


def select_strides(n: int, d: int) -> list[int]:
    """m = d/2 strides: for i = 0..m-1 the smallest free candidate >= min * ratio**i, with
    ratio = (max/min)**(1/m); p and n - p are one ring, so taking p takes both."""
    cands = candidates(n)
    m = d // 2
    lo, hi = cands[0], cands[-1]
    ratio = (hi / lo) ** (1.0 / m)
    chosen: list[int] = []
    taken: set[int] = set()
    for i in range(m):
        target = lo * ratio**i
        free = [c for c in cands if c not in taken]
        pick = next((c for c in free if c >= target - 1e-9), free[0])
        chosen.append(pick)
        taken.update({pick, n - pick})
    return chosen
