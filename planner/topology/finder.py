"""TopologyFinder: TopoOpt's direct-connect topology for a given traffic demand.

Reference: TopoOpt (NSDI 2023) section 4, docs/algorithms.md section 2.

1. Split the degree: d_AR = d * T_AR / (T_AR + T_MP), rounded to an even number (rings are
   used in both directions) and at least 2 whenever an AllReduce exists; d_MP = d - d_AR.
   T_AR counts the bytes a ring AllReduce puts on the network, 2 (k-1) S per group of k,
   so both terms are bytes on links.
2. Split d_AR among AllReduce group classes (groups of one size sit on the cosets of one
   subgroup of Z_n, and every server belongs to one group of each class) in proportion to
   each class's traffic ("paper"), or give every port to the heaviest class ("released",
   as the authors' released code does; kept for comparison).
3. Per class: TotientPerms candidates, SelectPermutations, ring cables on every coset.
4. MP: d_MP rounds of damped maximum-weight matching.
   Ports the matchings cannot fill (demand touching few servers) are paired up by further
   matchings, and a server left with several free ports (odd n) takes them by splitting a
   model-parallel cable, so every server keeps d cables (a free port is wasted bandwidth);
   only when n * d is odd does one port stay dark, and the plan's notes say so.
5. Guarantee connectivity with degree-preserving swaps.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.plan import TrafficDemand

from .connectivity import connect
from .mp_matching import absorb_free_ports, fill_free_ports, mp_matching_cables, symmetric_demand
from .totient import circulant_cables, select_permutations, totient_strides


@dataclass(frozen=True)
class TopoOptTopology:
    cables: list[tuple[int, int]]  # ring cables first, then MP cables
    ring_cables: int  # how many of `cables` are ring cables
    class_strides: dict[int, list[int]]  # group size -> strides of its rings
    d_allreduce: int
    d_mp: int
    swaps: int
    unmatched_ports: int


def allreduce_network_bytes(demand: TrafficDemand) -> float:
    return float(sum(2 * (len(g.members) - 1) * g.bytes for g in demand.allreduce))


def split_degree(d: int, t_ar: float, t_mp: float) -> tuple[int, int]:
    """(d_AR, d_MP) as in step 1."""
    if t_ar <= 0:
        return 0, d
    if t_mp <= 0:
        return d - d % 2, d % 2
    d_ar = int(round(d * t_ar / (t_ar + t_mp) / 2.0)) * 2
    d_ar = max(2, min(d_ar, d - d % 2))
    return d_ar, d - d_ar


def class_traffic(demand: TrafficDemand) -> dict[int, float]:
    """Per group size, the AllReduce bytes one member sends per iteration."""
    traffic: dict[int, float] = {}
    for g in demand.allreduce:
        k = len(g.members)
        if k > 1:
            traffic[k] = traffic.get(k, 0.0) + 2 * (k - 1) * g.bytes / k
    return traffic


def split_ports(d_ar: int, traffic: dict[int, float], rule: str = "paper") -> dict[int, int]:
    """Even port counts per group class (largest remainder), summing to d_ar."""
    if not traffic or d_ar <= 0:
        return {}
    if rule == "released":
        heaviest = max(traffic, key=lambda k: (traffic[k], k))
        return {heaviest: d_ar}
    pairs = d_ar // 2
    full = max(traffic)
    # Sub-group rings stay inside their cosets and never connect the cluster on their own;
    # when the largest group (normally all n servers) would get no ring, the proportional
    # split would leave the topology to the connectivity repair, funnelling all other
    # traffic over a few swapped cables. So the largest group keeps one stride (2 ports)
    # whenever there are at least 2 strides to share (taken from the best-served class).
    total = sum(traffic.values())
    shares = {k: pairs * t / total for k, t in traffic.items()}
    alloc = {k: int(s) for k, s in shares.items()}
    for k in sorted(shares, key=lambda k: (-(shares[k] - alloc[k]), -k))[: pairs - sum(alloc.values())]:
        alloc[k] += 1
    if alloc[full] == 0 and pairs >= 2:
        donor = max(alloc, key=lambda k: (alloc[k], -k))
        alloc[donor] -= 1
        alloc[full] += 1
    return {k: 2 * a for k, a in alloc.items() if a}


def find_topology(
    n: int, d: int, demand: TrafficDemand, rule: str = "paper", stride_range: str = "full"
) -> TopoOptTopology:
    """Steps 1-5 (module docstring); ``stride_range``: how far SelectPermutations' geometric
    sequence reaches (`planner.topology.totient.select_permutations`)."""
    d_ar, d_mp = split_degree(d, allreduce_network_bytes(demand), float(demand.mp_bytes))
    ports = split_ports(d_ar, class_traffic(demand), rule)
    class_strides: dict[int, list[int]] = {}
    ring: list[tuple[int, int]] = []
    for size, p in sorted(ports.items(), key=lambda kv: -kv[0]):
        strides = select_permutations(totient_strides(n, size), p // 2, n, stride_range)
        class_strides[size] = strides
        ring += circulant_cables(n, strides)
    if d_ar and not ring:  # no AllReduce class could use its ports (e.g. n = 2 sub-groups)
        d_mp += d_ar
        d_ar = 0
    mp = mp_matching_cables(demand.mp, d_mp) if d_mp else []
    if d_mp:
        mp += fill_free_ports(n, d, ring + mp, symmetric_demand(demand.mp))
        mp = absorb_free_ports(n, d, ring, mp)
    unmatched = n * d_mp - 2 * len(mp)
    cables, swaps = connect(n, ring + mp, protected=len(ring))
    return TopoOptTopology(cables, len(ring), class_strides, d_ar, d_mp, swaps, unmatched)
