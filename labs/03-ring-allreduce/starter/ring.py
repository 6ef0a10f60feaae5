"""Exercise 3: ring AllReduce from scratch (see README.md)."""

from contract.schedule import Check, ScheduleBuilder, split_region


def ring_allreduce(n: int, nbytes: int):
    """A schedule in which ranks 0..n-1, in a ring i -> i+1, AllReduce a float32 buffer
    "grad" of ``nbytes``: reduce-scatter (n-1 steps), then all-gather (n-1 steps)."""
    b = ScheduleBuilder(n, "student-ring")
    b.buffer("grad", nbytes)
    chunks = split_region(0, nbytes, n)  # chunk c = (offset, length)
    tag = b.new_tag()
    for rank in range(n):
        right, left = (rank + 1) % n, (rank - 1) % n
        # reduce-scatter: in step s, send chunk (rank - s) and add the left's chunk (rank - s - 1) into ours
        for s in range(n - 1):
            send_off, send_len = chunks[(rank - s) % n]
            recv_off, recv_len = chunks[(rank - s - 1) % n]
            b.send(rank, "ring", right, "grad", send_off, send_len, tag)
            b.recv(rank, "ring", left, "grad", recv_off, recv_len, tag, mode="reduce")
        # TODO all-gather: n-1 more steps. After reduce-scatter, rank holds the full sum of
        # chunk (rank + 1) % n; pass finished chunks around the ring and COPY them in.
    b.check(Check("allreduce", "grad", 0, nbytes, groups=[list(range(n))]))
    return b.build()
