"""Exercise 5, reference solution: coin change over Z_n by breadth-first search."""

from collections import deque


def first_strides(n: int, strides: list[int]) -> list[int]:
    """BFS from offset 0 with coins +p and -p; every offset inherits the first coin of the
    offset it was reached from, so first[r] starts a shortest sequence summing to r."""
    coins = sorted({s for p in strides for s in (p, -p)}, key=lambda c: (abs(c), c))
    dist = [-1] * n
    first = [0] * n
    dist[0] = 0
    queue = deque([0])
    while queue:
        r = queue.popleft()
        for c in coins:
            nxt = (r + c) % n
            if dist[nxt] < 0:
                dist[nxt] = dist[r] + 1
                first[nxt] = c if r == 0 else first[r]
                queue.append(nxt)
    return first
