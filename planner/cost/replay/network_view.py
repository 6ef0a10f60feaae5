"""The network as the flow-level replays see it: directed links with their goodput, the
route of every connection, the per-hop latency and what each rank pays per op.

`plan_network` reads it off a plan. A cable of ``r`` bit/s carries, in each direction, the
TCP goodput at the MTU ``m`` (`contract.physics.cable_goodput`: 52 bytes of TCP/IPv4
headers in every packet, 14 of Ethernet beside it)::

    goodput = r / 8 * (m - 52) / (m + 14)      bytes/s

Parallel cables between two nodes add up into one directed link
(`contract.network.cable_capacities`), but one connection gets at most one of them (a
multipath route hashes it onto one cable: `contract.network.connection_capacities`, kept in
`Network.connection_cap`). A pair with a per-destination allocation (docs/algorithms.md
section 4.1) sends plane ``p >= 1`` along the allocation's p-th path at its assured rate
(`Network.assured`, the emulator's per-destination HTB class). The replays take every
number in the network's own time unit: emulated link rates give an emulated run's times.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from contract.emulation import EmulatedRates
from contract.network import cable_capacities, connection_capacities
from contract.physics import DEFAULT_MTU, REDUCE_BYTES_PER_S, cable_goodput


@dataclass
class Network:
    """Directed link capacities (bytes/s of goodput), routes and per-hop latency."""

    capacity: dict[tuple[int, int], float]
    path: Callable[[int, int], list[int]]
    alpha_s: float = 0.0
    reduce_bytes_per_s: float = REDUCE_BYTES_PER_S
    op_overhead_s: float = 0.0
    reduce_cap_bytes: float = float("inf")
    servers: int | None = None  # nodes >= servers are switches: crossing them is not relaying
    plane_path: Callable[[int, int, int], list[int]] | None = None  # planes >= 1 (allocated paths)
    assured: dict[tuple[int, int, int], float] = field(default_factory=dict)  # (src, dst, plane) -> bytes/s
    # directed links of parallel cables: the most one connection gets (one cable's goodput)
    connection_cap: dict[tuple[int, int], float] = field(default_factory=dict)
    # processors the ranks share (None: each rank has its own); with them, ``op_overhead_s``
    # is an op's processor time on one of them (the event replay's shared processors)
    cores: int | None = None
    _paths: dict[tuple[int, int, int], list[tuple[int, int]]] = field(default_factory=dict, repr=False)

    def connection_limit(self, path: list[tuple[int, int]]) -> float | None:
        """The most one connection along ``path`` gets where it crosses parallel cables
        (one cable's goodput, `connection_cap`), when that is below its links' capacities;
        else None."""
        caps = [self.connection_cap[link] for link in path if link in self.connection_cap]
        if not caps:
            return None
        limit = min(caps)
        return limit if limit < min(self.capacity[link] for link in path) else None

    def links(self, src: int, dst: int, plane: int = 0) -> list[tuple[int, int]]:
        key = (src, dst, plane)
        if key not in self._paths:
            if plane and self.plane_path is None:
                raise ValueError(f"a send from {src} to {dst} on plane {plane}, but the network has no allocation")
            nodes = self.plane_path(src, dst, plane) if plane and self.plane_path else self.path(src, dst)
            self._paths[key] = list(zip(nodes, nodes[1:]))
        return self._paths[key]


def plan_network(
    plan,
    link_bps: float | None = None,
    mtu: int = DEFAULT_MTU,
    alpha_s: float | None = None,
    reduce_bytes_per_s: float = REDUCE_BYTES_PER_S,
    op_overhead_s: float = 0.0,
    reduce_cap_bytes: float = float("inf"),
    destination_classes: bool = True,
    rates: EmulatedRates | None = None,
    cores: int | None = None,
) -> Network:
    """A `Network` for ``plan``: each cable gives both directions its goodput, parallel
    cables add up (`contract.network.cable_capacities`), and one connection gets one of them
    (`contract.network.connection_capacities`). ``rates``: the cables as an emulated
    network runs them (`contract.emulation.EmulatedRates`: its rates and its MTU, which
    replaces ``mtu``); ``link_bps`` is the shorthand for a plan link of ``plan.link_gbps``
    emulated at ``link_bps``; by default the plan's own rates are used.
    ``destination_classes`` off: an allocation's planes are routed but their rates are not
    assured (the emulator's ``destination_classes = False``). ``cores``: the processors all
    ranks share (`Network.cores`; None: one each)."""
    if rates is None and link_bps is not None:
        rates = EmulatedRates(plan.link_gbps, link_bps / 1e6, mtu)
    cap = cable_capacities(plan.links, mtu) if rates is None else rates.capacities(plan.links)
    per_connection = (
        connection_capacities(plan.links, mtu) if rates is None else rates.connection_capacities(plan.links)
    )

    def assured_of(gbps: float) -> float:  # bytes/s of goodput of an allocated path's rate
        return cable_goodput(gbps * 1e9, mtu) if rates is None else rates.goodput(gbps)

    alpha = plan.latency_us * 1e-6 if alpha_s is None else alpha_s
    network = plan.network
    assured = {
        (pair.src, pair.dst, plane): assured_of(share.gbps)
        for pair in network.allocation
        for plane, share in enumerate(pair.paths, start=1)
        if destination_classes
    }
    return Network(
        dict(cap),
        plan.path,
        alpha,
        reduce_bytes_per_s,
        op_overhead_s,
        reduce_cap_bytes,
        servers=plan.servers,
        plane_path=network.plane_path if network.allocation else None,
        assured=assured,
        connection_cap=per_connection,
        cores=cores,
    )
