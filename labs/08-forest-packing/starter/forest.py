"""Exercise 8: how fast can an AllReduce be on cables of different rates? (see README.md)"""

SERVERS = 8
MTU = 9000
ALPHA_S = 1e-6  # latency_us = 1 of slow-cable-8.toml, per hop
LINK_GBPS = 25.0
STRIDES = (1, 3)  # TopoOpt's rings on 8 servers of degree 4: i±1 and i±3
SLOW = {(0, 1): 5.0}  # the one old cable


def lab_cables() -> list[tuple[int, int, float]]:
    """(a, b, gbps) of every cable of the circulant: (i, i + p mod n) for each stride p."""
    n = SERVERS
    return [(i, (i + p) % n, SLOW.get((i, (i + p) % n), LINK_GBPS)) for p in STRIDES for i in range(n)]


def packing_rate(n: int, cables: list[tuple[int, int, float]]) -> float:
    """The spanning-tree packing rate tau (Gbit/s) of the servers 0 .. n-1 joined by
    ``cables`` (a, b, gbps), one entry per cable (parallel cables add up).

    TODO: this is only the partition into single servers, which every cable crosses. The
    packing rate is the least ratio over every partition of the servers (README.md)."""
    return sum(gbps for _, _, gbps in cables) / (n - 1)


def allreduce_seconds(nbytes: int) -> dict[str, float]:
    """Real seconds of one AllReduce of ``nbytes`` on the lab's network: "rings" (TopoOpt's
    four rings, the buffer split in proportion to their rates) and "packing_bound" (S / tau).

    TODO: this takes all four rings at 25 Gbit/s and the raw cable rate. A ring runs at its
    slowest cable; take what TCP leaves of a cable, and add the latency of the ring's steps."""
    n = SERVERS
    rings = 2 * (n - 1) * nbytes * 8 / (n * 4 * LINK_GBPS * 1e9)
    bound = nbytes * 8 / (packing_rate(n, lab_cables()) * 1e9)
    return {"rings": rings, "packing_bound": bound}
