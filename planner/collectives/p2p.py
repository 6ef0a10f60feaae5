"""Point-to-point model-parallel transfers (activations forward, their gradients backward).

Each transfer (src, dst, nbytes) gets its own region of the ``act`` buffer (the same offsets
on every rank), so transfers never overwrite each other's data and the receiver's region can
be checked against the sender's input. Every (src -> dst) pair has its own stream on both
sides, so a rank sends to and receives from all its partners at once (DLRM's all-to-all
between embedding-table owners and the others is a list of such transfers).

Given a network with a per-destination allocation (docs/algorithms.md section 4.1), a
transfer between an allocated pair is split over the pair's planes 1..P: consecutive pieces
of its region sized in proportion to the planes' rates (whole items), one send/recv per
plane, each plane with its own tag (planes are separate connections, so their messages may
overtake one another). One copy check still covers the whole region.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from contract.network import Network
from contract.schedule import Check, Schedule, ScheduleBuilder

Deps = Mapping[int, Iterable[int]]


def add_p2p_transfers(
    b: ScheduleBuilder,
    transfers: Sequence[tuple[int, int, int]],
    buffer: str = "act",
    base_offset: int = 0,
    stream_prefix: str = "mp",
    after: Deps | None = None,
    check: bool = True,
    network: Network | None = None,
) -> dict[int, list[int]]:
    """Append the transfers; grow ``buffer`` to hold them from ``base_offset`` on; split a
    transfer over its pair's planes when ``network`` has an allocation for it.

    Returns, per rank, the ops that finish its part (sends and recvs)."""
    after = after or {}
    offset = base_offset
    itemsize = 4
    regions = []
    for src, dst, nbytes in transfers:
        if src == dst:
            raise ValueError(f"transfer from rank {src} to itself")
        if nbytes <= 0 or nbytes % itemsize:
            raise ValueError(f"transfer {src}->{dst}: bytes must be a positive multiple of {itemsize}, got {nbytes}")
        regions.append((src, dst, offset, nbytes))
        offset += nbytes
    b.buffer(buffer, offset)
    tag = b.new_tag()
    planes = network.planes if network is not None else 0
    plane_tags = [tag] + [b.new_tag() for _ in range(planes)]
    done: dict[int, list[int]] = {}
    for src, dst, off, nbytes in regions:
        for plane, piece_off, piece in plane_pieces(network, src, dst, off, nbytes, itemsize):
            done.setdefault(src, []).append(
                b.send(
                    src,
                    f"{stream_prefix}>{dst}",
                    dst,
                    buffer,
                    piece_off,
                    piece,
                    plane_tags[plane],
                    after=after.get(src, ()),
                    plane=plane,
                )
            )
            done.setdefault(dst, []).append(
                b.recv(
                    dst,
                    f"{stream_prefix}<{src}",
                    src,
                    buffer,
                    piece_off,
                    piece,
                    plane_tags[plane],
                    "copy",
                    after=after.get(dst, ()),
                )
            )
        if check:
            b.check(Check("copy", buffer, off, nbytes, src=src, dst=dst))
    return done


def plane_pieces(
    network: Network | None, src: int, dst: int, offset: int, nbytes: int, itemsize: int = 4
) -> list[tuple[int, int, int]]:
    """``(plane, offset, length)`` pieces of a transfer's region: the whole region on plane 0
    when the pair has no allocation, else one piece per plane in proportion to its rate
    (largest remainders get the leftover items; planes whose piece is empty are skipped)."""
    pair = network.allocation_of(src, dst) if network is not None else None
    if pair is None:
        return [(0, offset, nbytes)]
    items = nbytes // itemsize
    exact = [items * share.gbps / pair.gbps for share in pair.paths]
    counts = [int(x) for x in exact]
    for p in sorted(range(len(exact)), key=lambda p: counts[p] - exact[p])[: items - sum(counts)]:
        counts[p] += 1
    pieces, pos = [], offset
    for p, count in enumerate(counts, start=1):
        if count:
            pieces.append((p, pos, count * itemsize))
            pos += count * itemsize
    return pieces


def p2p_transfers(n: int, transfers: Sequence[tuple[int, int, int]]) -> Schedule:
    """A schedule of model-parallel transfers only (e.g. an all-to-all)."""
    for src, dst, _ in transfers:
        if not (0 <= src < n and 0 <= dst < n):
            raise ValueError(f"transfer {src}->{dst} names a rank outside 0..{n - 1}")
    b = ScheduleBuilder(n, "p2p")
    add_p2p_transfers(b, transfers)
    b.params["transfers"] = [list(t) for t in transfers]
    return b.build()


def all_to_all(ranks: Sequence[int], nbytes: int) -> list[tuple[int, int, int]]:
    """Transfers of ``nbytes`` from every rank of ``ranks`` to every other one."""
    return [(s, d, nbytes) for s in ranks for d in ranks if s != d]
