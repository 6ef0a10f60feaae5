"""Verification: after an iteration, compare every region this rank's checks constrain with the
exact expected values (`workers.patterns`: small-integer inputs whose float32 sums are exact).

Check kinds (docs/schedules.md): ``allreduce`` (each member of a group ends with the sum of
the group's inputs over the region) and ``copy`` (``dst``'s region ends equal to ``src``'s
input). A rank verifies only the checks that constrain it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import patterns


def verify(
    rank: int,
    checks: list[dict[str, Any]],
    arrays: dict[str, np.ndarray],
    buffer_index: dict[str, int],
    iteration: int,
) -> list[str]:
    """One line per region that differs from its expected values (empty: all correct)."""
    problems = []
    for c in checks:
        name = c["buffer"]
        arr = arrays[name]
        item = arr.itemsize
        lo, hi = int(c["offset"]) // item, (int(c["offset"]) + int(c["length"])) // item
        if c["kind"] == "allreduce":
            group = next((g for g in c["groups"] if rank in g), None)
            if group is None:
                continue
            vec = patterns.expected_vector("allreduce", group, -1, buffer_index[name], iteration, lo)
            what = f"sum over ranks {group}"
        elif c["kind"] == "copy":
            if int(c["dst"]) != rank:
                continue
            vec = patterns.expected_vector("copy", [], int(c["src"]), buffer_index[name], iteration, lo)
            what = f"rank {c['src']}'s input"
        else:
            problems.append(f"unknown check kind {c['kind']!r}")
            continue
        region = arr[lo:hi]
        if not patterns.region_matches(region, vec):
            bad, got, exp = patterns.first_mismatch(region, vec)
            problems.append(f"rank {rank}: {name}[{lo + bad}] = {got:g}, expected {exp:g} ({what})")
    return problems
