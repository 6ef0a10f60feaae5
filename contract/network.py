"""`Network`: the part of a plan an emulator builds, as plain data.

A network is nodes, cables and destination-based routes, nothing about the job: servers
``0 .. servers-1`` and forwarding switch nodes ``servers .. servers+switches-1``; one `Link`
per physical cable (parallel cables are repeated entries); ``routes`` destination based
(``next_hop[u][v]`` is the neighbour ``u`` forwards to on the way to ``v``, ``-1`` on the
diagonal); ``latency_us`` per hop and ``link_gbps``, the rate a plain link stands for (time
dilation scales every link by the same factor, see ``docs/emulation.md``).

A network may also carry a per-destination bandwidth allocation (``allocation``): for some
ordered server pairs, the paths their traffic is split over and the planned rate of each
(docs/algorithms.md section 4.1). Traffic between such a pair travels on *planes*: plane 0 is
the destination-based route above; plane ``p >= 1`` is ``allocation_of(src, dst).paths[p-1]``,
which the emulator enforces with policy routing (per-plane source addresses and tables) and
per-destination HTB classes. A schedule's send names its plane (`contract.schedule.Op.plane`).

`cable_capacities` turns cables into directed goodput (bytes/s, parallel cables summed) at
an MTU, at the cables' planned rates or at the rates they are emulated at; every model of a
network's capacity (the flow predictor, the cost model, the forest's packing, placement)
starts from it, and so does a built emulated network (its ``capacities``).
`connection_capacities` is what one TCP connection gets where cables run in parallel (one
of them: the flow predictor caps each connection with it).

`Plan.network` is the network of a plan; `circulant_network(n, strides)` builds the
TopoOpt wiring C_n(strides) (cable ``i -- i+s`` for every stride ``s``) with shortest-path
routes stored compactly as per-offset first strides: C_n is vertex transitive, so the route
from ``u`` to ``v`` depends only on the offset ``(v - u) mod n``. The first stride of each
offset is one whose remaining offset is one hop closer (breadth-first distances on the
offsets, `coin_change_first_strides`), so following next hops always arrives and never loops.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from .physics import DEFAULT_MTU, cable_goodput


@dataclass(frozen=True)
class Link:
    """One full-duplex cable between nodes ``a`` and ``b`` of ``gbps`` per direction."""

    a: int
    b: int
    gbps: float


def cable_goodputs(
    links: Iterable[Link], mtu: int = DEFAULT_MTU, rates_bps: Sequence[float] | None = None
) -> dict[tuple[int, int], list[float]]:
    """Directed ``{(a, b): [bytes/s of TCP goodput of each cable from a to b]}`` of ``links``
    at ``mtu`` (``rates_bps``: as in `cable_capacities`); parallel cables are list entries."""
    links = list(links)
    if rates_bps is not None and len(rates_bps) != len(links):
        raise ValueError(f"{len(rates_bps)} rates for {len(links)} cables")
    goodputs: dict[tuple[int, int], list[float]] = {}
    for k, link in enumerate(links):
        goodput = cable_goodput(link.gbps * 1e9 if rates_bps is None else rates_bps[k], mtu)
        for edge in ((link.a, link.b), (link.b, link.a)):
            goodputs.setdefault(edge, []).append(goodput)
    return goodputs


def cable_capacities(
    links: Iterable[Link], mtu: int = DEFAULT_MTU, rates_bps: Sequence[float] | None = None
) -> dict[tuple[int, int], float]:
    """Directed capacities ``{(a, b): bytes/s of TCP goodput}`` of ``links`` at ``mtu``: each
    cable gives both directions its rate, parallel cables add up. ``rates_bps[k]`` is the rate
    cable ``k`` runs at (bit/s: an emulated network's shaped rates); by default each cable's
    planned ``gbps``."""
    return {edge: sum(g) for edge, g in cable_goodputs(links, mtu, rates_bps).items()}


def connection_capacities(
    links: Iterable[Link], mtu: int = DEFAULT_MTU, rates_bps: Sequence[float] | None = None
) -> dict[tuple[int, int], float]:
    """Where parallel cables join two nodes, the most one TCP connection gets from ``a`` to
    ``b``: the fastest of them (``{(a, b): bytes/s}``, only edges of two or more cables). A
    multipath route hashes each connection onto one cable (ports included), so a connection
    never adds the cables up; several connections spread over them."""
    return {edge: max(g) for edge, g in cable_goodputs(links, mtu, rates_bps).items() if len(g) > 1}


@dataclass(frozen=True)
class Routes:
    """Destination-based routes, stored compactly.

    ``kind == "circulant"``: ``first_stride[r]`` is the signed stride a server takes first
    towards the server ``r`` positions ahead (mod n); the next hop of ``u`` towards ``v`` is
    ``u + first_stride[(v - u) mod n]``. ``kind == "table"``: ``table[u][v]`` directly.
    """

    kind: str
    first_stride: tuple[int, ...] = ()
    table: tuple[tuple[int, ...], ...] = ()


def next_hop_array(routes: Routes, nodes: int) -> np.ndarray:
    """Materialize the ``nodes x nodes`` next-hop table of ``routes``."""
    if routes.kind == "circulant":
        n = len(routes.first_stride)
        first = np.asarray(routes.first_stride, dtype=np.int64)
        u = np.arange(n)[:, None]
        v = np.arange(n)[None, :]
        nh: np.ndarray = ((u + first[(v - u) % n]) % n).astype(np.int32)
        np.fill_diagonal(nh, -1)
        return nh
    if routes.kind == "table":
        arr = np.asarray(routes.table, dtype=np.int32)
        if arr.shape != (nodes, nodes):
            raise ValueError(f"route table is {arr.shape}, expected {(nodes, nodes)}")
        return arr
    raise ValueError(f"unknown routes kind {routes.kind!r}")


@dataclass(frozen=True)
class PathShare:
    """One path of a pair's traffic: the node sequence (source and destination included)
    and the planned rate on it, in Gbit/s of the real network."""

    path: tuple[int, ...]
    gbps: float


@dataclass(frozen=True)
class PairAllocation:
    """The per-destination allocation of one ordered pair: its planes 1..len(paths)."""

    src: int
    dst: int
    paths: tuple[PathShare, ...]

    @property
    def gbps(self) -> float:
        """The pair's total planned rate over all its paths."""
        return sum(share.gbps for share in self.paths)


@dataclass(frozen=True)
class Network:
    """Nodes, cables and routes of one network (what an emulator builds)."""

    servers: int
    switches: int
    links: tuple[Link, ...]
    routes: Routes
    latency_us: float
    link_gbps: float
    allocation: tuple[PairAllocation, ...] = ()

    @property
    def nodes(self) -> int:
        return self.servers + self.switches

    @cached_property
    def _allocation_by_pair(self) -> dict[tuple[int, int], PairAllocation]:
        return {(pair.src, pair.dst): pair for pair in self.allocation}

    def allocation_of(self, src: int, dst: int) -> PairAllocation | None:
        """The allocation of the ordered pair, or None when it uses plane 0 only."""
        return self._allocation_by_pair.get((src, dst))

    @property
    def planes(self) -> int:
        """The largest plane number any pair uses (0: no allocation, routes only)."""
        return max((len(pair.paths) for pair in self.allocation), default=0)

    def plane_path(self, src: int, dst: int, plane: int) -> list[int]:
        """The node sequence of ``plane`` from ``src`` to ``dst`` (plane 0: `path`)."""
        if plane == 0:
            return self.path(src, dst)
        pair = self.allocation_of(src, dst)
        if pair is None or not 1 <= plane <= len(pair.paths):
            raise ValueError(f"no plane {plane} from {src} to {dst}")
        return list(pair.paths[plane - 1].path)

    @cached_property
    def next_hop(self) -> npt.NDArray[np.int32]:
        """``nodes x nodes`` int32 array of next hops (-1 on the diagonal)."""
        return np.asarray(next_hop_array(self.routes, self.nodes), dtype=np.int32)

    def path(self, src: int, dst: int) -> list[int]:
        """The node sequence a packet from ``src`` to ``dst`` follows, both ends included."""
        nh = self.next_hop
        path = [src]
        while path[-1] != dst:
            nxt = int(nh[path[-1], dst])
            if nxt < 0 or len(path) > self.nodes:
                raise ValueError(f"no route from {src} to {dst}")
            path.append(nxt)
        return path

    def capacities(self, mtu: int = DEFAULT_MTU) -> dict[tuple[int, int], float]:
        """Directed goodput of the cables at their planned rates (`cable_capacities`)."""
        return cable_capacities(self.links, mtu)

    def neighbours(self, node: int) -> list[int]:
        """Nodes cabled to ``node``, one entry per cable."""
        out = []
        for link in self.links:
            if link.a == node:
                out.append(link.b)
            elif link.b == node:
                out.append(link.a)
        return out


def coin_change_first_strides(n: int, strides: list[int]) -> list[int]:
    """``first[r]``: the signed stride that starts a shortest path to offset r (0 for r=0).

    "Coin change" over Z_n: a breadth-first search from offset 0 whose coins are the strides
    and their negatives (smallest magnitude first) gives every offset its fewest strides; the
    first coin of that decomposition is kept. Every hop looks up its own remaining offset, so
    the routes are destination-consistent and the whole table is n integers."""
    coins = sorted({c for p in strides for c in (p % n, -p % n) if c}, key=lambda c: (min(c, n - c), c))
    signed = {c: (c if c <= n // 2 else c - n) for c in coins}
    dist = [-1] * n
    first = [0] * n
    dist[0] = 0
    queue = deque([0])
    while queue:
        r = queue.popleft()
        for c in coins:
            nxt = (r + c) % n
            if dist[nxt] < 0:
                dist[nxt] = dist[r] + 1
                first[nxt] = signed[c] if r == 0 else first[r]
                queue.append(nxt)
    if min(dist) < 0:
        raise ValueError(f"strides {strides} do not generate Z_{n}: the rings are not connected")
    return first


def circulant_network(n: int, strides: tuple[int, ...], link_gbps: float = 25.0, latency_us: float = 1.0) -> Network:
    """C_n(strides) with shortest-path routes: one cable ``i -- i+s`` per server and stride."""
    if n < 2 or not strides or any(not 0 < s < n for s in strides):
        raise ValueError(f"circulant network C_{n}{strides}: need n >= 2 and strides in 1..n-1")
    links = tuple(Link(i, (i + s) % n, link_gbps) for s in strides for i in range(n))
    first_stride = coin_change_first_strides(n, list(strides))
    return Network(
        servers=n,
        switches=0,
        links=links,
        routes=Routes(kind="circulant", first_stride=tuple(first_stride)),
        latency_us=latency_us,
        link_gbps=link_gbps,
    )
