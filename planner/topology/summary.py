"""Summary figures of a topology: diameter, mean hop count, bisection bandwidth estimate."""

from __future__ import annotations

import numpy as np

from contract.plan import Link, Summary


def cut_gbps(links: tuple[Link, ...] | list[Link], side: set[int]) -> float:
    return sum(l.gbps for l in links if (l.a in side) != (l.b in side))


def bisection_estimate(servers: int, links: list[Link], switches: int = 0) -> float:
    """Bandwidth (one direction) across the better of two balanced cuts of the servers.

    An estimate, as the issue asks: the exact minimum bisection is NP-hard. Candidates are
    the contiguous halves of server ids (tight for rings and circulants) and the even/odd
    split (tight for some tori); switches are put on the side that gives the smaller cut.
    """
    if switches:
        half = set(range(servers // 2))
        return min(cut_gbps(links, half), cut_gbps(links, half | set(range(servers, servers + switches))))
    candidates = [set(range(servers // 2)), set(range(0, servers, 2))]
    return min(cut_gbps(links, c) for c in candidates)


def summarize_topology(
    hops: np.ndarray, servers: int, links: list[Link], switches: int = 0, direct: np.ndarray | None = None
) -> Summary:
    off_diag = hops[~np.eye(servers, dtype=bool)]
    if direct is None:
        relayed = float((off_diag > 1).mean()) if servers > 1 else 0.0
    else:
        relayed = float(((~direct) & ~np.eye(servers, dtype=bool)).sum() / max(1, servers * (servers - 1)))
    return Summary(
        diameter=int(off_diag.max()) if off_diag.size else 0,
        mean_hops=round(float(off_diag.mean()), 4) if off_diag.size else 0.0,
        bisection_gbps=round(bisection_estimate(servers, links, switches), 3),
        relayed_fraction=round(relayed, 4),
    )
