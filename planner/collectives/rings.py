"""Ring collectives: the reduce-scatter and all-gather passes, and the AllReduces built on
them (one ring, TopoOpt's multi-ring, sub-group coset rings).

Two ring passes (`add_ring_reduce_scatter`, `add_ring_all_gather`) over k members and k
pieces of a region: in step s = 0 .. k-2 the member at ring position j sends one piece to
its successor and receives one from its predecessor, reducing it (reduce-scatter: position
j ends with the sum of piece j) or copying it (all-gather: position j starts with piece j,
everyone ends with all of them). Ring AllReduce (`add_ring_allreduce`) is a reduce-scatter
followed by an all-gather of the same pieces, 2 (k-1) steps; every member sends
2 (k-1) S / k bytes, the lower bound for a member with one link (docs/algorithms.md
section 7). The hierarchical AllReduce (planner.collectives.hierarchical) runs the same two
passes per dimension.

References: P. Patarasuk and X. Yuan, "Bandwidth optimal all-reduce algorithms for clusters
of workstations", J. Parallel Distrib. Comput. 69(2), 2009.

TopoOpt multi-ring (docs/algorithms.md section 1): the buffer is split across several rings (for every chosen
stride p, the p-ring and its reverse, the (n-p)-ring), each in its own stream, all at once,
so all d interfaces of every server carry traffic: T = 2 (k-1) S / (k P B).

Sub-group AllReduce (docs/algorithms.md section 1): a group of size g | n sits on a coset {s, s + n/g, ...};
its rings have strides (n/g) * k with gcd(k, g) = 1. A ring edge between members that are
not cabled is a logical edge: the schedule names the logical peer and the hosts' IP
forwarding relays the packets along the plan's coin-change route.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from math import gcd

import numpy as np

from contract.schedule import MODES, RECV, SEND, Check, Schedule, ScheduleBuilder, split_region

Deps = Mapping[int, Iterable[int]]
Region = tuple[int, int]  # (offset, length) in bytes


def stride_ring(n: int, stride: int, start: int = 0, members: int | None = None) -> list[int]:
    """The order the ``stride``-ring visits from ``start``: start, start+p, ... (mod n)."""
    k = n // gcd(n, stride % n or n) if members is None else members
    return [(start + i * stride) % n for i in range(k)]


def topoopt_rings(n: int, strides: Sequence[int]) -> list[list[int]]:
    """Both directions of every chosen full-ring stride: rings p and n-p for each p.

    For n = 2 (or p = n/2) the reverse ring equals the forward one; it is still returned
    twice because the two directions of a cable are separate links."""
    rings = []
    for p in strides:
        if gcd(p, n) != 1:
            raise ValueError(f"stride {p} does not visit all {n} servers (gcd != 1)")
        rings.append(stride_ring(n, p))
        rings.append(stride_ring(n, n - p))
    return rings


def coset_rings(n: int, group_size: int, ks: Sequence[int]) -> list[list[list[int]]]:
    """Rings of every coset group of size ``group_size`` (docs/algorithms.md section 1).

    Returns, for each coset s = 0 .. n/g - 1, the ring orders for strides (n/g) * k (k in
    ``ks``, gcd(k, g) = 1), each used in both directions."""
    if group_size < 1 or n % group_size:
        raise ValueError(f"group size {group_size} does not divide n = {n}")
    step = n // group_size
    groups = []
    for s in range(step):
        rings = []
        for k in ks:
            if gcd(k, group_size) != 1 and group_size > 1:
                raise ValueError(f"k = {k} shares a factor with group size {group_size}")
            p = step * k
            rings.append(stride_ring(n, p, s, group_size))
            rings.append(stride_ring(n, n - p, s, group_size))
        groups.append(rings)
    return groups


REDUCE, COPY = "reduce", "copy"


def _ring_pass(
    b: ScheduleBuilder,
    ring: Sequence[int],
    buffer: str,
    pieces: Sequence[Region],
    stream: str,
    tag: int,
    after: Deps,
    mode: str,
) -> dict[int, int]:
    """The k - 1 steps of one ring pass; returns each rank's last op (ranks with no op left out).

    Step s = 0 .. k-2: position j sends piece (j - s - a) mod k to its successor, then receives
    piece (j - s - a - 1) mod k from its predecessor and reduces or copies it (``mode``), with
    a = 1 to reduce (reduce-scatter) and a = 0 to copy (all-gather); empty pieces are
    skipped. A rank's first op waits for ``after[rank]``; the others follow it on ``stream``.
    Every position's ops are one row of arrays (`ScheduleBuilder.extend_columns`), copied
    out of the pass's table so that each rank's chunks are freed as `build` joins them."""
    k, shift, last = len(ring), 1 if mode == REDUCE else 0, {}
    if k < 2:
        return last
    offsets = np.array([o for o, _ in pieces], np.int64)
    lengths = np.array([n for _, n in pieces], np.int64)
    dtype = np.int32 if offsets.max() + lengths.max() < 2**31 else np.int64
    steps = np.arange(k - 1)
    sent = (np.arange(k)[:, None] - steps - shift) % k  # [position, step]: the piece sent
    piece = np.stack([sent, (sent - 1) % k], axis=2).reshape(k, 2 * (k - 1))  # send, recv, send, ...
    op_offsets, op_lengths = offsets.astype(dtype)[piece], lengths.astype(dtype)[piece]
    kinds = np.tile(np.array([SEND, RECV], np.int8), k - 1)
    modes = np.tile(np.array([0, MODES.index(mode)], np.int8), k - 1)
    is_send = kinds == SEND
    whole = bool((lengths > 0).all())
    for j, rank in enumerate(ring):
        peers = np.where(is_send, ring[(j + 1) % k], ring[(j - 1) % k]).astype(np.int32)
        if whole:
            kind, peer, offset, length, m = kinds, peers, op_offsets[j].copy(), op_lengths[j].copy(), modes
        else:
            keep = op_lengths[j] > 0
            kind, peer, offset, length, m = (
                kinds[keep],
                peers[keep],
                op_offsets[j][keep],
                op_lengths[j][keep],
                modes[keep],
            )
        if len(kind):
            first = b.extend_columns(rank, stream, kind, peer, buffer, offset, length, tag, m, after.get(rank, ()))
            last[rank] = first + len(kind) - 1
    return last


def done_ops(members: Sequence[int], after: Deps, last: Mapping[int, int]) -> dict[int, list[int]]:
    """Per member the ops that mark its part as done (its last op, else its dependencies)."""
    return {r: [last[r]] if r in last else list(after.get(r, ())) for r in members}


def add_ring_reduce_scatter(
    b: ScheduleBuilder, ring: Sequence[int], buffer: str, pieces: Sequence[Region], stream: str, tag: int, after: Deps
) -> dict[int, list[int]]:
    """Ring reduce-scatter: ``ring[j]`` ends with the sum of everyone's ``pieces[j]`` (piece
    q travels q+1 -> q+2 -> ... -> q, reduced at every hop). Returns per member the ops that
    finish its part."""
    return done_ops(ring, after, _ring_pass(b, ring, buffer, pieces, stream, tag, after, REDUCE))


def add_ring_all_gather(
    b: ScheduleBuilder, ring: Sequence[int], buffer: str, pieces: Sequence[Region], stream: str, tag: int, after: Deps
) -> dict[int, list[int]]:
    """Ring all-gather: ``ring[j]`` starts with ``pieces[j]``, everyone ends with all of them
    (piece q travels q -> q+1 -> ... -> q-1, copied at every hop). Returns per member the ops
    that finish its part."""
    return done_ops(ring, after, _ring_pass(b, ring, buffer, pieces, stream, tag, after, COPY))


def add_ring_allreduce(
    b: ScheduleBuilder,
    ring: Sequence[int],
    buffer: str,
    offset: int,
    length: int,
    stream: str,
    after: Deps | None = None,
    tag: int | None = None,
) -> dict[int, int]:
    """Append ring AllReduce of region ``[offset, offset+length)`` over ``ring`` to ``b``: the
    reduce-scatter pass, then the all-gather pass on the same stream and tag.

    The region is cut into k chunks; position j reduces chunk (j + 1) mod k (its piece j), so
    ``pieces[q] = chunks[(q + 1) mod k]``. ``after[rank]`` lists ops the rank's first op of
    this collective waits on (e.g. the backward compute of the bucket). Returns each member's
    last op id (members with nothing to do are left out) so later ops can wait for it."""
    k = len(ring)
    if len(set(ring)) != k:
        raise ValueError(f"ring {list(ring)} visits a rank twice")
    chunks = split_region(offset, length, k, b.buffers[buffer].itemsize)
    pieces = [chunks[(q + 1) % k] for q in range(k)]
    tag = b.new_tag() if tag is None else tag
    after = after or {}
    reduced = _ring_pass(b, ring, buffer, pieces, stream, tag, after, REDUCE)
    waiting = {r: after.get(r, ()) for r in ring if r not in reduced}  # ranks whose first op is a copy
    return {**reduced, **_ring_pass(b, ring, buffer, pieces, stream, tag, waiting, COPY)}


def add_multiring_allreduce(
    b: ScheduleBuilder,
    rings: Sequence[Sequence[int]],
    buffer: str,
    offset: int,
    length: int,
    stream_prefix: str = "ring",
    weights: Sequence[float] | None = None,
    after: Deps | None = None,
) -> dict[int, list[int]]:
    """Split the region across ``rings`` (by ``weights``, equal by default) and run one ring
    AllReduce per ring in its own stream ``{stream_prefix}{i}``, all concurrently.

    Returns, per rank, the last op of each ring (wait on all of them for completion)."""
    if not rings:
        raise ValueError("no rings")
    itemsize = b.buffers[buffer].itemsize
    weights = list(weights) if weights is not None else [1.0] * len(rings)
    parts = weighted_split(offset, length, weights, itemsize)
    lasts: dict[int, list[int]] = {}
    for i, (ring, (po, pl)) in enumerate(zip(rings, parts)):
        if pl == 0:
            continue
        for rank, op in add_ring_allreduce(b, ring, buffer, po, pl, f"{stream_prefix}{i}", after).items():
            lasts.setdefault(rank, []).append(op)
    return lasts


def weighted_split(offset: int, length: int, weights: Sequence[float], itemsize: int = 4) -> list[tuple[int, int]]:
    """Consecutive item-aligned pieces of the region in proportion to ``weights``."""
    if any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"bad weights {list(weights)}")
    items = length // itemsize
    total = float(sum(weights))
    cum = 0.0
    bounds = [0]
    for w in weights:
        cum += w
        bounds.append(round(items * cum / total))
    return [(offset + bounds[i] * itemsize, (bounds[i + 1] - bounds[i]) * itemsize) for i in range(len(weights))]


def _allreduce_schedule(n: int, nbytes: int, algorithm: str, groups: list[list[int]], add) -> Schedule:
    if nbytes <= 0 or nbytes % 4:
        raise ValueError(f"nbytes must be a positive multiple of 4, got {nbytes}")
    b = ScheduleBuilder(n, algorithm)
    b.buffer("grad", nbytes)
    add(b)
    b.check(Check("allreduce", "grad", 0, nbytes, groups=groups))
    return b.build()


def ring_allreduce(n: int, nbytes: int, order: Sequence[int] | None = None) -> Schedule:
    """Single-ring AllReduce of ``nbytes`` float32 over all ``n`` ranks (default order
    0, 1, ..., n-1)."""
    ring = list(order) if order is not None else list(range(n))
    if sorted(ring) != list(range(n)):
        raise ValueError(f"ring order {ring} is not a permutation of 0..{n - 1}")
    sched = _allreduce_schedule(
        n, nbytes, "ring", [list(range(n))], lambda b: add_ring_allreduce(b, ring, "grad", 0, nbytes, "ring0")
    )
    sched.params.update(rings=[ring], nbytes=nbytes)
    return sched


def multiring_allreduce(
    n: int,
    nbytes: int,
    rings: Sequence[Sequence[int]],
    algorithm: str = "topoopt",
    weights: Sequence[float] | None = None,
) -> Schedule:
    """TopoOpt multi-ring AllReduce: the buffer split across ``rings`` (server orders, e.g.
    `topoopt_rings(n, strides)`) equally, or in proportion to ``weights`` (each ring's
    bottleneck rate), one concurrent stream per ring."""
    for ring in rings:
        if sorted(ring) != list(range(n)):
            raise ValueError(f"ring {list(ring)} is not a permutation of 0..{n - 1}")
    sched = _allreduce_schedule(
        n,
        nbytes,
        algorithm,
        [list(range(n))],
        lambda b: add_multiring_allreduce(b, rings, "grad", 0, nbytes, weights=weights),
    )
    sched.params.update(rings=[list(r) for r in rings], nbytes=nbytes)
    if weights is not None:
        sched.params.update(weights=[float(w) for w in weights])
    return sched


def grouped_allreduce(
    n: int, nbytes: int, groups: Sequence[Sequence[Sequence[int]]], algorithm: str = "subgroup"
) -> Schedule:
    """Several disjoint groups AllReduce the same-sized region at once, each over its own
    rings (``groups[i]`` is a list of ring orders over the group's members)."""
    seen: set[int] = set()
    members = []
    for rings in groups:
        m = sorted(rings[0])
        for ring in rings:
            if sorted(ring) != m:
                raise ValueError(f"rings of one group visit different members: {list(ring)}")
        if seen & set(m):
            raise ValueError(f"groups overlap on ranks {sorted(seen & set(m))}")
        seen |= set(m)
        members.append(m)

    def add(b: ScheduleBuilder) -> None:
        for rings in groups:
            add_multiring_allreduce(b, rings, "grad", 0, nbytes)

    sched = _allreduce_schedule(n, nbytes, algorithm, members, add)
    sched.params.update(groups=[[list(r) for r in g] for g in groups], nbytes=nbytes)
    return sched


def subgroup_allreduce(n: int, nbytes: int, group_size: int, ks: Sequence[int] = (1,)) -> Schedule:
    """Every coset group of size ``group_size`` AllReduces over its coset rings of strides
    (n/g) * k, k in ``ks`` (both directions). Edges between members that are not cabled
    are logical: the emulated hosts relay them."""
    sched = grouped_allreduce(n, nbytes, coset_rings(n, group_size, ks))
    sched.params.update(group_size=group_size, ks=list(ks))
    return sched
