"""The network of a `Plan` as the flow-level cost model sees it: directed links and routes.

Links carry TCP goodput (`contract.network.cable_capacities`), as in `planner.predict`.

Reference: docs/algorithms.md section 6. Every cable is full duplex, so each direction is a
serial resource of its own; parallel cables between the same two nodes are merged into one
directed link of their summed capacity (a transfer is spread over them, as a multi-ring
schedule does). Routes are the plan's (``Plan.next_hop``): a transfer from u to v crosses
every link of ``Plan.path(u, v)`` and loads each of them with all its bytes (the forwarding
tax of host-based relaying).

`NetworkModel.loads` turns a set of concurrent flows into bytes per directed link with one
vectorized pass per hop (``hop_links[k][u, v]`` = the link of the k-th hop of u -> v), so
a thousand flows cost a few numpy calls. Ring AllReduce layouts (`ring_unit_loads`) are the
same computation on the ring edges the workers use.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from contract.network import cable_capacities
from contract.physics import DEFAULT_MTU
from contract.plan import Plan

from ..collectives.from_plan import group_rings


@dataclass
class NetworkModel:
    """Directed links (capacity in bytes/s) and per-hop link tables of a plan's routes."""

    plan: Plan
    mtu: int = DEFAULT_MTU  # links carry TCP goodput at this MTU, as planner.predict assumes
    link_id: np.ndarray = field(init=False)  # nodes x nodes, -1 where no cable
    capacity: np.ndarray = field(init=False)  # bytes/s per directed link
    hop_links: list[np.ndarray] = field(init=False)  # per hop k: servers x servers link ids
    hops: np.ndarray = field(init=False)  # servers x servers hop counts

    def __post_init__(self) -> None:
        plan = self.plan
        nodes, n = plan.nodes, plan.servers
        cables = cable_capacities(plan.links, self.mtu)
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

        The groups are the m cosets {s, s+m, ...} of k = n/m members, all reducing at once,
        on the rings the workers run (`planner.collectives.from_plan.group_rings`: TopoOpt's
        stride rings, else the plan's ring order, both directions; one ring through a
        switch), each ring edge routed over the plan's paths.
        Returns (loads per byte, P rings per group, max hops of a ring edge, k).
        Each ring edge carries 2 (k-1)/k of the ring's share (reduce-scatter + all-gather).
        """
        k = self.servers // m
        groups = group_rings(self.plan, k)
        src = np.array([r for rings in groups for ring in rings for r in ring], dtype=np.int64)
        dst = np.array([r for rings in groups for ring in rings for r in np.roll(ring, -1)], dtype=np.int64)
        rings = len(groups[0])
        share = 2.0 * (k - 1) / k / rings
        loads = self.loads(src, dst, np.full(len(src), share))
        max_hops = int(self.hops[src, dst].max()) if len(src) else 0
        return loads, rings, max_hops, k
