"""Exercise 5: coin-change routing on a circulant (see README.md)."""


def first_strides(n: int, strides: list[int]) -> list[int]:
    """first[r]: the signed stride a packet takes first to travel offset r (r = 0 .. n-1;
    first[0] = 0). Server u forwards a packet for v along first[(v - u) % n].

    TODO: this is greedy change-making with positive strides only, the largest stride that
    fits. It is not always shortest. Replace it with a breadth-first search over offsets."""
    first = [0] * n
    coins = sorted(strides, reverse=True)
    for r in range(1, n):
        first[r] = next(c for c in coins if c <= r)
    return first
