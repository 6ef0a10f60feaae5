"""Exercise 1: how long does one AllReduce take on the 12-server prototype? (see README.md)"""

SERVERS = 12
LINK_BPS = 25e9  # one TopoOpt interface; a server has 4, the switch baseline one 100 Gbps port
MTU = 9000


def allreduce_seconds(nbytes: int) -> dict[str, float]:
    """Seconds of one AllReduce of ``nbytes`` on the real cluster, per setup:
    "ring" (one ring on TopoOpt's cables), "topoopt" (all of TopoOpt's rings, both
    directions at once), "switch" (one ring through the 100 Gbps switch).

    TODO: this uses the textbook ring formula with one 25 Gbps link for all three. Fix each
    setup's bandwidth (how many rings at once, on which links), take what TCP leaves of a
    link at this MTU, and add the latency of every hop of every step (README.md)."""
    ring = 2 * (SERVERS - 1) * nbytes * 8 / (SERVERS * LINK_BPS)
    return {"ring": ring, "topoopt": ring, "switch": ring}
