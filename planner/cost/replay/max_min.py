"""Max-min fair rates of flows that share directed links, by progressive filling, with the
assured rates of planned flows reserved first: the TCP steady state the event replay gives
the messages on the wire (`events`).

Progressive filling (Bertsekas and Gallager, *Data Networks*, 2nd ed., 1992, section 6.5.2):
every unfixed flow's rate grows equally until a link is full; that link's flows are fixed at
its share, and the filling goes on with the others. Equivalently, the link of least share

    s(l) = (C(l) - sum of the rates already fixed on l) / (unfixed flows on l)

fixes its unfixed flows at s(l), repeatedly. A planned flow f (a plane of a per-destination
allocation, assured a(f)) first reserves

    a(f) * min over f's links l of min(1, C(l) * p(l) / n(l) / A(l))

where n(l) flows cross l, p(l) of them planned, A(l) their assured rates summed: scaled down
where the reservations would leave the plane-0 flows less than their head-count share, and
it then shares what the reservations leave as any flow does (the emulator's per-destination
HTB class: rate = the allocation, ceil = the cable).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass


@dataclass
@dataclass(slots=True, eq=False)
class Flow:
    """One connection (src, dst, plane): its waiting messages, and the one on the wire (a TCP
    stream serves its messages first in, first out). The rate model's flow is the connection
    while ``on_wire``: `max_min_rates` reads its ``links``, ``assured`` and ``seq`` and sets
    its ``rate``, ``reserved`` and ``fixed``; the other fields are the event replay's
    (`events.EventReplay`)."""

    index: int  # connections are numbered in order of first use
    src: int
    dst: int
    links: tuple[int, ...]  # link ids (`events.EventReplay.link_ids`) along its path
    relayed: bool  # crosses another server (host-based forwarding)
    assured: float  # bytes/s its plane's allocation guarantees (0: plane 0)
    queue: deque[tuple[int, int, int]]  # (tag, length, message number or -1) of the messages waiting behind it
    on_wire: bool = False
    # the message on the wire
    tag: int = 0
    length: int = 0
    msg: int = -1  # its number in the event replay's recorder (-1: not recorded)
    remaining: float = 0.0  # bytes left at time ``since``
    since: float = 0.0  # when ``rate`` was set
    rate: float = 0.0
    done_below: float = 0.0  # it is done once ``remaining`` falls to this (rounding leftovers)
    seq: int = 0  # launch order: reservations are summed in it
    reserved: float = 0.0  # of ``rate``, what its allocation reserves (`_reserve`)
    finish: float = 0.0  # when it ends at its current rate
    entry: int = 0  # its current entry in `events.EventReplay.ends` (older ones are stale)
    mark: int = 0  # `events.EventReplay.update_rates`: the pass that last reached it
    fixed: bool = False  # `max_min_rates`: its share is set

    def left(self, t: float) -> float:
        """Bytes left at time ``t`` (at its current rate since ``since``)."""
        return self.remaining - min(self.remaining, self.rate * (t - self.since))


def max_min_rates(flows: list[Flow], users: list[list[Flow]], capacity: list[float], held: bool = False) -> None:
    """Set every flow's ``rate`` to its max-min fair share (progressive filling) plus, for a
    planned flow, its assured rate, reserved first (`_reserve`).

    ``flows`` are every flow of the links they cross: ``users[link]`` lists a link's flows,
    all of them among ``flows``; ``capacity[link]`` is its bytes/s. The shares do not depend
    on the order of either (the flows a link fixes all take the same share); reservations
    are summed in launch order. With ``held``, ``users[link]`` may also list flows not in
    ``flows`` and marked ``fixed``: they keep their rates, which their links lose (what
    `events.EventReplay.update_rates` keeps below its threshold; no reservations then).
    The most contended link (least remaining capacity per unfixed flow) fixes its flows'
    share, which is subtracted from their other links; repeat. A link's fair share only grows
    as flows of other links are fixed ((R - s) / (c - 1) >= R / c when s <= R / c), so a heap
    with lazily dropped stale entries finds the next link in O(log L); ties go to the lower
    link id (ids follow the links' sorted order)."""
    reserving = any(f.assured for f in flows)
    if reserving:
        flows = sorted(flows, key=launch_order)
        _reserve(flows, users, capacity)
    remaining = list(capacity)  # indexed by link id: cheaper than a dict of the links touched
    count = [0] * len(capacity)
    links = []
    for f in flows:
        f.fixed = False
    for f in flows:
        for link in f.links:
            if not count[link]:
                if held:
                    n = 0
                    for g in users[link]:
                        if g.fixed:
                            remaining[link] -= g.rate
                        else:
                            n += 1
                    count[link] = n
                    remaining[link] = max(0.0, remaining[link])
                else:
                    count[link] = len(users[link])
                links.append(link)
    if reserving:
        for f in flows:
            if f.reserved:
                for link in f.links:
                    remaining[link] = max(0.0, remaining[link] - f.reserved)
    heap = [(remaining[link] / count[link], link) for link in links]
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    left = len(flows)
    while heap and left:
        share, link = pop(heap)
        c = count[link]
        if c == 0 or share != remaining[link] / c:
            continue  # stale: the link's share changed since this entry was pushed
        for f in users[link]:
            if f.fixed:
                continue
            f.rate = share + f.reserved
            f.fixed = True
            left -= 1
            for other in f.links:
                remaining[other] -= share
                c = count[other] - 1
                count[other] = c
                if c > 0 and other != link:
                    push(heap, (remaining[other] / c, other))


def _reserve(flows: list[Flow], users: list[list[Flow]], capacity: list[float]) -> None:
    """Set the rate reserved for each planned flow (``reserved``): its assured rate, scaled
    down on a link where the reservations exceed the planned flows' head-count share of the
    capacity (so plane-0 flows sharing the link are never starved) or the capacity itself."""
    assured: dict[int, float] = {}
    planned: dict[int, int] = {}
    for f in flows:
        if f.assured:
            for link in f.links:
                assured[link] = assured.get(link, 0.0) + f.assured
                planned[link] = planned.get(link, 0) + 1
    scale = {link: min(1.0, capacity[link] * planned[link] / len(users[link]) / a) for link, a in assured.items()}
    for f in flows:
        f.reserved = f.assured * min(scale[link] for link in f.links) if f.assured else 0.0


def launch_order(f: Flow) -> int:
    """The sort key of flows in launch order (reservations are summed in it)."""
    return f.seq
