"""Up-front checks of a network (a plan's) against what the emulator and this machine can do.

Everything here runs before the first namespace exists, so a bad plan leaves nothing
behind; each problem is one `EmulationInputError` naming the field and the value. Fields
are named as the plan names them (``plan.links[3].b``): that is where a user fixes them.
"""

from __future__ import annotations

import math

import numpy as np

from contract.network import Network

from .addressing import MAX_LINKS, MAX_NODES
from .config import EmulationConfig
from .errors import EmulationInputError
from .planes import validate_allocation

MEMORY_SHARE = 0.5
"""Share of the available memory the hosts may take: the rest stays for the workers and
their buffers."""


def mem_available_mib() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return float("inf")


def validate(plan: Network, config: EmulationConfig, available_mib: float | None = None) -> None:
    """Raise `EmulationInputError` on the first thing that cannot be emulated as asked."""
    servers, switches = int(plan.servers), int(plan.switches)
    if servers < 1:
        raise EmulationInputError(f"plan.servers = {servers}: need at least one server")
    if switches < 0:
        raise EmulationInputError(f"plan.switches = {switches}: cannot be negative")
    nodes = servers + switches
    if nodes > MAX_NODES:
        raise EmulationInputError(f"plan has {nodes} nodes: the emulator's address plan holds at most {MAX_NODES}")
    if not (plan.link_gbps > 0 and math.isfinite(plan.link_gbps)):
        raise EmulationInputError(f"plan.link_gbps = {plan.link_gbps!r}: must be a positive rate")
    if not (plan.latency_us >= 0 and math.isfinite(plan.latency_us)):
        raise EmulationInputError(f"plan.latency_us = {plan.latency_us!r}: must be >= 0")
    if len(plan.links) > MAX_LINKS:
        raise EmulationInputError(
            f"plan has {len(plan.links)} links: the emulator's address plan holds at most {MAX_LINKS}"
        )
    adjacency = np.zeros((nodes, nodes), dtype=bool)
    for k, link in enumerate(plan.links):
        for end in ("a", "b"):
            node = getattr(link, end)
            if not isinstance(node, (int, np.integer)) or not 0 <= node < nodes:
                what = f"{servers} servers" + (f" + {switches} switches" if switches else "")
                raise EmulationInputError(
                    f"plan.links[{k}].{end} = {node!r}: no such node (the plan has {what}, ids 0..{nodes - 1})"
                )
        if link.a == link.b:
            raise EmulationInputError(f"plan.links[{k}]: cable from node {link.a} to itself")
        if not (link.gbps > 0 and math.isfinite(link.gbps)):
            raise EmulationInputError(f"plan.links[{k}].gbps = {link.gbps!r}: must be a positive rate")
        adjacency[link.a, link.b] = adjacency[link.b, link.a] = True
    _check_routes(plan, nodes, adjacency)
    validate_allocation(plan)
    _check_memory(nodes, config, available_mib)


def _check_routes(plan: Network, nodes: int, adjacency: np.ndarray) -> None:
    """Every next hop is a cabled neighbour, and following next hops reaches every node."""
    if nodes < 2:
        return
    try:
        nh = np.asarray(plan.next_hop)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise EmulationInputError(f"plan.routes: {exc}") from None
    if nh.shape != (nodes, nodes):
        raise EmulationInputError(f"plan.routes: next-hop table is {nh.shape}, expected {(nodes, nodes)}")
    off = ~np.eye(nodes, dtype=bool)
    bad_range = off & ((nh < 0) | (nh >= nodes))
    if bad_range.any():
        u, v = map(int, np.argwhere(bad_range)[0])
        raise EmulationInputError(f"plan.routes: next hop of {u} towards {v} is {int(nh[u, v])}, not a node")
    rows = np.broadcast_to(np.arange(nodes)[:, None], (nodes, nodes))
    not_cabled = off & ~adjacency[rows, np.where(off, nh, 0)]
    if not_cabled.any():
        u, v = map(int, np.argwhere(not_cabled)[0])
        raise EmulationInputError(
            f"plan.routes: {u} forwards to {int(nh[u, v])} on the way to {v}, but no cable joins {u} and {int(nh[u, v])}"
        )
    # follow all routes at once; after `nodes` hops every packet must have arrived
    dst = np.broadcast_to(np.arange(nodes)[None, :], (nodes, nodes))
    cur = rows.copy()
    for _ in range(nodes):
        moving = cur != dst
        if not moving.any():
            return
        cur = np.where(moving, nh[cur, dst], cur)
    u, v = map(int, np.argwhere(cur != dst)[0])
    raise EmulationInputError(f"plan.routes: the route from {u} to {v} loops")


def _check_memory(nodes: int, config: EmulationConfig, available_mib: float | None) -> None:
    available = mem_available_mib() if available_mib is None else available_mib
    budget = available * MEMORY_SHARE
    need = config.hosts_memory_mib(nodes)
    if need > budget:
        fit = int(budget // config.host_memory_mib)
        raise EmulationInputError(
            f"plan.servers = {nodes} hosts need about {need:.0f} MiB; this machine has {available:.0f} MiB "
            f"available and the emulator uses at most {MEMORY_SHARE:.0%} of it: at most {fit} hosts fit"
        )
