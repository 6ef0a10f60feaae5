"""The other collectives of a training job over a plan's rings: all-gather, reduce-scatter,
broadcast, and the direct all-to-all (what ``torch.distributed`` asks for beside AllReduce).

Every generator takes plain ints and ring orders (docs/schedules.md):

- ``ring_allgather``: every rank's slot of ``slot_bytes`` in buffer ``out`` (n slots, rank r's
  at r x slot_bytes) reaches every rank; each slot is split across the rings (by
  ``weights``), ring i circulating part i of every slot, copy mode: the all-gather half of
  the (multi-)ring AllReduce.
- ``ring_reduce_scatter``: buffer ``buf`` of n slots; rank r ends with the sum of every
  rank's slot r in its slot r (the reduce-scatter half).
- ``ring_broadcast``: ``root``'s buffer ``buf`` to every rank, the buffer split across the
  rings, each ring pipelining its part in segments from the root around (copy).
- ``direct_alltoall``: rank s's slot d of ``in`` to rank d's slot s of ``out``, every pair
  directly (the hosts relay where not cabled), one stream per peer.

Sums keep the ring's fixed order, so the result is identical on every rank.
"""

from __future__ import annotations

from collections.abc import Sequence

from contract.schedule import Check, Schedule, ScheduleBuilder

from .rings import REDUCE, add_ring_all_gather, add_ring_reduce_scatter, weighted_split

BROADCAST_SEGMENTS = 8  # pipeline depth of each ring's part of a broadcast
MIN_BROADCAST_SEGMENT = 64 << 10  # below this a segment costs more in messages than it gains


def _check_rings(n: int, rings: Sequence[Sequence[int]]) -> None:
    if not rings:
        raise ValueError("no rings")
    for ring in rings:
        if sorted(ring) != list(range(n)):
            raise ValueError(f"ring {list(ring)} is not a permutation of 0..{n - 1}")


def _slot_parts(
    n: int, slot_bytes: int, rings: Sequence[Sequence[int]], weights: Sequence[float] | None, itemsize: int
) -> list[list[tuple[int, int]]]:
    """parts[i][r]: ring i's part of rank r's slot (the same split for every slot)."""
    split = weighted_split(0, slot_bytes, list(weights) if weights is not None else [1.0] * len(rings), itemsize)
    return [[(r * slot_bytes + off, length) for r in range(n)] for off, length in split]


def _ring_phase(
    b: ScheduleBuilder,
    rings: Sequence[Sequence[int]],
    buffer: str,
    n: int,
    slot_bytes: int,
    weights: Sequence[float] | None,
    mode: str,
) -> None:
    itemsize = b.buffers[buffer].itemsize
    for i, (ring, parts) in enumerate(zip(rings, _slot_parts(n, slot_bytes, rings, weights, itemsize))):
        if parts[0][1] == 0:
            continue
        # ring[j]'s piece is its own slot: reduce-scatter leaves the sum of every rank's slot r on
        # rank r, all-gather spreads each rank's own slot (the AllReduce's two passes)
        ring_pass = add_ring_reduce_scatter if mode == REDUCE else add_ring_all_gather
        ring_pass(b, ring, buffer, [parts[r] for r in ring], f"ring{i}", b.new_tag(), {})


def _builder(n: int, algorithm: str, buffer: str, nbytes: int, dtype: str = "float32") -> ScheduleBuilder:
    if nbytes <= 0 or nbytes % 4:
        raise ValueError(f"bytes must be a positive multiple of 4, got {nbytes}")
    b = ScheduleBuilder(n, algorithm)
    b.buffer(buffer, nbytes, dtype)
    return b


def ring_allgather(
    n: int, slot_bytes: int, rings: Sequence[Sequence[int]], weights: Sequence[float] | None = None
) -> Schedule:
    """All-gather of one ``slot_bytes`` slot per rank into ``out`` (module docstring)."""
    _check_rings(n, rings)
    b = _builder(n, "ring allgather", "out", n * slot_bytes)
    _ring_phase(b, rings, "out", n, slot_bytes, weights, "copy")
    for src in range(n):
        for dst in range(n):
            if dst != src:
                b.check(Check("copy", "out", src * slot_bytes, slot_bytes, src=src, dst=dst))
    sched = b.build()
    sched.params.update(rings=[list(r) for r in rings], slot_bytes=slot_bytes)
    return sched


def ring_reduce_scatter(
    n: int, slot_bytes: int, rings: Sequence[Sequence[int]], weights: Sequence[float] | None = None
) -> Schedule:
    """Reduce-scatter of ``buf`` (n slots): rank r's slot r ends as the sum over ranks. (No
    worker check: the format's ``allreduce`` check constrains every member of a group.)"""
    _check_rings(n, rings)
    b = _builder(n, "ring reduce-scatter", "buf", n * slot_bytes)
    _ring_phase(b, rings, "buf", n, slot_bytes, weights, "reduce")
    sched = b.build()
    sched.params.update(rings=[list(r) for r in rings], slot_bytes=slot_bytes)
    return sched


def ring_broadcast(
    n: int, nbytes: int, root: int, rings: Sequence[Sequence[int]], weights: Sequence[float] | None = None
) -> Schedule:
    """``root``'s ``buf`` to every rank over the rings, pipelined (module docstring)."""
    _check_rings(n, rings)
    if not 0 <= root < n:
        raise ValueError(f"root {root} outside 0..{n - 1}")
    b = _builder(n, "ring broadcast", "buf", nbytes)
    parts = weighted_split(0, nbytes, list(weights) if weights is not None else [1.0] * len(rings), 4)
    for i, (ring, (offset, length)) in enumerate(zip(rings, parts)):
        if not length or n == 1:
            continue
        start = list(ring).index(root)
        order = [ring[(start + j) % n] for j in range(n)]
        segment = max(MIN_BROADCAST_SEGMENT, length // BROADCAST_SEGMENTS) // 4 * 4
        segments = [(offset + lo, min(segment, length - lo)) for lo in range(0, length, segment)]
        tag = b.new_tag()
        for j, rank in enumerate(order):
            for so, sl in segments:
                if j > 0:
                    b.recv(rank, f"ring{i}", order[j - 1], "buf", so, sl, tag, "copy")
                if j < n - 1:
                    b.send(rank, f"ring{i}", order[j + 1], "buf", so, sl, tag)
    for dst in range(n):
        if dst != root:
            b.check(Check("copy", "buf", 0, nbytes, src=root, dst=dst))
    sched = b.build()
    sched.params.update(rings=[list(r) for r in rings], root=root)
    return sched


def direct_alltoall(n: int, slot_bytes: int) -> Schedule:
    """Rank s's ``in`` slot d to rank d's ``out`` slot s, for every pair at once. (Rank r's
    own slot is the caller's to copy: no op moves it.)"""
    b = _builder(n, "direct alltoall", "in", n * slot_bytes)
    b.buffer("out", n * slot_bytes)
    tag = b.new_tag()
    for src in range(n):
        for step in range(1, n):  # each rank starts with a different peer: no hot spot
            dst = (src + step) % n
            b.send(src, f"to{dst}", dst, "in", dst * slot_bytes, slot_bytes, tag)
            b.recv(dst, f"from{src}", src, "out", src * slot_bytes, slot_bytes, tag, "copy")
    sched = b.build()
    sched.params.update(slot_bytes=slot_bytes)
    return sched
