"""Baseline topologies TopoOpt is compared with (docs/algorithms.md section 8).

- ideal switch: every server has one port of ``switch_gbps`` (by default d x B, the same
  total bandwidth as its d direct-connect interfaces) into one non-blocking switch;
- random d-regular expander (seeded, re-drawn until connected), shortest-path routing;
- 2-D torus (a x b, as square as n allows), degree 4;
- ring: d/2 parallel +1 rings (degree d).
Each returns cables as (a, b) pairs; the switch is node n.
"""

from __future__ import annotations


def switch_cables(n: int) -> list[tuple[int, int]]:
    return [(i, n) for i in range(n)]


def expander_cables(n: int, d: int, seed: int) -> tuple[list[tuple[int, int]], int]:
    """A connected random d-regular graph; returns (cables, seed actually used)."""
    import networkx as nx  # here, not at the top: 0.3 s to import, needed only for expanders

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


def ring_order(n: int, cables: list[tuple[int, int]], budget: int = 200_000) -> list[int]:
    """A Hamiltonian cycle over the cables if one is found within ``budget`` steps, so a
    ring AllReduce on a baseline topology needs no relaying; otherwise a greedy order that
    keeps as many consecutive members adjacent as it can.

    Depth-first search with Warnsdorff's rule (visit the neighbour with the fewest unvisited
    neighbours first), which finds cycles in random regular graphs and tori quickly."""
    adj: dict[int, set[int]] = {v: set() for v in range(n)}
    for a, b in cables:
        if a != b and a < n and b < n:
            adj[a].add(b)
            adj[b].add(a)
    path = [0]
    on_path = {0}
    steps = 0
    stack = [iter(sorted(adj[0], key=lambda w: len(adj[w])))]
    while stack and steps < budget:
        steps += 1
        nxt = next(stack[-1], None)
        if nxt is None:
            stack.pop()
            on_path.discard(path.pop())
            continue
        if nxt in on_path:
            continue
        path.append(nxt)
        on_path.add(nxt)
        if len(path) == n:
            if 0 in adj[nxt]:
                return path
            on_path.discard(path.pop())
            continue
        stack.append(iter(sorted(adj[nxt] - on_path, key=lambda w: (len(adj[w] - on_path), w))))
    # greedy fallback: nearest unvisited neighbour, else the smallest unvisited server
    order, seen = [0], {0}
    while len(order) < n:
        options = sorted(adj[order[-1]] - seen) or sorted(set(range(n)) - seen)
        order.append(options[0])
        seen.add(options[0])
    return order
