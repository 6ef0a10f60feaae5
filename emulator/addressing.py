"""Addresses and names of an emulated plan; pure functions, no root needed.

Everything lives in 198.18.0.0/15, the RFC 2544 benchmarking range, and nowhere else:
- identity of node ``u``: ``198.18.0.0 + u + 1`` as a /32 on the host's loopback
  (198.18.0.0/16: up to 65534 nodes). Routes carry it as preferred source, so TCP
  connections, traceroute replies and ICMP errors all name hosts by identity.
- cable ``k`` of ``plan.links``: the /31 ``198.19.0.0 + 2k``; end ``a`` gets the even address,
  end ``b`` the odd one (198.19.0.0/16: up to 32768 cables).
- plane ``p >= 1`` of node ``u`` (the source address its traffic on plane ``p`` carries, see
  `emulator.planes`): ``198.19.128.0 + 16u + p``, a /32 on its loopback. Each node owns the
  /28 ``198.19.128.0 + 16u`` (offset 0 unused, so the last hex digit is the plane: up to 15
  planes) in the top half of the cable range (198.19.128.0/17: up to 2048 nodes). A network
  with an allocation therefore keeps its cables in the bottom half (up to 16384 cables);
  `emulator.validate` checks both limits.
- the Ethernet address of the cable end that holds address ``a.b.c.d``: ``02:00:a:b:c:d``
  (`cable_mac`, locally administered), so each host knows its peer's MAC without asking:
  every cable end gets a permanent neighbour entry for the other end (no ARP, see
  `emulator.hostconfig`).
Interface names follow Mininet's ``h3-eth2`` (``s0-eth11`` for switch nodes); they exist only
inside the hosts' namespaces, never in the root namespace.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

RANGE = ipaddress.ip_network("198.18.0.0/15")
IDENTITY_NET = ipaddress.ip_network("198.18.0.0/16")
LINK_NET = ipaddress.ip_network("198.19.0.0/16")
MAX_NODES = IDENTITY_NET.num_addresses - 2
MAX_LINKS = LINK_NET.num_addresses // 2
PLANE_NET = ipaddress.ip_network("198.19.128.0/17")
PLANE_BLOCK_LEN = 28
"""Prefix length of one node's block of plane addresses."""
PLANE_BLOCK = 1 << (32 - PLANE_BLOCK_LEN)
MAX_PLANES = PLANE_BLOCK - 1
"""Planes per node: offset 0 of each block is left unused."""
MAX_PLANE_NODES = PLANE_NET.num_addresses // PLANE_BLOCK
MAX_LINKS_WITH_PLANES = (LINK_NET.num_addresses - PLANE_NET.num_addresses) // 2
"""Cables a network with an allocation may have: their /31s stay below `PLANE_NET`."""


def identity(node: int) -> str:
    """Identity address of ``node`` (a /32 on its loopback)."""
    if not 0 <= node < MAX_NODES:
        raise ValueError(f"node {node} outside 0..{MAX_NODES - 1}")
    return str(IDENTITY_NET.network_address + node + 1)


def node_of_identity(address: str) -> int | None:
    """Inverse of `identity`; None for an address that is no identity."""
    ip = ipaddress.ip_address(address)
    if ip not in IDENTITY_NET:
        return None
    node = int(ip) - int(IDENTITY_NET.network_address) - 1
    return node if 0 <= node < MAX_NODES else None


def plane_block(node: int) -> str:
    """Network address of ``node``'s /28 of plane addresses (`PLANE_BLOCK_LEN`)."""
    if not 0 <= node < MAX_PLANE_NODES:
        raise ValueError(f"node {node} outside 0..{MAX_PLANE_NODES - 1}: no plane addresses")
    return str(PLANE_NET.network_address + node * PLANE_BLOCK)


def plane_address(node: int, plane: int) -> str:
    """Source address of ``node``'s traffic on ``plane`` (1..`MAX_PLANES`), a /32 on its loopback."""
    if not 1 <= plane <= MAX_PLANES:
        raise ValueError(f"plane {plane} outside 1..{MAX_PLANES}")
    return str(ipaddress.ip_address(plane_block(node)) + plane)


def plane_of_address(address: str) -> tuple[int, int] | None:
    """Inverse of `plane_address`: ``(node, plane)``, or None for an address that is none."""
    ip = ipaddress.ip_address(address)
    if ip not in PLANE_NET:
        return None
    node, plane = divmod(int(ip) - int(PLANE_NET.network_address), PLANE_BLOCK)
    return (node, plane) if plane else None


def link_addresses(k: int) -> tuple[str, str]:
    """Addresses of end ``a`` and end ``b`` of cable ``k`` (a /31)."""
    if not 0 <= k < MAX_LINKS:
        raise ValueError(f"cable {k} outside 0..{MAX_LINKS - 1}")
    base = LINK_NET.network_address + 2 * k
    return str(base), str(base + 1)


def cable_mac(address: str) -> str:
    """Ethernet address of the cable end that holds ``address`` (its /31 address):
    ``02:00`` (locally administered, unicast) and the address's four bytes."""
    return "02:00:" + ":".join(f"{b:02x}" for b in ipaddress.IPv4Address(address).packed)


def node_name(node: int, servers: int) -> str:
    """``h<i>`` for server i, ``s<j>`` for switch node ``servers + j``."""
    return f"h{node}" if node < servers else f"s{node - servers}"


@dataclass(frozen=True)
class Port:
    """One end of a cable as seen from the node that owns it."""

    node: int
    ifname: str
    address: str
    peer: int
    peer_address: str
    link: int  # index in plan.links

    @property
    def mac(self) -> str:
        """This end's Ethernet address (`cable_mac`)."""
        return cable_mac(self.address)

    @property
    def peer_mac(self) -> str:
        """The other end's Ethernet address, which this end's permanent neighbour entry names."""
        return cable_mac(self.peer_address)


def ports_of(links, nodes: int, servers: int) -> list[list[Port]]:
    """For every node, its ports in the order of ``links`` (the j-th cable of node u is
    interface ``<name(u)>-eth<j>``)."""
    ports: list[list[Port]] = [[] for _ in range(nodes)]
    for k, link in enumerate(links):
        addr_a, addr_b = link_addresses(k)
        for me, peer, mine, theirs in ((link.a, link.b, addr_a, addr_b), (link.b, link.a, addr_b, addr_a)):
            name = f"{node_name(me, servers)}-eth{len(ports[me])}"
            ports[me].append(Port(me, name, mine, peer, theirs, k))
    return ports
