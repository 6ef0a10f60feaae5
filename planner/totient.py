"""TotientPerms and SelectPermutations: the AllReduce rings of TopoOpt.

Reference: TopoOpt (NSDI 2023) section 4, algorithms.md sections 1.1 and 1.2.

A p-ring sends server i to (i + p) mod n and visits every server iff gcd(p, n) = 1, so the
candidate strides of a full AllReduce are the phi(n) numbers coprime with n. A sub-group of
size g (g divides n) whose members sit on a coset {s, s + n/g, ...} has candidates
(n/g) * k with gcd(k, g) = 1. Since p and n - p are the same ring reversed and TopoOpt uses
every ring in both directions, only strides up to n/2 are candidates here.

SelectPermutations picks m strides in a geometric sequence between the smallest and the
largest candidate, which keeps the circulant graph's diameter small for the model-parallel
traffic that rides the rings.
"""

from __future__ import annotations

from math import gcd


def totient_strides(n: int, group_size: int | None = None) -> list[int]:
    """Candidate strides (1 <= p <= n/2) of AllReduce rings for a group of ``group_size``.

    >>> totient_strides(12)
    [1, 5]
    >>> totient_strides(12, 4)
    [3]
    """
    g = n if group_size is None else group_size
    if g < 1 or n % g:
        raise ValueError(f"group size {g} does not divide {n}")
    if g == 1:
        return []
    step = n // g
    return [step * k for k in range(1, g + 1) if gcd(k, g) == 1 and step * k <= n // 2]


def select_permutations(candidates: list[int], m: int) -> list[int]:
    """Choose ``m`` strides from ``candidates`` (sorted ascending), reference section 1.2.

    m = 1 gives the smallest candidate. For m > 1, ratio = (max/min) ** (1/m) and step i
    takes the smallest unused candidate >= min * ratio**i. When there are fewer candidates
    than m, strides repeat (parallel rings on parallel cables), smallest first.

    >>> select_permutations([1, 5], 2)
    [1, 5]
    >>> select_permutations([1, 3, 5, 7, 9, 11, 13, 15], 3)
    [1, 3, 7]
    """
    if m <= 0 or not candidates:
        return []
    cands = sorted(candidates)
    if m == 1:
        return [cands[0]]
    lo, hi = cands[0], cands[-1]
    ratio = (hi / lo) ** (1.0 / m)
    chosen: list[int] = []
    for i in range(m):
        target = lo * ratio**i
        pick = next((c for c in cands if c >= target - 1e-9 and c not in chosen), None)
        if pick is None:
            pick = next((c for c in cands if c not in chosen), None)
        if pick is None:  # every candidate used: repeat, round robin
            pick = cands[len(chosen) % len(cands)]
        chosen.append(pick)
    return chosen


def circulant_cables(n: int, strides: list[int]) -> list[tuple[int, int]]:
    """One cable per server and stride: (i, i + p mod n). Each stride, used in both
    directions, takes two interfaces of every server (for p = n/2 the two cables of a
    pair are parallel)."""
    return [(i, (i + p) % n) for p in strides for i in range(n)]
