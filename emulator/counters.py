"""Bytes each directed cable carried, read from the kernel's interface counters.

Every cable end is a veth in its host's namespace; its ``tx_bytes`` counter (netlink
``IFLA_STATS64``, read with pyroute2 from inside the namespace, `emulator.nsutil`) counts
every byte the host put on that cable, its own traffic and the traffic it relays. Two
snapshots around the timed iterations give the measured bytes per directed cable, which the
report shows beside the predicted ones. These are wire bytes: payload plus TCP/IP and
Ethernet headers (about 1% at MTU 9000), plus ARP and the odd ICMP message.

Parallel cables between the same two nodes are summed, as the prediction's directed links are.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from . import nsutil

Counters = dict[tuple[int, int], int]


def cable_tx_bytes(net: Any) -> Counters:
    """``{(node, peer): bytes sent}`` over every cable of a running `EmulatedNetwork` (its
    ``cable_tx_bytes``; a multi-machine network reads the same counters on each machine)."""
    from pyroute2 import IPRoute

    out: Counters = defaultdict(int)
    for u, host in enumerate(net.hosts):
        peer_of = {port.ifname: port.peer for port in net.ports[u]}
        if not peer_of:
            continue
        with nsutil.in_netns_of(host.pid), IPRoute() as ipr:
            for link in ipr.get_links():
                peer = peer_of.get(link.get_attr("IFLA_IFNAME"))
                stats = link.get_attr("IFLA_STATS64")
                if peer is not None and stats is not None:
                    out[(u, peer)] += int(stats["tx_bytes"])
    return dict(out)


def difference(after: Counters, before: Counters, iterations: int) -> list[dict[str, float]]:
    """Bytes per directed cable per iteration between two snapshots, as the prediction's
    ``link_bytes`` rows (``src``, ``dst``, ``bytes``)."""
    if iterations <= 0:
        return []
    return [
        {"src": a, "dst": b, "bytes": (after[(a, b)] - before.get((a, b), 0)) / iterations} for (a, b) in sorted(after)
    ]
