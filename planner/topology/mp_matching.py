"""Model-parallel sub-topology: rounds of maximum-weight matching with demand damping.

Reference: TopoOpt section 4 / docs/algorithms.md section 3. Each of the d_MP rounds
finds a maximum-weight matching (Edmonds' Blossom algorithm, networkx.max_weight_matching)
on the remaining symmetric MP demand and adds one cable per matched pair; that pair's
demand is then scaled by c / (c + 1), where c is the number of cables it now has, so later
rounds favour other pairs. An odd n leaves one server unmatched per round.
"""

from __future__ import annotations

from contract.plan import MPFlow


def symmetric_demand(flows: tuple[MPFlow, ...]) -> dict[tuple[int, int], float]:
    """Bytes per unordered pair (i < j), both directions added."""
    demand: dict[tuple[int, int], float] = {}
    for f in flows:
        if f.src == f.dst:
            continue
        key = (min(f.src, f.dst), max(f.src, f.dst))
        demand[key] = demand.get(key, 0.0) + f.bytes
    return demand


def mp_matching_cables(flows: tuple[MPFlow, ...], rounds: int) -> list[tuple[int, int]]:
    """Cables of ``rounds`` damped maximum-weight matching rounds over the MP demand."""
    import networkx as nx  # here, not at the top: 0.3 s to import, needed only for matchings

    remaining = symmetric_demand(flows)
    cables: dict[tuple[int, int], int] = {}
    out: list[tuple[int, int]] = []
    for _ in range(rounds):
        graph = nx.Graph()
        graph.add_weighted_edges_from((a, b, w) for (a, b), w in remaining.items() if w > 0)
        matching = nx.max_weight_matching(graph, maxcardinality=True)
        if not matching:
            break
        for a, b in sorted((min(e), max(e)) for e in matching):
            out.append((a, b))
            c = cables.get((a, b), 0) + 1
            cables[(a, b)] = c
            remaining[(a, b)] *= c / (c + 1)
    return out


def fill_free_ports(
    n: int, d: int, cables: list[tuple[int, int]], demand: dict[tuple[int, int], float] | None = None
) -> list[tuple[int, int]]:
    """Extra cables that use interfaces the matching rounds left free.

    When MP demand touches only a few servers (e.g. a handful of embedding-table owners),
    the matchings cannot fill every server's d_MP ports. Unused ports are wasted bandwidth
    in a patch-panel cluster, so the remaining free ports are paired up by further
    maximum-cardinality matchings, preferring pairs with residual demand and then pairs
    that are not yet cabled. Returns only the new cables."""
    import networkx as nx  # here, not at the top: 0.3 s to import, needed only for matchings

    demand = demand or {}
    used = [0] * n
    cabled: set[tuple[int, int]] = set()
    for a, b in cables:
        used[a] += 1
        used[b] += 1
        cabled.add((min(a, b), max(a, b)))
    extra: list[tuple[int, int]] = []
    while True:
        free = [v for v in range(n) if used[v] < d]
        if len(free) < 2:
            return extra
        graph = nx.Graph()
        for i, a in enumerate(free):
            for b in free[i + 1 :]:
                graph.add_edge(a, b, weight=1.0 + demand.get((a, b), 0.0) + (0.5 if (a, b) not in cabled else 0.0))
        matching = nx.max_weight_matching(graph, maxcardinality=True)
        if not matching:
            return extra
        for a, b in sorted((min(e), max(e)) for e in matching):
            extra.append((a, b))
            cabled.add((a, b))
            used[a] += 1
            used[b] += 1


def absorb_free_ports(n: int, d: int, fixed: list[tuple[int, int]], mp: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``mp`` rewired so that no server keeps two or more free ports.

    Matchings pair free ports of *different* servers, so with an odd n one server can be left
    over with free ports in several rounds (n = 5, d_MP = 2: the same server unmatched twice).
    Each pair of its free ports is used by splitting one model-parallel cable (u, v) that does
    not touch it into (u, x) and (x, v): u and v keep their degree and x gains two. Afterwards
    at most one port in the whole network is unused, and exactly one when n * d is odd (a
    d-regular graph on n nodes needs n * d even). Ring cables (``fixed``) are never split."""
    mp = list(mp)
    used = [0] * n
    for a, b in fixed + mp:
        used[a] += 1
        used[b] += 1
    for x in range(n):
        while d - used[x] >= 2:
            # prefer the cable between the pair with the most cables (the least useful one)
            counts: dict[tuple[int, int], int] = {}
            for a, b in mp:
                counts[(min(a, b), max(a, b))] = counts.get((min(a, b), max(a, b)), 0) + 1
            options = [i for i, (a, b) in enumerate(mp) if x not in (a, b)]
            if not options:
                break
            i = max(options, key=lambda i: (counts[(min(mp[i]), max(mp[i]))], i))
            u, v = mp.pop(i)
            mp += [(min(u, x), max(u, x)), (min(x, v), max(x, v))]
            used[x] += 2
    return mp
