"""Exercise 10, reference solution: chain fusion, the placement cost model's makespan and an
exhaustive search over the assignments of the fused groups."""

from itertools import product


def fuse_chain(n: int, edges: list[tuple[int, int]]) -> list[list[int]]:
    """Groups of the operators 0 .. n-1: the edges (u, v) whose producer has one consumer and
    whose consumer has one input are merged; a group is a connected piece of merged edges."""
    out_degree, in_degree = [0] * n, [0] * n
    for u, v in edges:
        out_degree[u] += 1
        in_degree[v] += 1
    group = list(range(n))  # union-find: each operator's representative

    def find(x: int) -> int:
        while group[x] != x:
            x = group[x]
        return x

    for u, v in edges:
        chain = out_degree[u] == 1 and in_degree[v] == 1  # the edge (u, v) is merged
        if chain:
            group[find(v)] = find(u)
    members: dict[int, list[int]] = {}
    for op in range(n):
        members.setdefault(find(op), []).append(op)
    return sorted(members.values())


def makespan(
    forward: list[float], backward: list[float], edges: list[tuple[int, int, float]], assignment: list[int], rate: float
) -> float:
    """One iteration: forwards in index order, the loss barrier, backwards in reverse order;
    a group waits for its server and for its inputs (or gradients), bytes / rate apart."""
    n = len(forward)
    inputs = [[(u, nbytes) for u, v, nbytes in edges if v == g] for g in range(n)]
    consumers = [[(v, nbytes) for u, v, nbytes in edges if u == g] for g in range(n)]
    end_f, end_b = [0.0] * n, [0.0] * n
    free = dict.fromkeys(assignment, 0.0)
    for g in range(n):
        s = assignment[g]
        start = max([free[s]] + [end_f[u] + (0 if assignment[u] == s else nbytes / rate) for u, nbytes in inputs[g]])
        end_f[g] = start + forward[g]
        free[s] = end_f[g]
    free = dict.fromkeys(assignment, max(end_f))
    for g in reversed(range(n)):
        s = assignment[g]
        start = max([free[s]] + [end_b[v] + (0 if assignment[v] == s else nbytes / rate) for v, nbytes in consumers[g]])
        end_b[g] = start + backward[g]
        free[s] = end_b[g]
    T = max(end_b)
    return T


def best_assignment(
    forward: list[float], backward: list[float], edges: list[tuple[int, int, float]], servers: int, rate: float
) -> tuple[int, ...]:
    """The assignment of least makespan among all servers ** groups of them."""
    best = min(product(range(servers), repeat=len(forward)), key=lambda a: makespan(forward, backward, edges, a, rate))
    return best
