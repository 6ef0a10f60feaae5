"""Routes for every ordered pair, destination based (what the kernel's forwarding does).

Reference: docs/algorithms.md section 4.

- Circulant graphs (TopoOpt rings only, plain ring): "coin change" over Z_n
  (`contract.network.coin_change_first_strides`, shared with `circulant_network`). A BFS from
  offset 0 where each coin is a chosen stride or its negative gives, for every offset r, the
  shortest number of strides summing to r mod n. We keep the FIRST coin of a shortest
  decomposition for every r; a server u forwards a packet for v along
  ``first_stride[(v - u) mod n]``. Because every hop looks up its own remaining offset, the
  routes are destination-consistent and the whole table is n integers.
- Any other graph: shortest paths (scipy's C BFS/Dijkstra), stored as a next-hop table
  ``next_hop[u][v]`` read off the shortest-path tree rooted at each destination v, so it is
  destination-consistent too. Ties prefer ring cables over model-parallel cables (the
  latter weigh 1 + 1e-3), so AllReduce coin-change paths survive in hybrid topologies.
"""

from __future__ import annotations

import numpy as np

from contract.network import coin_change_first_strides

__all__ = ["coin_change_first_strides", "next_hop_table", "hop_counts", "circulant_hop_counts"]


def next_hop_table(nodes: int, cables: list[tuple[int, int]], preferred: int | None = None) -> np.ndarray:
    """Shortest-path next hops; the first ``preferred`` cables win ties (weight 1 vs 1.001)."""
    # scipy here, not at the top: 0.4 s to import, needed only for routing tables
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import shortest_path

    preferred = len(cables) if preferred is None else preferred
    rows, cols, weights = [], [], []
    for i, (a, b) in enumerate(cables):
        w = 1.0 if i < preferred else 1.001
        rows += [a, b]
        cols += [b, a]
        weights += [w, w]
    # Parallel cables: keep the lightest weight per pair (csr would add duplicates).
    best: dict[tuple[int, int], float] = {}
    for r, c, w in zip(rows, cols, weights):
        if r != c and w < best.get((r, c), np.inf):
            best[(r, c)] = w
    keys = list(best)
    graph = csr_matrix(([best[k] for k in keys], ([k[0] for k in keys], [k[1] for k in keys])), shape=(nodes, nodes))
    dist, pred = shortest_path(graph, method="D", directed=False, return_predecessors=True)
    if np.isinf(dist).any():
        raise ValueError("the topology is not connected")
    # pred[v, u] is u's parent in the tree rooted at v, i.e. u's next hop towards v.
    nh = pred.T.astype(np.int32)
    np.fill_diagonal(nh, -1)
    return nh


def hop_counts(next_hop: np.ndarray, servers: int) -> np.ndarray:
    """Hop count between every ordered pair of servers by following ``next_hop``."""
    nodes = next_hop.shape[0]
    hops = np.zeros((nodes, nodes), dtype=np.int32)
    current = np.tile(np.arange(nodes)[:, None], (1, nodes))  # current[u][v]: where u's packet to v is
    target = np.tile(np.arange(nodes)[None, :], (nodes, 1))
    for _ in range(nodes):
        moving = current != target
        if not moving.any():
            break
        hops += moving
        current = np.where(moving, next_hop[current, target], current)
    else:
        raise ValueError("routes contain a loop")
    return hops[:servers, :servers]


def circulant_hop_counts(first_stride: list[int] | tuple[int, ...]) -> np.ndarray:
    """Hop counts of circulant routes: the hops to offset r, arranged as an n x n matrix.

    Every server sees the same offsets, so one walk per offset (vectorized over offsets)
    replaces the n^2 walk of `hop_counts`."""
    n = len(first_stride)
    first = np.asarray(first_stride, dtype=np.int64)
    remaining = np.arange(n)
    dist = np.zeros(n, dtype=np.int32)
    for _ in range(n):
        moving = remaining != 0
        if not moving.any():
            break
        dist += moving
        remaining = np.where(moving, (remaining - first[remaining]) % n, 0)
    else:
        raise ValueError("routes contain a loop")
    u = np.arange(n)[:, None]
    v = np.arange(n)[None, :]
    return dist[(v - u) % n]
