"""The network of a `Plan` as the flow-level cost model sees it: directed links and routes.

Links carry TCP goodput (`contract.network.cable_capacities`), as in `planner.cost.predict`.

Reference: docs/algorithms.md section 6. Every cable is full duplex, so each direction is a
serial resource of its own; parallel cables between the same two nodes are merged into one
directed link of their summed capacity (a transfer is spread over them, as a multi-ring
schedule does). Routes are the plan's (``Plan.next_hop``): a transfer from u to v crosses
every link of ``Plan.path(u, v)`` and loads each of them with all its bytes (the forwarding
tax of host-based relaying).

`NetworkModel.loads` turns a set of concurrent flows into bytes per directed link with one
vectorized pass per hop (``hop_links[k][u, v]`` = the link of the k-th hop of u -> v), so
a thousand flows cost a few numpy calls. AllReduce layouts (`allreduce_unit_loads`) are the
same computation on the rings or trees the workers use (`planner.collectives.from_plan`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from contract.network import cable_capacities
from contract.physics import DEFAULT_MTU
from contract.plan import Plan

from ...collectives.from_plan import AllReduceChoice, choose_allreduce

FOREST_SHARE_BYTES = 64 << 20  # any size: a forest's trees share it in proportion to their rates


@dataclass(frozen=True)
class AllReduceLoads:
    """What an AllReduce of 1 byte per group puts on the links (`NetworkModel.allreduce_unit_loads`)."""

    loads: np.ndarray  # bytes per directed link
    steps: int  # message steps on the critical path
    hops: int  # most hops one step's message crosses (each pays alpha)
    paths: int  # rings or trees per group, run at once
    group_size: int
    algorithm: str  # as `planner.collectives.from_plan.AllReduceChoice.algorithm`


@dataclass
class NetworkModel:
    """Directed links (capacity in bytes/s) and per-hop link tables of a plan's routes."""

    plan: Plan
    mtu: int = DEFAULT_MTU  # links carry TCP goodput at this MTU, as planner.cost.predict assumes
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

    def allreduce_unit_loads(self, m: int) -> AllReduceLoads:
        """Link loads of the AllReduce of 1 byte in every group of the layout with step m.

        The groups are the m cosets {s, s+m, ...} of k = n/m members, all reducing at once,
        with the AllReduce the workers run for that group size
        (`planner.collectives.from_plan.choose_allreduce`):

        - rings (TopoOpt's stride rings, else the plan's ring order, both directions; one
          ring through a switch): each ring edge, routed over the plan's paths, carries
          2 (k-1)/k of its ring's share of the byte (reduce-scatter + all-gather), the shares
          in proportion to the rings' weights (equal on uniform cables); 2 (k-1) steps of at
          most ``hops`` hops each;
        - the forest's trees: each tree edge (a cable) carries the tree's share in both
          directions (reduce up, broadcast down); 2 x height steps of one hop.

        The hierarchical AllReduce is not modelled (the search does not plan hierarchical
        networks): a `ValueError`."""
        k = self.servers // m
        choice = choose_allreduce(self.plan, FOREST_SHARE_BYTES, k)
        if choice.algorithm == "hierarchical":
            raise ValueError("the cost model does not model the hierarchical AllReduce")
        if choice.trees is not None:
            return self._tree_loads(choice)
        src: list[int] = []
        dst: list[int] = []
        share: list[float] = []
        for rings, weights in zip(choice.rings, choice.weights):
            w = weights or (1.0,) * len(rings)
            for ring, wr in zip(rings, w):
                src += ring
                dst += ring[1:] + ring[:1]
                share += [2.0 * (k - 1) / k * wr / sum(w)] * len(ring)
        s, d = np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64)
        loads = self.loads(s, d, np.array(share))
        max_hops = int(self.hops[s, d].max()) if len(s) else 0
        return AllReduceLoads(loads, 2 * (k - 1), max_hops, len(choice.rings[0]), k, choice.algorithm)

    def _tree_loads(self, choice: AllReduceChoice) -> AllReduceLoads:
        trees = choice.trees or ()
        total = sum(t.length for t in trees)
        loads = np.zeros(self.num_links)
        height = 0
        for tree in trees:
            for v, parent in tree.parent.items():
                if parent >= 0:
                    loads[self.link_id[v, parent]] += tree.length / total
                    loads[self.link_id[parent, v]] += tree.length / total
            height = max(height, max(_depth(tree.parent, v) for v in tree.parent))
        return AllReduceLoads(loads, 2 * height, 1, len(trees), choice.group_size, choice.algorithm)


def _depth(parent: dict[int, int], v: int) -> int:
    depth = 0
    while parent[v] >= 0:
        v, depth = parent[v], depth + 1
    return depth
