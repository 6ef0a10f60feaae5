"""TotientPerms and SelectPermutations: the AllReduce rings of TopoOpt.

Reference: Wang et al., "TopoOpt: Co-optimizing Network Topology and Parallelization
Strategy for Distributed Training Jobs", NSDI 2023, section 4, as implemented by the
authors (FlexFlow's TopoOpt branch, ``SpMulMat::construct_candidate_jumps`` and
``choose_n_geo``); docs/algorithms.md section 1.

A p-ring sends server i to (i + p) mod n and visits every server iff gcd(p, n) = 1. A
group of size g (g divides n) whose members sit on a coset {s, s + n/g, ...} has the
candidate strides (n/g) k for every k = 1 .. g-1 with gcd(k, g) = 1 (the full group:
the phi(n) numbers coprime with n). The whole list is kept: p and n - p are both
candidates, and a stride above n/2 is a valid choice.

SelectPermutations picks m = d_k / 2 strides in a geometric sequence between the smallest
and the largest candidate: ratio = (max/min)^(1/m), and for i = 0 .. m-1 the smallest
candidate >= min ratio^i not yet taken. Every stride is wired in both directions (the
p-ring and its reverse, the (n-p)-ring, are the same cables), so a candidate whose
negation was already taken counts as taken: the circulant stays d-regular without
duplicate rings. This keeps the circulant's diameter small for the model-parallel traffic
that rides the rings (n = 1024, d = 8: strides 1, 7, 33, 181, diameter 8).

``stride_range = "half"`` (a scenario's ``[topology] stride_range``) ends the sequence at the
largest candidate <= n/2 instead, counting each ring once (p and n - p): n = 1024, d = 8
gives 1, 5, 23, 109, diameter 9 and 5.51 mean hops against 5.12, but shorter cables in
index space, so a split of the servers into contiguous blocks (several emulation machines,
docs/cluster.md) cuts fewer of them: 13.5% instead of 20.9% over 4 machines. Ring
AllReduce costs the same on either.
"""

from __future__ import annotations

from math import gcd


def totient_strides(n: int, group_size: int | None = None) -> list[int]:
    """Candidate strides of AllReduce rings for a group of ``group_size`` (default n).

    >>> totient_strides(12)
    [1, 5, 7, 11]
    >>> totient_strides(12, 4)
    [3, 9]
    """
    g = n if group_size is None else group_size
    if g < 1 or n % g:
        raise ValueError(f"group size {g} does not divide {n}")
    step = n // g
    return [step * k for k in range(1, g) if gcd(k, g) == 1]


STRIDE_RANGES = ("full", "half")  # [topology] stride_range


def select_permutations(candidates: list[int], m: int, n: int | None = None, stride_range: str = "full") -> list[int]:
    """Choose ``m`` strides from ``candidates`` (module docstring; ``n``: the ring size,
    so that p and n - p count as one ring; default: no negation). ``stride_range``: the
    geometric sequence ends at the largest candidate (``full``) or at the largest one
    <= n/2 (``half``, needs ``n``).

    m = 1 gives the smallest candidate. When every candidate (or its negation) is taken,
    strides repeat, smallest first (parallel rings on parallel cables).

    >>> select_permutations([1, 5, 7, 11], 2, 12)
    [1, 5]
    >>> select_permutations([1, 3, 5, 7, 9, 11, 13, 15], 4, 16)
    [1, 3, 5, 9]
    >>> select_permutations(list(range(1, 1024, 2)), 4, 1024), select_permutations(list(range(1, 1024, 2)), 4, 1024, "half")
    ([1, 7, 33, 181], [1, 5, 23, 109])
    """
    if stride_range not in STRIDE_RANGES:
        raise ValueError(f"stride_range {stride_range!r} is not one of {', '.join(STRIDE_RANGES)}")
    if m <= 0 or not candidates:
        return []
    cands = sorted(candidates)
    lo, hi = cands[0], cands[-1]
    if stride_range == "half" and n is not None:
        hi = max((c for c in cands if 2 * c <= n), default=hi)
    ratio = (hi / lo) ** (1.0 / m)
    chosen: list[int] = []
    taken: set[int] = set()
    for i in range(m):
        target = lo * ratio**i
        free = [c for c in cands if c not in taken]
        pick = next((c for c in free if c >= target - 1e-9), free[0] if free else None)
        if pick is None:  # every ring used: repeat, round robin
            pick = chosen[len(chosen) % len(set(chosen))]
        chosen.append(pick)
        taken.add(pick)
        if n is not None:
            taken.add((n - pick) % n)
    return chosen


def circulant_cables(n: int, strides: list[int]) -> list[tuple[int, int]]:
    """One cable per server and stride: (i, i + p mod n). Each stride, used in both
    directions, takes two interfaces of every server (for p = n/2 the two cables of a
    pair are parallel)."""
    return [(i, (i + p) % n) for p in strides for i in range(n)]
