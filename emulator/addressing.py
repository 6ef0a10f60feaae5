"""Addresses and names of an emulated plan; pure functions, no root needed.

Everything lives in 198.18.0.0/15, the RFC 2544 benchmarking range, and nowhere else:
- identity of node ``u``: ``198.18.0.0 + u + 1`` as a /32 on the host's loopback
  (198.18.0.0/16: up to 65534 nodes). Routes carry it as preferred source, so TCP
  connections, traceroute replies and ICMP errors all name hosts by identity.
- cable ``k`` of ``plan.links``: the /31 ``198.19.0.0 + 2k``; end ``a`` gets the even address,
  end ``b`` the odd one (198.19.0.0/16: up to 32768 cables).
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


def link_addresses(k: int) -> tuple[str, str]:
    """Addresses of end ``a`` and end ``b`` of cable ``k`` (a /31)."""
    if not 0 <= k < MAX_LINKS:
        raise ValueError(f"cable {k} outside 0..{MAX_LINKS - 1}")
    base = LINK_NET.network_address + 2 * k
    return str(base), str(base + 1)


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
