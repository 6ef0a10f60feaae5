"""Exercise 7 (solution): how much shorter is a DDP step with the plan's rings than with
Gloo's one ring?"""


def ring_seconds(nbytes: float, servers: int, rate_bps: float) -> float:
    """A ring AllReduce: 2 (n-1) S / n bytes per rank over one ring hop of ``rate_bps``."""
    return 2 * (servers - 1) * nbytes * 8 / (servers * rate_bps)


def step_gain_seconds(bucket_bytes: list[int], servers: int, rings: int, cable_bps: float, mtu: int) -> float:
    goodput = cable_bps * (mtu - 52) / (mtu + 14)
    gloo = sum(ring_seconds(s, servers, goodput) for s in bucket_bytes)
    plan = sum(ring_seconds(s / rings, servers, goodput) for s in bucket_bytes)  # the rings share the bucket
    return gloo - plan
