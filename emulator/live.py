"""Live changes to a running emulated network: a cable down or up, a new rate, new routes.

What a cable failure is on real hardware, done to the real kernel objects (docs/emulation.md
section 5):
- **down** (`LiveChanges.cable_down`): both veth ends administratively down, one netlink
  request in each end's namespace. The kernel then drops every IPv4 route through those
  interfaces (their next hop is dead), so traffic towards the dead cable fails at once
  ("Network is unreachable") until routes are replaced: as on a real fabric, a dead cable
  with nothing rerouted partitions the flows that used it.
- **up** (`LiveChanges.cable_up`): both ends up again, each with its permanent neighbour
  entry for the other end (the link's going down flushed it); the kernel re-adds the cable's
  connected /31 without our congestion control, and the routes it dropped stay dropped, so
  both end hosts get their connected routes and every /32 route re-installed from the
  current next-hop table (replace semantics: existing routes are overwritten), with their
  plane routes (`emulator.planes`: a plane whose cable is down uses the main table meanwhile).
- **rate** (`LiveChanges.set_cable_rate`): ``tc class change`` of the HTB class on both ends
  (queues and any netem leaf stay), then read back like the build's shaping.
- **routes** (`LiveChanges.replace_routes`): every host's /32 routes replaced from a new
  next-hop table, one netlink batch per host; a route whose next hop is reachable only over
  dead cables is refused with one line naming the host, the destination and the cable.

Every request is acknowledged and bounded (`emulator.nlbatch`); errors are `EmulationError`.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import numpy as np

from . import nlbatch, nsutil, shaping
from .addressing import Port
from .errors import EmulationError
from .hostconfig import CUBIC, apply_qdiscs, check_qdiscs, peer_neighbour, send_routes

CONNECTED_SEQ_BASE = 50_000
"""Netlink sequence numbers of the connected-route requests (below `ROUTE_SEQ_BASE`)."""


class LiveChanges:
    """The live-change interface of one running `EmulatedNetwork` (``net.live``)."""

    def __init__(self, net: Any):  # the `emulator.net.EmulatedNetwork` it belongs to
        self.net = net
        self.dead: set[int] = set()
        self._next_hop: np.ndarray | None = None

    # ---- queries ---------------------------------------------------------------------
    @property
    def next_hop(self) -> np.ndarray:
        """The next-hop table the hosts' routes follow now."""
        return self.net.network.next_hop if self._next_hop is None else self._next_hop

    def cable_between(self, a: int, b: int) -> int:
        """Index of the first cable joining nodes ``a`` and ``b``; `EmulationError` if none."""
        for k, link in enumerate(self.net.network.links):
            if a != b and {link.a, link.b} == {a, b}:
                return k
        name = self.net.host_name
        raise EmulationError(f"no cable between {name(a)} and {name(b)}")

    def cable_name(self, k: int) -> str:
        link = self.net.network.links[k]
        return f"{self.net.host_name(link.a)}-{self.net.host_name(link.b)}"

    def ends(self, k: int) -> list[tuple[int, Port]]:
        """Both ends of cable ``k``: (node, its port)."""
        if not 0 <= k < len(self.net.network.links):
            raise EmulationError(f"no cable {k} (the network has {len(self.net.network.links)})")
        link = self.net.network.links[k]
        return [(u, next(p for p in self.net.ports[u] if p.link == k)) for u in (link.a, link.b)]

    # ---- changes ---------------------------------------------------------------------
    def cable_down(self, k: int) -> None:
        """Take cable ``k`` down, both ends."""
        self._set_state(k, up=False)
        self.dead.add(k)

    def cable_up(self, k: int) -> None:
        """Bring cable ``k`` back, both ends, with its routes (module docstring)."""
        self._set_state(k, up=True)
        self.dead.discard(k)
        for u, _port in self.ends(k):
            self._install_routes(u, self.next_hop)

    def set_cable_rate(self, k: int, rate_bps: int) -> None:
        """Shape cable ``k`` at ``rate_bps`` on both ends (HTB class change), read back."""
        if rate_bps <= 0:
            raise EmulationError(f"cable {self.cable_name(k)}: rate must be positive, got {rate_bps}")
        self._require_up()
        old = self.net.link_rate_bps[k]
        self.net.link_rate_bps[k] = int(rate_bps)
        try:
            work = [
                (self.net.hosts[u], [s for s in self.net.shaping_of(u, 0.0) if s.ifname == p.ifname])
                for u, p in self.ends(k)
            ]
            apply_qdiscs(work, False, render=shaping.tc_rate_change)
            check_qdiscs(work, False)
        except BaseException:
            self.net.link_rate_bps[k] = old
            raise

    def replace_routes(self, next_hop: np.ndarray) -> None:
        """Replace every host's routes by those of ``next_hop`` (nodes x nodes)."""
        table = np.asarray(next_hop, dtype=np.int32)
        if table.shape != (self.net.nodes, self.net.nodes):
            raise EmulationError(f"next-hop table of shape {table.shape}, expected {self.net.nodes} x {self.net.nodes}")
        for u in range(self.net.nodes):
            self._install_routes(u, table)
        self._next_hop = table

    # ---- netlink ---------------------------------------------------------------------
    def _require_up(self) -> None:
        if not self.net.running:
            raise EmulationError("live change on a network that is not up")

    def _set_state(self, k: int, up: bool) -> None:
        self._require_up()
        for u, port in self.ends(k):
            host = self.net.hosts[u]
            with nsutil.in_netns_of(host.pid):
                index = socket.if_nametoindex(port.ifname)
                label = f"{host.name}: {port.ifname} {'up' if up else 'down'}"
                data, labels = nlbatch.link_up(1, index, up), {1: label}
                if up:  # a link that went down lost its neighbour entry
                    data += peer_neighbour(2, index, port)
                    labels[2] = f"{host.name}: neighbour {port.peer_address} on {port.ifname}"
                nlbatch.send(data, labels=labels)

    def _install_routes(self, u: int, next_hop: np.ndarray) -> None:
        """Connected routes of ``u``'s live cables and its /32 routes, replaced in one batch
        (multipath routes over parallel cables in a second one)."""
        self._require_up()
        net, host = self.net, self.net.hosts[u]
        live = [p for p in net.ports[u] if p.link not in self.dead]
        data, labels = bytearray(), {}
        with nsutil.in_netns_of(host.pid):
            index = {p.ifname: socket.if_nametoindex(p.ifname) for p in live}
            for j, p in enumerate(live):
                subnet = str(ipaddress.ip_network(f"{p.address}/31", strict=False).network_address)
                seq = CONNECTED_SEQ_BASE + j
                data += nlbatch.connected_route(seq, subnet, 31, index[p.ifname], p.address, CUBIC)
                labels[seq] = f"{host.name}: connected route of {p.ifname}"
            send_routes(host, u, live, next_hop, index, net.host_name, data, labels, replace=True, planes=net.planes[u])
