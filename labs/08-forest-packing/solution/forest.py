"""Exercise 8, reference solution: the Nash-Williams/Tutte partition bound by enumerating the
partitions of the servers, and the AllReduce times of the rate-weighted rings and of the
packing bound on the 8-server circulant with one slow cable."""

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


def partitions(items: list[int]):
    """Every partition of ``items`` into non-empty parts (lists of sets): the first item
    joins each part of every partition of the rest, or a part of its own."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for partition in partitions(rest):
        for i in range(len(partition)):
            yield partition[:i] + [partition[i] | {first}] + partition[i + 1 :]
        yield partition + [{first}]


def packing_rate(n: int, cables: list[tuple[int, int, float]]) -> float:
    """tau = min over partitions P with >= 2 parts of c(cables between parts) / (|P| - 1)."""
    servers = list(range(n))

    def crossing(P: list[set[int]]) -> float:
        part = {v: i for i, members in enumerate(P) for v in members}
        return sum(gbps for a, b, gbps in cables if part[a] != part[b])

    tau = min(crossing(P) / (len(P) - 1) for P in partitions(servers) if len(P) >= 2)
    return tau


def ring_rates() -> list[float]:
    """Gbit/s of every ring: each stride wired both ways, each direction a ring as slow as
    its slowest cable."""
    rate = {frozenset((a, b)): gbps for a, b, gbps in lab_cables()}
    n = SERVERS
    rings = []
    for p in STRIDES:
        slowest = min(rate[frozenset((i, (i + p) % n))] for i in range(n))
        rings += [slowest, slowest]  # the p-ring and its reverse
    return rings


def allreduce_seconds(nbytes: int) -> dict[str, float]:
    """The rate-weighted multi-ring's time and the packing bound S / tau, real seconds."""
    n, S, h, alpha = SERVERS, nbytes, 1, ALPHA_S
    ring_gbps = ring_rates()
    tau = packing_rate(n, lab_cables())
    goodput = (MTU - 52) / (MTU + 14) * 1e9 / 8  # bytes/s per Gbit/s: what TCP carries
    T_rings = 2 * (n - 1) * S / (n * sum(ring_gbps) * goodput) + 2 * (n - 1) * h * alpha
    T_bound = S / (tau * goodput)
    return {"rings": T_rings, "packing_bound": T_bound}
