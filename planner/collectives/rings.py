"""Ring AllReduce schedules: one ring, TopoOpt's multi-ring, and sub-group coset rings.

Ring AllReduce over k members (reduce-scatter then all-gather, docs/algorithms.md section 6):
the region is cut into k chunks; in reduce-scatter step s the member at ring position j
sends chunk (j - s) mod k to its successor and reduces chunk (j - s - 1) mod k received
from its predecessor; after k-1 steps position j holds the full sum of chunk (j + 1) mod k.
All-gather then circulates the reduced chunks for k-1 more steps (receive = copy). Every
member sends 2 (k-1) S / k bytes, the lower bound of docs/algorithms.md section 7 for one link.

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

from contract.schedule import Check, Schedule, ScheduleBuilder, split_region

Deps = Mapping[int, Iterable[int]]


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
    """Append ring AllReduce of region ``[offset, offset+length)`` over ``ring`` to ``b``.

    ``after[rank]`` lists ops the rank's first op of this collective waits on (e.g. the
    backward compute of the bucket). Returns each member's last op id (or its dependency
    when the member has nothing to do) so later ops can wait for the collective."""
    chunks = split_region(offset, length, len(ring), b.buffers[buffer].itemsize)
    return add_ring_steps(b, ring, buffer, chunks, stream, ("reduce", "copy"), after, tag)


def add_ring_steps(
    b: ScheduleBuilder,
    ring: Sequence[int],
    buffer: str,
    chunks: Sequence[tuple[int, int]],
    stream: str,
    phases: Sequence[str] = ("reduce", "copy"),
    after: Deps | None = None,
    tag: int | None = None,
) -> dict[int, int]:
    """The ring's steps over ``chunks`` (k = len(ring) regions, (offset, length) each):
    ``"reduce"`` is reduce-scatter (k-1 steps; afterwards position j holds the sum of chunk
    (j + 1) mod k), ``"copy"`` all-gather (k-1 steps circulating chunk (j + 1) mod k from
    position j); both in turn are the ring AllReduce. Chunk c = rank ring[c - 1]'s own slot
    makes them a reduce-scatter or an all-gather of one slot per rank. Returns each member's
    last op id."""
    k = len(ring)
    if len(set(ring)) != k:
        raise ValueError(f"ring {list(ring)} visits a rank twice")
    if len(chunks) != k:
        raise ValueError(f"{len(chunks)} chunks for a ring of {k}")
    tag = b.new_tag() if tag is None else tag
    after = after or {}
    last: dict[int, int] = {}
    for j, rank in enumerate(ring):
        right, left = ring[(j + 1) % k], ring[(j - 1) % k]
        deps = list(after.get(rank, ()))
        steps = []
        for mode in phases:
            first = j if mode == "reduce" else j + 1
            steps += [((first - s) % k, mode) for s in range(k - 1)]
        for send_chunk, mode in steps:
            recv_chunk = (send_chunk - 1) % k
            so, sl = chunks[send_chunk]
            ro, rl = chunks[recv_chunk]
            if sl:
                last[rank] = b.send(rank, stream, right, buffer, so, sl, tag, after=deps)
                deps = []
            if rl:
                last[rank] = b.recv(rank, stream, left, buffer, ro, rl, tag, mode, after=deps)
                deps = []
    return last


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
