"""Make a multigraph connected without changing any node's degree.

TopoOpt's released code stubs this step out (docs/algorithms.md section 2, step 6); the planner
guarantees it with degree-preserving 2-swaps: for two components X and Y take a cable (a, b)
in X and (c, e) in Y and rewire them as (a, c), (b, e). Each swap merges two components and
keeps every server's interface count, so the result is still d-regular. Model-parallel
cables are rewired before ring cables, since the rings carry the AllReduce schedule.
A connected graph on n servers needs n - 1 cables, so degree 1 (a perfect matching, n/2
cables) can never be connected: `connect` rejects it with `UnconnectableDegreeError`.
"""

from __future__ import annotations

from contract.errors import UsageError


class UnconnectableDegreeError(UsageError):
    """Too few cables for any connected graph (degree 1)."""


def components(n: int, cables: list[tuple[int, int]]) -> list[set[int]]:
    """Connected components, in order of their smallest node (breadth-first search; plain
    lists rather than networkx, whose import alone costs 0.3 s of every `topolab plan`)."""
    adjacent: list[list[int]] = [[] for _ in range(n)]
    for a, b in cables:
        adjacent[a].append(b)
        adjacent[b].append(a)
    seen = [False] * n
    out: list[set[int]] = []
    for start in range(n):
        if seen[start]:
            continue
        seen[start] = True
        comp, frontier = {start}, [start]
        while frontier:
            nxt = []
            for u in frontier:
                for v in adjacent[u]:
                    if not seen[v]:
                        seen[v] = True
                        comp.add(v)
                        nxt.append(v)
            frontier = nxt
        out.append(comp)
    return out


def connect(n: int, cables: list[tuple[int, int]], protected: int = 0) -> tuple[list[tuple[int, int]], int]:
    """Return (cables, swaps): ``cables`` made connected by 2-swaps.

    The first ``protected`` cables (ring cables) are only touched when a component has no
    other cable. Raises ValueError when a component has no cable at all (degree 0)."""
    cables = list(cables)
    if n > 1 and len(cables) < n - 1:
        degree = 2 * len(cables) / n
        raise UnconnectableDegreeError(
            f"cluster.degree {degree:g}: {n} servers need at least {n - 1} cables to be connected, "
            f"degree {degree:g} gives {len(cables)}; use degree >= 2"
        )
    swaps = 0
    while True:
        comps = components(n, cables)
        if len(comps) == 1:
            return cables, swaps
        first, second = comps[0], comps[1]

        def pick(comp: set[int]) -> int:
            idx = [i for i, (a, _) in enumerate(cables) if a in comp]
            if not idx:
                raise ValueError("a server has no cable; the topology cannot be connected")
            unprotected = [i for i in idx if i >= protected]
            return (unprotected or idx)[-1]

        i, j = pick(first), pick(second)
        (a, b), (c, e) = cables[i], cables[j]
        cables[i], cables[j] = (a, c), (b, e)
        swaps += 1
