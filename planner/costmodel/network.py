"""The network of a `Plan` as the flow-level cost model sees it: directed links and routes.

Reference: algorithms.md section 1.5. Every cable is full duplex, so each direction is a
serial resource of its own; parallel cables between the same two nodes are merged into one
directed link of their summed capacity (a transfer is spread over them, as a multi-ring
schedule does). Routes are the plan's (``Plan.next_hop``): a transfer from u to v crosses
every link of ``Plan.path(u, v)`` and loads each of them with all its bytes (the forwarding
tax of host-based relaying).

`NetworkModel.loads` turns a set of concurrent flows into bytes per directed link with one
vectorized pass per hop (``hop_links[k][u, v]`` = the link of the k-th hop of u -> v), so
a thousand flows cost a few numpy calls. Ring AllReduce layouts (`ring_unit_loads`) are the
same computation on the ring edges.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from contract.plan import Plan


@dataclass
class NetworkModel:
    """Directed links (capacity in bytes/s) and per-hop link tables of a plan's routes."""

    plan: Plan
    link_id: np.ndarray = field(init=False)  # nodes x nodes, -1 where no cable
    capacity: np.ndarray = field(init=False)  # bytes/s per directed link
    hop_links: list[np.ndarray] = field(init=False)  # per hop k: servers x servers link ids
    hops: np.ndarray = field(init=False)  # servers x servers hop counts

    def __post_init__(self) -> None:
        plan = self.plan
        nodes, n = plan.nodes, plan.servers
        cables: dict[tuple[int, int], float] = {}
        for link in plan.links:
            for a, b in ((link.a, link.b), (link.b, link.a)):
                cables[(a, b)] = cables.get((a, b), 0.0) + link.gbps * 1e9 / 8
        self.link_id = np.full((nodes, nodes), -1, dtype=np.int32)
        keys = sorted(cables)
        for i, (a, b) in enumerate(keys):
            self.link_id[a, b] = i
        self.capacity = np.array([cables[k] for k in keys])
        nh = plan.next_hop
        cur = np.tile(np.arange(n)[:, None], (1, n))
        dst = np.tile(np.arange(n)[None, :], (n, 1))
        self.hops = np.zeros((n, n), dtype=np.int32)
        self.hop_links = []
        for _ in range(nodes):
            moving = cur != dst
            if not moving.any():
                break
            nxt = np.where(moving, nh[cur, dst], cur)
            lid = np.where(moving, self.link_id[cur, nxt], -1)
            if (lid[moving] < 0).any():
                raise ValueError("a route uses a hop without a cable")
            self.hop_links.append(lid.astype(np.int32))
            self.hops += moving
            cur = nxt
        else:
            raise ValueError("routes contain a loop")

    @property
    def servers(self) -> int:
        return self.plan.servers

    @property
    def num_links(self) -> int:
        return len(self.capacity)

    def loads(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
        """Bytes per directed link when every flow (src[i] -> dst[i], nbytes[i]) is routed."""
        out = np.zeros(self.num_links)
        for lid in self.hop_links:
            ids = lid[src, dst]
            mask = ids >= 0
            if not mask.any():
                break
            out += np.bincount(ids[mask], weights=nbytes[mask], minlength=self.num_links)
        return out

    def ring_unit_loads(self, m: int) -> tuple[np.ndarray, int, int, int]:
        """Link loads of ring AllReduce of 1 byte in every group of the layout with step m.

        The groups are the m cosets {s, s+m, ...} of k = n/m members, all reducing at once.
        Rings: the plan's own rings for groups of size k when it has them (TopoOpt's
        ``class_strides``; every stride p gives two rings, +p and -p, each carrying 1/P of
        the data over direct cables); otherwise a ring per group in coset order, used in both
        directions and routed over the plan's paths (multi-hop "coin change" on TopoOpt,
        shortest paths elsewhere), except that a full group (m = 1) on a non-circulant
        direct-connect graph gets up to d/2 greedy tours that prefer unused cables.
        Returns (loads per byte, P rings, max hops of a ring edge, k).
        Each ring edge carries 2 (k-1)/k of the ring's share (reduce-scatter + all-gather).
        """
        n = self.servers
        k = n // m
        strides = [int(p) for p in (self.plan.extra.get("class_strides") or {}).get(str(k), [])]
        if self.plan.topology == "topoopt" and strides:
            orders = []
            for p in strides:
                orders += [("stride", p), ("stride", -p)]
            src = np.concatenate([np.arange(n) for _ in orders])
            dst = np.concatenate([(np.arange(n) + p) % n for _, p in orders])
            rings = len(orders)
        else:
            tours = self._tours(m)
            src_l, dst_l = [], []
            for tour in tours:
                for direction in (1, -1):
                    t = tour if direction == 1 else tour[:, ::-1]
                    src_l.append(t.ravel())
                    dst_l.append(np.roll(t, -1, axis=1).ravel())
            src, dst = np.concatenate(src_l), np.concatenate(dst_l)
            rings = 2 * len(tours)
        share = 2.0 * (k - 1) / k / rings
        loads = self.loads(src, dst, np.full(len(src), share))
        max_hops = int(self.hops[src, dst].max()) if len(src) else 0
        return loads, rings, max_hops, k

    def _tours(self, m: int) -> list[np.ndarray]:
        """Ring orders, one row per coset group (shape: tours x m x k)."""
        n = self.servers
        k = n // m
        base = np.arange(n).reshape(k, m).T  # row s: s, s+m, s+2m, ...
        if m != 1 or self.plan.switches or self.plan.routes.kind == "circulant" or self.plan.degree < 4:
            return [base]
        return [t[None, :] for t in self._greedy_tours(max(1, self.plan.degree // 2))]

    def _greedy_tours(self, count: int) -> list[np.ndarray]:
        """Hamiltonian-ish tours over all servers, each preferring cables no earlier tour
        used (Warnsdorff: go to the unused neighbour with the fewest unvisited neighbours;
        jump to the nearest unvisited server by hop count when stuck)."""
        n = self.servers
        adj: list[list[int]] = [[] for _ in range(n)]
        for link in self.plan.links:
            if link.a < n and link.b < n:
                adj[link.a].append(link.b)
                adj[link.b].append(link.a)
        used: set[tuple[int, int]] = set()
        tours = []
        for _t in range(count):
            visited = np.zeros(n, dtype=bool)
            cur = 0
            visited[0] = True
            order = [0]
            for _ in range(n - 1):
                cands = [v for v in adj[cur] if not visited[v] and (cur, v) not in used]
                if cands:
                    nxt = min(cands, key=lambda v: (sum(not visited[w] for w in adj[v]), v))
                else:
                    dist = np.where(visited, 1 << 30, self.hops[cur])
                    nxt = int(np.argmin(dist))
                used.add((cur, nxt))
                used.add((nxt, cur))
                visited[nxt] = True
                order.append(nxt)
                cur = nxt
            tours.append(np.array(order))
        return tours
