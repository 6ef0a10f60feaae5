"""Baseline topologies TopoOpt is compared with (algorithms.md section 1.6).

- ideal switch: every server has one port of ``switch_gbps`` (by default d x B, the same
  total bandwidth as its d direct-connect interfaces) into one non-blocking switch;
- random d-regular expander (seeded, re-drawn until connected), shortest-path routing;
- 2-D torus (a x b, as square as n allows), degree 4;
- ring: d/2 parallel +1 rings (degree d).
Each returns cables as (a, b) pairs; the switch is node n.
"""

from __future__ import annotations

import networkx as nx


def switch_cables(n: int) -> list[tuple[int, int]]:
    return [(i, n) for i in range(n)]


def expander_cables(n: int, d: int, seed: int) -> tuple[list[tuple[int, int]], int]:
    """A connected random d-regular graph; returns (cables, seed actually used)."""
    for attempt in range(100):
        graph = nx.random_regular_graph(d, n, seed=seed + attempt)
        if nx.is_connected(graph):
            return sorted((min(a, b), max(a, b)) for a, b in graph.edges()), seed + attempt
    raise ValueError(f"no connected {d}-regular graph on {n} nodes found in 100 draws")


def torus_cables(a: int, b: int) -> list[tuple[int, int]]:
    """Wrap-around a x b grid; server (i, j) is i * b + j."""
    cables = []
    for i in range(a):
        for j in range(b):
            u = i * b + j
            cables.append((u, i * b + (j + 1) % b))
            cables.append((u, ((i + 1) % a) * b + j))
    return cables


def ring_cables(n: int, d: int) -> list[tuple[int, int]]:
    return [(i, (i + 1) % n) for _ in range(d // 2) for i in range(n)]
