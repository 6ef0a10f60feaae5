"""Exercise 2: choose the AllReduce ring strides of a TopoOpt circulant (see README.md)."""

from math import gcd


def candidates(n: int) -> list[int]:
    """TotientPerms for the full group: the strides p with gcd(p, n) = 1 (each is a ring
    through all n servers)."""
    return [p for p in range(1, n) if gcd(p, n) == 1]


def select_strides(n: int, d: int) -> list[int]:
    """d/2 strides for n servers with d ports each (every stride is wired both ways).

    TODO: this picks the d/2 smallest candidates, which leaves the graph long and thin.
    Implement SelectPermutations: a geometric sequence between the smallest and the
    largest candidate, skipping a candidate whose negation n - p is already taken."""
    return candidates(n)[: d // 2]
