"""Exercise 10: fuse a chain of operators, place the groups on 3 servers (see README.md)."""


def fuse_chain(n: int, edges: list[tuple[int, int]]) -> list[list[int]]:
    """Groups (lists of operator indices) of the operators 0 .. n-1 joined by ``edges``
    (producer, consumer), numbered in a topological order.

    TODO: every operator is its own group. Merge the chains (README.md)."""
    return [[op] for op in range(n)]


def makespan(
    forward: list[float], backward: list[float], edges: list[tuple[int, int, float]], assignment: list[int], rate: float
) -> float:
    """Seconds of one training iteration when group g (forward[g] and backward[g] seconds)
    runs on server assignment[g]; an edge (u, v, nbytes) sends nbytes from u to v forward
    and its gradient back, at ``rate`` bytes/s between two servers.

    TODO: this is the busiest server's compute: the groups wait for nothing."""
    busy: dict[int, float] = {}
    for g, server in enumerate(assignment):
        busy[server] = busy.get(server, 0.0) + forward[g] + backward[g]
    return max(busy.values())


def best_assignment(
    forward: list[float], backward: list[float], edges: list[tuple[int, int, float]], servers: int, rate: float
) -> tuple[int, ...]:
    """The server of each group that makes the makespan least.

    TODO: round robin, group g on server g mod servers."""
    return tuple(g % servers for g in range(len(forward)))
