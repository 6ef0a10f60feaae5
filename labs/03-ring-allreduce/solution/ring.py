"""Exercise 3, reference solution: ring AllReduce (Patarasuk and Yuan, 2009)."""

from contract.schedule import Check, ScheduleBuilder, split_region


def ring_allreduce(n: int, nbytes: int):
    """Reduce-scatter then all-gather around the ring i -> i+1; every rank sends
    2 (n-1) chunks of S/n bytes, the bandwidth-optimal amount for one link."""
    b = ScheduleBuilder(n, "student-ring")
    b.buffer("grad", nbytes)
    chunks = split_region(0, nbytes, n)
    tag = b.new_tag()
    for rank in range(n):
        right, left = (rank + 1) % n, (rank - 1) % n
        for s in range(n - 1):  # reduce-scatter
            send_off, send_len = chunks[(rank - s) % n]
            recv_off, recv_len = chunks[(rank - s - 1) % n]
            b.send(rank, "ring", right, "grad", send_off, send_len, tag)
            b.recv(rank, "ring", left, "grad", recv_off, recv_len, tag, mode="reduce")
        for s in range(n - 1):  # all-gather: forward the finished chunks
            send_off, send_len = chunks[(rank + 1 - s) % n]
            recv_off, recv_len = chunks[(rank - s) % n]
            b.send(rank, "ring", right, "grad", send_off, send_len, tag)
            b.recv(rank, "ring", left, "grad", recv_off, recv_len, tag, mode="copy")
    b.check(Check("allreduce", "grad", 0, nbytes, groups=[list(range(n))]))
    return b.build()
