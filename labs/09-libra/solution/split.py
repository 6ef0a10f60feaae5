"""Exercise 9, reference solution: LIBRA's per-dimension traffic of one AllReduce, its
optimal split of the budget and the AllReduce time at a split."""

from math import sqrt


def dimension_bytes(dims: list[int], nbytes: int) -> list[float]:
    """Bytes one server sends in each dimension: reduce-scatter dimension by dimension, then
    all-gather in reverse, the message shrinking by p[d] after each dimension."""
    p, S = dims, nbytes
    a = [0.0] * len(p)
    m = S
    for d in range(len(p)):
        a[d] = 2 * m * (p[d] - 1) / p[d]
        m = m / p[d]
    return a


def libra_gbps(dims: list[int], nbytes: int, budget_gbps: float, schedule: str) -> list[float]:
    """The split of ``budget_gbps`` that minimizes the AllReduce time: pipelined, B_d
    proportional to a_d (all dimensions finish together); sequential, to sqrt(a_d) (Lagrange)."""
    a, budget = dimension_bytes(dims, nbytes), budget_gbps
    B_pipelined = [budget * x / sum(a) for x in a]
    B_sequential = [budget * sqrt(x) / sum(sqrt(y) for y in a) for x in a]
    return B_pipelined if schedule == "pipelined" else B_sequential


def allreduce_seconds(dims: list[int], nbytes: int, gbps: list[float], schedule: str, mtu: int) -> float:
    """The AllReduce time at ``gbps`` per dimension: each dimension's bytes at its TCP
    goodput; pipelined, the slowest dimension; sequential, their sum."""
    a, MTU = dimension_bytes(dims, nbytes), mtu
    t = [x / (g * 1e9 / 8 * (MTU - 52) / (MTU + 14)) for x, g in zip(a, gbps)]
    T_pipelined = max(t)
    T_sequential = sum(t)
    return T_pipelined if schedule == "pipelined" else T_sequential
