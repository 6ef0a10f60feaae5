"""Multi-dimensional hierarchical networks (Won et al. 2021, LIBRA; docs/algorithms.md section 3).

A D-dimensional network of ``servers = p_0 x p_1 x ... x p_{D-1}``. A server's id is its
mixed-radix coordinate vector, coordinate 0 varying fastest:
``id = c_0 + p_0 (c_1 + p_1 (c_2 + ...))``. In dimension d the ``p_d`` servers that differ
only in coordinate d form a *group*, and each dimension is built from one *block*:

- ``"ring"``: a ring over the group in coordinate order (member j cabled to j+1 mod p_d),
  2 cables per server of ``B_d / 2`` each. For ``p_d = 2`` the two ring neighbours are the
  same server, so the group gets ONE cable of ``B_d`` (same bandwidth, one interface).
- ``"fc"``: all pairs of the group cabled, ``p_d - 1`` cables per server of
  ``B_d / (p_d - 1)`` each.
- ``"switch"``: one cable of ``B_d`` per server to a switch node of the group. Switch nodes
  are numbered after the servers (``plan.switches`` of them), dimension by dimension, group
  by group, as the ideal-switch baseline does.

``B_d = share_d x budget_gbps`` is a server's bandwidth in dimension d; ``plan.link_gbps`` is
the per-server budget, so the emulator's ``link_mbps`` is the emulated budget per server and
every cable is emulated at its share of it.

Routes are dimension-ordered shortest paths (correct coordinate 0 first, then 1, ...; on a
ring the shorter way round, ties clockwise), stored as a next-hop table; routes towards
switch nodes (which no traffic targets) are shortest-path trees (planner.topology.routing).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import isclose, prod

import numpy as np

from contract.errors import UsageError
from contract.plan import Link, Plan, Routes, TrafficDemand
from contract.plan import Workload as Job  # the training job (allocation.Workload: its collectives)

from ..bandwidth.libra import Collective, Workload
from .routing import hop_counts, next_hop_table
from .summary import summarize_topology

BLOCKS = ("ring", "fc", "switch")
SHARE_TOLERANCE = 1e-6  # shares are fractions that must add up to 1 (float rounding allowed)


class HierarchicalInputError(UsageError):
    """A bad hierarchical-topology field; the message names it."""


def check_dims_blocks(dims: Sequence[int], blocks: Sequence[str], servers: int | None = None) -> None:
    """Raise `HierarchicalInputError` naming the field if dims/blocks are not a valid network."""
    if not dims:
        raise HierarchicalInputError("topology.dims: must list at least one dimension size")
    for d, p in enumerate(dims):
        if not isinstance(p, int) or isinstance(p, bool) or p < 2:
            raise HierarchicalInputError(f"topology.dims[{d}] = {p!r}: every dimension needs at least 2 servers")
    if len(blocks) != len(dims):
        raise HierarchicalInputError(f"topology.blocks: {len(blocks)} blocks for {len(dims)} dims")
    for d, block in enumerate(blocks):
        if block not in BLOCKS:
            raise HierarchicalInputError(f"topology.blocks[{d}] = {block!r}: expected one of {', '.join(BLOCKS)}")
    if servers is not None and prod(dims) != servers:
        raise HierarchicalInputError(f"topology.dims {list(dims)}: product {prod(dims)} != cluster.servers = {servers}")


def check_shares(shares: Sequence[float], dims: Sequence[int], field: str = "topology.shares") -> None:
    """Raise `HierarchicalInputError` naming ``field`` unless the shares are one positive
    fraction per dimension summing to 1."""
    if len(shares) != len(dims):
        raise HierarchicalInputError(f"{field}: {len(shares)} shares for {len(dims)} dims")
    if any(not s > 0 for s in shares):
        raise HierarchicalInputError(f"{field} {list(shares)}: every share must be positive")
    if not isclose(sum(shares), 1.0, abs_tol=SHARE_TOLERANCE):
        raise HierarchicalInputError(f"{field} {list(shares)}: fractions sum to {sum(shares):g}, not 1")


def strides(dims: Sequence[int]) -> list[int]:
    """Id distance between servers one step apart in each dimension."""
    out, s = [], 1
    for p in dims:
        out.append(s)
        s *= p
    return out


def coordinates(dims: Sequence[int]) -> np.ndarray:
    """``servers x D`` array: row i is server i's coordinate vector."""
    ids = np.arange(prod(dims))
    return np.stack([(ids // s) % p for s, p in zip(strides(dims), dims)], axis=1)


def groups(dims: Sequence[int], d: int) -> list[list[int]]:
    """The groups of dimension ``d``: each a list of server ids in coordinate-d order."""
    step = strides(dims)[d]
    coords = coordinates(dims)
    bases = [int(i) for i in np.flatnonzero(coords[:, d] == 0)]
    return [[base + j * step for j in range(dims[d])] for base in bases]


def cables_per_server(block: str, p: int) -> int:
    if block == "ring":
        return 1 if p == 2 else 2
    if block == "fc":
        return p - 1
    return 1


def cable_gbps(block: str, p: int, dim_gbps: float) -> float:
    """Rate of one cable of a ``block`` dimension whose per-server bandwidth is ``dim_gbps``."""
    return dim_gbps / cables_per_server(block, p)


def dimension_cables(dims: Sequence[int], blocks: Sequence[str], d: int, first_switch: int) -> list[tuple[int, int]]:
    """Cables of dimension ``d``; switch nodes of a switch block start at ``first_switch``."""
    out: list[tuple[int, int]] = []
    p, block = dims[d], blocks[d]
    for g, members in enumerate(groups(dims, d)):
        if block == "ring":
            pairs = [(0, 1)] if p == 2 else [(j, (j + 1) % p) for j in range(p)]
            out += [(members[a], members[b]) for a, b in pairs]
        elif block == "fc":
            out += [(members[a], members[b]) for a in range(p) for b in range(a + 1, p)]
        else:
            out += [(m, first_switch + g) for m in members]
    return out


def switch_ids(dims: Sequence[int], blocks: Sequence[str]) -> list[int | None]:
    """First switch node id of each dimension (None for direct-connect blocks)."""
    servers, nxt, out = prod(dims), prod(dims), []
    for p, block in zip(dims, blocks):
        if block == "switch":
            out.append(nxt)
            nxt += servers // p
        else:
            out.append(None)
    return out


def dimension_ordered_next_hop(dims: Sequence[int], blocks: Sequence[str]) -> np.ndarray:
    """Next hops towards every server: correct the lowest differing coordinate first."""
    n, step = prod(dims), strides(dims)
    first_switch = switch_ids(dims, blocks)
    total = n + sum(n // p for p, b in zip(dims, blocks) if b == "switch")
    coords = coordinates(dims)
    nh = np.full((total, total), -1, dtype=np.int32)
    u = np.arange(n)[:, None]
    differ = coords[:, None, :] != coords[None, :, :]  # n x n x D
    lowest = np.where(differ.any(axis=2), differ.argmax(axis=2), -1)
    for d, (p, block) in enumerate(zip(dims, blocks)):
        here = lowest == d
        cud = np.broadcast_to(coords[:, None, d], (n, n))
        cvd = np.broadcast_to(coords[None, :, d], (n, n))
        if block == "fc":
            hop = u + (cvd - cud) * step[d]
        elif block == "ring":
            forward = (cvd - cud) % p
            delta = np.where(forward <= p - forward, 1, -1)
            hop = u + ((cud + delta) % p - cud) * step[d]
        else:
            switch = first_switch[d]
            assert switch is not None
            switch_of = switch + _group_index(coords, dims, d)
            hop = np.broadcast_to(switch_of[:, None], (n, n))
            # a switch forwards to its member whose coordinate d is the destination's
            member0 = np.arange(n) - coords[:, d] * step[d]
            nh[switch_of, :n] = member0[:, None] + coords[None, :, d] * step[d]
        nh[:n, :n] = np.where(here, hop, nh[:n, :n])
    return nh


def _group_index(coords: np.ndarray, dims: Sequence[int], d: int) -> np.ndarray:
    """Index of each server's dimension-d group, in the order of `groups`."""
    other = [k for k in range(len(dims)) if k != d]
    index = np.zeros(len(coords), dtype=np.int64)
    for k in reversed(other):
        index = index * dims[k] + coords[:, k]
    return index


def layout_span(dims: Sequence[int], layout: int) -> tuple[int, ...]:
    """Dimensions spanned by the coset AllReduce groups {s, s + layout, ...}: whole
    sub-networks exactly when ``layout = p_0 ... p_{k-1}`` (they then span dims k .. D-1)."""
    for k in range(len(dims)):
        if prod(dims[:k]) == layout:
            return tuple(range(k, len(dims)))
    raise HierarchicalInputError(f"AllReduce groups of step {layout} are not whole dimensions of {list(dims)}")


def dimension_mp_bytes(dims: Sequence[int], demand: TrafficDemand) -> np.ndarray:
    """Bytes one server sends per dimension for the model-parallel flows, averaged over the
    servers: routed dimension by dimension, a flow crosses every dimension in which its ends'
    coordinates differ."""
    coords = coordinates(dims)
    out = np.zeros(len(dims))
    for flow in demand.mp:
        out += flow.bytes * (coords[flow.src] != coords[flow.dst])
    return out / prod(dims)


def demand_workload(dims: Sequence[int], demand: TrafficDemand) -> Workload:
    """The allocator's workload of a strategy's traffic: one AllReduce per coset layout over
    the dimensions its groups span (every server is in one group per layout), and the
    model-parallel bytes of dimension d as an all-to-all over d carrying the same bytes
    (``a_d = S (p_d - 1) / p_d``, so ``S = bytes_d p_d / (p_d - 1)``)."""
    n = prod(dims)
    per_layout: dict[int, float] = {}
    for group in demand.allreduce:
        per_layout.setdefault(n // len(group.members), float(group.bytes))
    collectives = [Collective("allreduce", b, layout_span(dims, m)) for m, b in sorted(per_layout.items())]
    for d, nbytes in enumerate(dimension_mp_bytes(dims, demand)):
        if nbytes > 0:
            collectives.append(Collective("all_to_all", float(nbytes) * dims[d] / (dims[d] - 1), (d,)))
    return Workload(tuple(collectives))


def _direct_pairs(n: int, links: Sequence[Link]) -> np.ndarray:
    """``n x n``: servers cabled together or sharing a switch (no other server relays)."""
    direct = np.zeros((n, n), dtype=bool)
    members: dict[int, list[int]] = {}
    for link in links:
        if link.b < n:
            direct[link.a, link.b] = direct[link.b, link.a] = True
        else:
            members.setdefault(link.b, []).append(link.a)
    for group in members.values():
        direct[np.ix_(group, group)] = True
    return direct


def hierarchical_plan(
    dims: Sequence[int],
    blocks: Sequence[str],
    budget_gbps: float,
    shares: Sequence[float],
    latency_us: float = 1.0,
    demand: TrafficDemand | None = None,
    workload: Job | None = None,
    strategy: str = "",
) -> Plan:
    """The `Plan` of a hierarchical network: cables of each block per dimension at
    ``share_d x budget_gbps`` per server, dimension-ordered routes."""
    dims, blocks, shares = list(dims), list(blocks), [float(s) for s in shares]
    check_dims_blocks(dims, blocks)
    check_shares(shares, dims)
    if not budget_gbps > 0:
        raise HierarchicalInputError(f"topology.budget_gbps = {budget_gbps!r}: must be a positive rate")
    n = prod(dims)
    first_switch = switch_ids(dims, blocks)
    switches = sum(n // p for p, b in zip(dims, blocks) if b == "switch")
    dim_gbps = [s * budget_gbps for s in shares]
    links: list[Link] = []
    for d, (p, block) in enumerate(zip(dims, blocks)):
        rate = cable_gbps(block, p, dim_gbps[d])
        links += [Link(a, b, rate) for a, b in dimension_cables(dims, blocks, d, first_switch[d] or n)]
    nh = dimension_ordered_next_hop(dims, blocks)
    if switches:
        shortest = next_hop_table(n + switches, [(l.a, l.b) for l in links])
        nh[:, n:] = shortest[:, n:]
    hops = hop_counts(nh, n)
    summary = summarize_topology(hops, n, links, switches, _direct_pairs(n, links) if switches else None)
    return Plan(
        servers=n,
        degree=sum(cables_per_server(b, p) for p, b in zip(dims, blocks)),
        link_gbps=float(budget_gbps),
        latency_us=float(latency_us),
        topology="hierarchical",
        links=tuple(links),
        routes=Routes(kind="table", table=tuple(tuple(int(x) for x in row) for row in nh)),
        demand=demand or TrafficDemand(allreduce=(), mp=()),
        summary=summary,
        workload=workload,
        strategy=strategy,
        switches=switches,
        notes=(
            f"hierarchical {' x '.join(f'{b}({p})' for p, b in zip(dims, blocks))}: "
            + ", ".join(f"B_{d} = {g:g} Gbit/s" for d, g in enumerate(dim_gbps)),
        ),
        extra={"dims": dims, "blocks": blocks, "shares": shares, "dim_gbps": dim_gbps},
    )
