"""Exercise 7: how much shorter is a DDP step with the plan's rings than with Gloo's one ring?"""


def step_gain_seconds(bucket_bytes: list[int], servers: int, rings: int, cable_bps: float, mtu: int) -> float:
    """Seconds one step's AllReduces (one per bucket of ``bucket_bytes``) take with Gloo's one
    ring minus with ``rings`` rings at once, every ring hop a cable of ``cable_bps``
    (bandwidth only).

    TODO: this counts each bucket once at the cable's full rate; a ring AllReduce sends more
    than S per rank, TCP leaves less than the cable's rate, and the rings share the bucket."""
    return sum(8 * s / cable_bps for s in bucket_bytes)
