"""Tree AllReduce schedules: plain binary tree and NCCL's double binary tree.

Tree AllReduce = reduce towards the root, then broadcast back down, pipelined: the region is
cut into segments; a node reduces segment s from all its children and forwards it to its
parent while segment s+1 is still coming up, and the broadcast of segment s starts as soon as
the root has it. Reduction and broadcast use opposite directions of each edge, so they run
as two concurrent streams (``up`` and ``down``).

Double binary tree (NCCL 2.4, ``ncclGetDtree``): two binary trees over the same ranks, the
second the mirror (even n) or a shift by one (odd n) of the first, so every rank is a leaf
in at least one tree; each tree carries half of the buffer. Tree edges are logical: on a
direct-connect topology most are relayed by the hosts' IP forwarding.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from contract.schedule import Check, Schedule, ScheduleBuilder, split_region

Deps = Mapping[int, Iterable[int]]
DEFAULT_SEGMENT_BYTES = 1 << 20  # the authors' simulator pipelines 1 MiB segments


def btree_parents(k: int) -> list[int]:
    """Parent of each position 0..k-1 in NCCL's binary tree (``ncclGetBtree``); root 0.

    A position's parent clears its lowest set bit and sets the next one up; when that
    overshoots k it just clears the bit. Root 0 has a single child (the highest power of two
    below k), as in NCCL."""
    parents = [-1] * k
    for r in range(1, k):
        bit = r & -r
        up = (r ^ bit) | (bit << 1)
        if up >= k:
            up = r ^ bit
        parents[r] = up
    return parents


def dbtree_parents(k: int) -> tuple[list[int], list[int]]:
    """The two trees of NCCL's double binary tree over positions 0..k-1.

    Tree 2 mirrors tree 1 (position r -> k-1-r) when k is even and shifts it by one when
    k is odd, so that no position is an inner node of both trees (k > 2)."""
    first = btree_parents(k)
    if k % 2 == 0:
        second = [-1 if first[k - 1 - r] < 0 else k - 1 - first[k - 1 - r] for r in range(k)]
    else:
        second = [-1 if first[(r - 1) % k] < 0 else (first[(r - 1) % k] + 1) % k for r in range(k)]
    return first, second


def children_of(parents: Sequence[int]) -> list[list[int]]:
    kids: list[list[int]] = [[] for _ in parents]
    for r, p in enumerate(parents):
        if p >= 0:
            kids[p].append(r)
    return kids


def check_tree(parents: Sequence[int]) -> int:
    """Return the root of ``parents`` or raise ValueError if it is not one tree."""
    roots = [r for r, p in enumerate(parents) if p < 0]
    if len(roots) != 1:
        raise ValueError(f"a tree needs exactly one root, got {roots}")
    for r in range(len(parents)):
        seen = set()
        while parents[r] >= 0:
            if r in seen or not 0 <= parents[r] < len(parents):
                raise ValueError(f"parents {list(parents)} has a cycle or a bad entry at {r}")
            seen.add(r)
            r = parents[r]
    return roots[0]


def add_tree_allreduce(
    b: ScheduleBuilder,
    members: Sequence[int],
    parents: Sequence[int],
    buffer: str,
    offset: int,
    length: int,
    stream_prefix: str = "tree",
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    after: Deps | None = None,
) -> dict[int, int]:
    """Append a pipelined reduce + broadcast of the region over the tree given by
    ``parents`` (positions into ``members``). Returns each rank's last op (of the ``down``
    stream, which finishes last)."""
    k = len(members)
    if len(parents) != k:
        raise ValueError(f"{len(parents)} parents for {k} members")
    check_tree(parents)
    itemsize = b.buffers[buffer].itemsize
    nseg = max(1, -(-length // max(segment_bytes, itemsize)))
    segments = [s for s in split_region(offset, length, nseg, itemsize) if s[1]]
    kids = children_of(parents)
    up_tag, down_tag = b.new_tag(), b.new_tag()
    up, down = f"{stream_prefix}up", f"{stream_prefix}down"
    after = after or {}
    last: dict[int, int] = {}
    for pos, rank in enumerate(members):
        parent = members[parents[pos]] if parents[pos] >= 0 else -1
        children = [members[c] for c in kids[pos]]
        up_deps = list(after.get(rank, ()))
        for so, sl in segments:
            seg_done = None
            for child in children:
                seg_done = b.recv(rank, up, child, buffer, so, sl, up_tag, "reduce", after=up_deps)
                up_deps = []
            if parent >= 0:
                seg_done = b.send(rank, up, parent, buffer, so, sl, up_tag, after=up_deps)
                up_deps = []
            # broadcast of this segment: after it is fully reduced (root) or sent up (others)
            down_deps = [seg_done] if seg_done is not None else list(after.get(rank, ()))
            if parent >= 0:
                last[rank] = b.recv(rank, down, parent, buffer, so, sl, down_tag, "copy", after=down_deps)
                down_deps = []
            for child in children:
                last[rank] = b.send(rank, down, child, buffer, so, sl, down_tag, after=down_deps)
                down_deps = []
    return last


def add_dbtree_allreduce(
    b: ScheduleBuilder,
    members: Sequence[int],
    buffer: str,
    offset: int,
    length: int,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    after: Deps | None = None,
) -> dict[int, list[int]]:
    """Append NCCL's double binary tree AllReduce: half of the region per tree."""
    first, second = dbtree_parents(len(members))
    itemsize = b.buffers[buffer].itemsize
    lasts: dict[int, list[int]] = {}
    for name, parents, (po, pl) in zip(("t0", "t1"), (first, second), split_region(offset, length, 2, itemsize)):
        if pl:
            for rank, op in add_tree_allreduce(b, members, parents, buffer, po, pl, name, segment_bytes, after).items():
                lasts.setdefault(rank, []).append(op)
    return lasts


def _schedule(n: int, nbytes: int, algorithm: str, add) -> Schedule:
    if nbytes <= 0 or nbytes % 4:
        raise ValueError(f"nbytes must be a positive multiple of 4, got {nbytes}")
    b = ScheduleBuilder(n, algorithm)
    b.buffer("grad", nbytes)
    add(b)
    b.check(Check("allreduce", "grad", 0, nbytes, groups=[list(range(n))]))
    return b.build()


def tree_allreduce(
    n: int, nbytes: int, segment_bytes: int = DEFAULT_SEGMENT_BYTES, parents: Sequence[int] | None = None
) -> Schedule:
    """Plain tree reduce + broadcast over all ranks (NCCL's binary tree by default, or
    any tree given as ``parents[rank]``, -1 for the root), pipelined in segments."""
    parents = list(parents) if parents is not None else btree_parents(n)
    sched = _schedule(
        n,
        nbytes,
        "tree",
        lambda b: add_tree_allreduce(b, list(range(n)), parents, "grad", 0, nbytes, "tree", segment_bytes),
    )
    sched.params.update(parents=parents, segment_bytes=segment_bytes, nbytes=nbytes)
    return sched


def dbtree_allreduce(n: int, nbytes: int, segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> Schedule:
    """NCCL-style double binary tree AllReduce over all ranks, pipelined in segments."""
    sched = _schedule(
        n, nbytes, "dbtree", lambda b: add_dbtree_allreduce(b, list(range(n)), "grad", 0, nbytes, segment_bytes)
    )
    first, second = dbtree_parents(n)
    sched.params.update(trees=[first, second], segment_bytes=segment_bytes, nbytes=nbytes)
    return sched
