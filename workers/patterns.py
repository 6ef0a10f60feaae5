"""Input patterns whose float32 sums are exact, and the expected results of the checks.

Rank m's input at element i of buffer number b, in iteration t, is

    f(m, i) = ((i + 7 m + 11 b) mod P) + ((m + 3 b + t) mod 5),        P = 251 (prime)

Small integers, so any sum over up to ~60 000 ranks is exact in float32 and an AllReduce
result can be compared for equality, not closeness. The value depends on the rank and the
position, so a chunk reduced twice, taken from the wrong rank or written at the wrong offset
shows up; the per-iteration term catches a stale buffer from the previous iteration. The
sum over a group is periodic in i with period P, so the expected result costs O(P |group|)
to compute, and filling or checking a buffer is one vectorised pass (no stored copies of
every rank's input, which matters with 12 workers x 256 MB buffers on one machine).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

PERIOD = 251
BLOCK_PERIODS = 256  # 64 256 elements: 251 KiB of float32, a cache-sized block of whole periods


def _base_vector(rank: int, buffer_index: int, phase: int) -> np.ndarray:
    """f's periodic part for elements phase, phase+1, ..., phase+P-1 (mod P)."""
    i = np.arange(PERIOD, dtype=np.int64) + phase
    return ((i + 7 * rank + 11 * buffer_index) % PERIOD).astype(np.float64)


def _iteration_term(rank: int, buffer_index: int, iteration: int) -> int:
    return (rank + 3 * buffer_index + iteration) % 5


def _apply_periodic(region: np.ndarray, vec: np.ndarray, op: str) -> bool:
    """Fill ``region`` with ``vec`` tiled (op="fill") or compare with it (op="equal"), one
    `BLOCK_PERIODS`-period block at a time: plain copies and comparisons of contiguous,
    cache-sized slices (a whole-buffer broadcast of 251-element rows is ~5x slower, and
    the fill and check of every rank compete with the collective for the same cores)."""
    block = np.tile(vec.astype(region.dtype), BLOCK_PERIODS)
    size = len(block)
    for lo in range(0, len(region), size):
        part = region[lo : lo + size]
        if op == "fill":
            part[:] = block[: len(part)]
        elif not np.array_equal(part, block[: len(part)]):
            return False
    return True


def fill_input(array: np.ndarray, rank: int, buffer_index: int, iteration: int) -> None:
    """Write rank ``rank``'s input for ``iteration`` into the whole ``array``."""
    vec = _base_vector(rank, buffer_index, 0) + _iteration_term(rank, buffer_index, iteration)
    _apply_periodic(array, vec, "fill")


def expected_vector(
    kind: str, members: Sequence[int], src: int, buffer_index: int, iteration: int, first_element: int
) -> np.ndarray:
    """One period of the expected values starting at element ``first_element``."""
    phase = first_element % PERIOD
    if kind == "allreduce":
        vec = np.zeros(PERIOD)
        for m in members:
            vec += _base_vector(m, buffer_index, phase) + _iteration_term(m, buffer_index, iteration)
        return vec
    return _base_vector(src, buffer_index, phase) + _iteration_term(src, buffer_index, iteration)


def region_matches(region: np.ndarray, expected_period: np.ndarray) -> bool:
    return _apply_periodic(region, expected_period, "equal")


def first_mismatch(region: np.ndarray, expected_period: np.ndarray) -> tuple[int, float, float]:
    """(index, got, expected) of the first wrong element (only called after a mismatch)."""
    reps = -(-len(region) // PERIOD)
    expected = np.tile(expected_period, reps)[: len(region)].astype(region.dtype)
    bad = int(np.flatnonzero(region != expected)[0])
    return bad, float(region[bad]), float(expected[bad])
