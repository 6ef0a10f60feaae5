"""Hierarchical AllReduce on a multi-dimensional network (Won et al. 2021; docs/algorithms.md
section 3).

Reduce-scatter dimension by dimension, then all-gather in reverse. In dimension d every
group (the servers differing only in coordinate d, see planner.topology.hierarchical) reduce-scatters
its current region into p_d shards, member j keeping shard j, so after dimension d each
server holds ``m_{d+1} = m_d / p_d`` bytes that all members of its next group share; the
all-gather undoes it. Dimension d carries ``2 m_d (p_d - 1) / p_d`` bytes per server.

Per dimension the block's algorithm, as a reduce-scatter half and an all-gather half (the
ring passes of planner.collectives.rings, which its ring AllReduce is made of, or the direct
ones below):

- ring block: a bidirectional ring (each shard halved, one half clockwise, one counter-
  clockwise, so both ring cables of a server carry traffic); one direction for p_d = 2;
- fc block: direct, every member sends shard j straight to member j (reduce-scatter) and
  its own shard to everyone (all-gather), all p_d - 1 cables at once;
- switch block: a ring through the switch (one uplink and one downlink busy per server).

Variants: ``chunks = 1`` runs the dimensions one after another (sequential, time
``sum_d t_d``); ``chunks = K > 1`` cuts the buffer into K chunks that flow through the
dimensions concurrently, one stream per (dimension, phase, direction), so different
dimensions work on different chunks at once (pipelined, time about ``max_d t_d`` plus the
fill and drain: the other dimensions' time of the first and last chunk). Chunks are tapered
(sizes 1, 1, 2, 2, 4, ..., 4, 2, 2, 1, 1): small chunks at both ends shorten fill and drain,
big ones in the middle keep the op count (the workers' per-op cost) down. For 64 MiB on the
12-server 4 x 3 fc x ring at the LIBRA split, 14 tapered chunks come within 3% of
``max_d t_d`` in the flow model, where 16 equal chunks lose 6%.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from contract.schedule import Check, Schedule, ScheduleBuilder, split_region

from ..topology.hierarchical import groups as dimension_groups
from .rings import Region, add_ring_all_gather, add_ring_reduce_scatter, done_ops, weighted_split

Deps = Mapping[int, Iterable[int]]
PIPELINE_CHUNKS = 14  # chunks of the pipelined variant (module docstring)
# Smallest chunk worth its ops when a gradient bucket is pipelined: each chunk costs every
# rank about 2 D + 2 sum_d (p_d - 1) operations, and the workers' per-op software cost
# (a fraction of a millisecond on two cores) must stay small next to the chunk's transfer.
MIN_PIPELINE_CHUNK_BYTES = 1 << 20
TAPER = (1, 1, 2, 2)  # relative sizes of the first chunks (mirrored at the end); middle ones 4
FULL_CHUNK = 4


def chunk_weights(chunks: int) -> list[int]:
    """Relative chunk sizes: tapered when there are enough chunks, else equal."""
    middle = chunks - 2 * len(TAPER)
    if middle < 1:
        return [1] * chunks
    return [*TAPER, *[FULL_CHUNK] * middle, *TAPER[::-1]]


def _add_direct_exchange(
    b: ScheduleBuilder,
    members: Sequence[int],
    buffer: str,
    pieces: Sequence[Region],
    stream: str,
    tag: int,
    after: Deps,
    reduce: bool,
) -> dict[int, list[int]]:
    """Every member of a fully connected group sends to every other at once (eager), then
    receives from each. Reduce-scatter: member j sends ``pieces[i]`` to member i and reduces
    the pieces j it receives; all-gather: it sends ``pieces[j]`` and copies the pieces i in."""
    k, last = len(members), {}
    for j, rank in enumerate(members):
        deps = list(after.get(rank, ()))
        order = [(j + s) % k for s in range(1, k)]  # staggered, so no member is everyone's first
        for i in order:
            sent = pieces[i] if reduce else pieces[j]
            if sent[1]:
                last[rank] = b.send(rank, stream, members[i], buffer, *sent, tag, after=deps)
                deps = []
        for i in order:
            got = pieces[j] if reduce else pieces[i]
            if got[1]:
                last[rank] = b.recv(
                    rank, stream, members[i], buffer, *got, tag, "reduce" if reduce else "copy", after=deps
                )
                deps = []
    return done_ops(members, after, last)


def add_direct_reduce_scatter(
    b: ScheduleBuilder,
    members: Sequence[int],
    buffer: str,
    pieces: Sequence[Region],
    stream: str,
    tag: int,
    after: Deps,
) -> dict[int, list[int]]:
    """Direct reduce-scatter on a fully connected group: member j sends ``pieces[i]`` to
    member i (all at once, eager), then reduces the p - 1 pieces j it receives."""
    return _add_direct_exchange(b, members, buffer, pieces, stream, tag, after, reduce=True)


def add_direct_all_gather(
    b: ScheduleBuilder,
    members: Sequence[int],
    buffer: str,
    pieces: Sequence[Region],
    stream: str,
    tag: int,
    after: Deps,
) -> dict[int, list[int]]:
    """Direct all-gather: member j sends ``pieces[j]`` to every other member and copies
    theirs in."""
    return _add_direct_exchange(b, members, buffer, pieces, stream, tag, after, reduce=False)


def _half(
    b: ScheduleBuilder,
    block: str,
    members: list[int],
    phase: str,
    buffer: str,
    shards: list[Region],
    d: int,
    tags: dict[str, int],
    after: Deps,
) -> dict[int, list[int]]:
    """One half (``phase`` "rs" or "ag") of one dimension over one group."""
    ring_half = add_ring_reduce_scatter if phase == "rs" else add_ring_all_gather
    if block == "fc":
        direct = add_direct_reduce_scatter if phase == "rs" else add_direct_all_gather
        return direct(b, members, buffer, shards, f"d{d}.{phase}", tags[phase], after)
    if block == "switch" or len(members) == 2:
        return ring_half(b, members, buffer, shards, f"d{d}.{phase}", tags[phase], after)
    itemsize = b.buffers[buffer].itemsize
    halves = [split_region(o, n, 2, itemsize) for o, n in shards]
    done_cw = ring_half(b, members, buffer, [h[0] for h in halves], f"d{d}.{phase}.cw", tags[phase], after)
    ccw = members[::-1]
    done_ccw = ring_half(b, ccw, buffer, [h[1] for h in halves][::-1], f"d{d}.{phase}.ccw", tags[phase + "ccw"], after)
    return {r: done_cw[r] + done_ccw[r] for r in members}


def pipeline_chunks(nbytes: int) -> int:
    """Chunks of a pipelined bucket of ``nbytes``: `PIPELINE_CHUNKS`, fewer for small
    buckets so no chunk is below `MIN_PIPELINE_CHUNK_BYTES`."""
    return max(1, min(PIPELINE_CHUNKS, nbytes // MIN_PIPELINE_CHUNK_BYTES))


def add_hierarchical_allreduce(
    b: ScheduleBuilder,
    dims: Sequence[int],
    blocks: Sequence[str],
    buffer: str,
    offset: int,
    length: int,
    chunks: int = 1,
    after: Deps | None = None,
    span: Sequence[int] | None = None,
) -> dict[int, list[int]]:
    """Append the hierarchical AllReduce of ``[offset, offset+length)`` to ``b``; returns per
    rank the ops that finish it. ``chunks`` > 1 pipelines the dimensions. ``span`` (default:
    all) lists the dimensions reduced over: the AllReduce groups are then the servers that
    share every coordinate outside ``span`` (planner.topology.hierarchical.layout_span)."""
    if chunks < 1:
        raise ValueError(f"chunks must be >= 1, got {chunks}")
    itemsize = b.buffers[buffer].itemsize
    groups = [dimension_groups(dims, d) for d in range(len(dims))]
    tags = [{k: b.new_tag() for k in ("rs", "rsccw", "ag", "agccw")} for _ in dims]
    used = sorted(range(len(dims)) if span is None else span)
    order = [("rs", d) for d in used] + [("ag", d) for d in reversed(used)]
    done: dict[int, list[int]] = {r: list((after or {}).get(r, ())) for r in range(b.ranks)}
    finished: dict[int, list[int]] = {r: [] for r in range(b.ranks)}
    for chunk in weighted_split(offset, length, chunk_weights(chunks), itemsize):
        region = {r: chunk for r in range(b.ranks)}  # each rank's region at the current level
        deps = dict(done)
        stack: list[dict[int, Region]] = []
        for phase, d in order:
            if phase == "rs":
                stack.append(dict(region))
            else:
                region = stack.pop()
            step: dict[int, list[int]] = {}
            for members in groups[d]:
                shards = split_region(*region[members[0]], dims[d], itemsize)
                step.update(_half(b, blocks[d], members, phase, buffer, shards, d, tags[d], deps))
                if phase == "rs":
                    region.update({m: shards[j] for j, m in enumerate(members)})
            deps = step
        for r in range(b.ranks):
            finished[r] += deps[r]
    return finished


def hierarchical_allreduce(dims: Sequence[int], blocks: Sequence[str], nbytes: int, chunks: int = 1) -> Schedule:
    """Hierarchical AllReduce of ``nbytes`` float32 over all servers of the ``dims`` network
    (sequential for ``chunks = 1``, pipelined otherwise), verified by every worker."""
    if nbytes <= 0 or nbytes % 4:
        raise ValueError(f"nbytes must be a positive multiple of 4, got {nbytes}")
    n = 1
    for p in dims:
        n *= p
    b = ScheduleBuilder(n, "hierarchical")
    b.buffer("grad", nbytes)
    add_hierarchical_allreduce(b, dims, blocks, "grad", 0, nbytes, chunks)
    b.check(Check("allreduce", "grad", 0, nbytes, groups=[list(range(n))]))
    b.params.update(dims=list(dims), blocks=list(blocks), chunks=chunks, nbytes=nbytes)
    return b.build()


def hierarchical_allreduce_for_plan(plan, nbytes: int, chunks: int = PIPELINE_CHUNKS) -> Schedule:
    """The hierarchical AllReduce on a `planner.topology.hierarchical.hierarchical_plan` plan."""
    if plan.topology != "hierarchical":
        raise ValueError(f"plan topology {plan.topology!r} is not hierarchical")
    return hierarchical_allreduce(plan.extra["dims"], plan.extra["blocks"], nbytes, chunks)
