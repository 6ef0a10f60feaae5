"""Exercise 9: split one server's bandwidth over the dimensions of its network (see README.md)."""


def dimension_bytes(dims: list[int], nbytes: int) -> list[float]:
    """Bytes one server sends in each dimension d (of p = dims[d] servers) for one AllReduce
    of ``nbytes`` over all the dimensions.

    TODO: this is a ring AllReduce of the whole buffer in every dimension. The hierarchical
    AllReduce reduce-scatters dimension by dimension: what is left to send shrinks."""
    return [2 * nbytes * (p - 1) / p for p in dims]


def libra_gbps(dims: list[int], nbytes: int, budget_gbps: float, schedule: str) -> list[float]:
    """Gbit/s per dimension, summing to ``budget_gbps``, that make the AllReduce fastest with
    the ``schedule`` ("pipelined" or "sequential").

    TODO: equal shares. Find LIBRA's optimum for each schedule (README.md)."""
    return [budget_gbps / len(dims)] * len(dims)


def allreduce_seconds(dims: list[int], nbytes: int, gbps: list[float], schedule: str, mtu: int) -> float:
    """Seconds of the AllReduce at ``gbps`` per dimension (the allocator's model).

    TODO: this adds the dimensions up at the raw rate, whatever the schedule."""
    return sum(a * 8 / (g * 1e9) for a, g in zip(dimension_bytes(dims, nbytes), gbps))
