"""Flow-level prediction of a schedule's run time on a plan's network.

This is the model the end-to-end run compares its measurements with, so it executes
exactly the schedule the workers run (contract.schedule), op by op:

- streams run concurrently; ops of one stream in order; an op also waits for its ``after``
  ops (the same rules the workers' executor follows);
- ``compute`` occupies its stream for its seconds;
- ``send`` is eager: it hands a message to the (src, dst) connection and the stream goes
  on. A connection is one TCP stream, so messages between one pair are served first in,
  first out (only the head message is on the wire);
- a send on plane ``p >= 1`` (a per-destination allocation, docs/algorithms.md section 4.1)
  is its own connection and follows ``Network.plane_path(src, dst, p)`` instead, with its
  allocated rate assured (the emulator's per-destination HTB class: rate = the allocation,
  ceil = the cable): such flows first get their assured rates (scaled down on a link where
  plane-0 flows would otherwise get less than their head-count share), then every flow
  shares what is left of each link max-min fairly;
- every message is one flow along the plan's route (``Plan.path``: relayed hops included,
  the forwarding tax of docs/algorithms.md section 4); directed links are shared max-min fairly among
  the flows crossing them (the TCP steady state, computed by progressive filling), each at
  the TCP goodput of the link (payload / wire bytes at the MTU); where parallel cables join
  two nodes the link is their sum, but one connection gets at most one cable (a multipath
  route hashes it onto one: ``Network.connection_cap``, a link of its own in the sharing);
- a message arrives ``hops * alpha`` after its last byte left (per-hop latency, 1.5) and a
  ``recv`` completes when its message has arrived and been reduced or copied
  (``reduce_bytes / reduce_bytes_per_s``, ``reduce_bytes`` capped at the size of the last
  pipelined chunk: the executor reduces chunks as they arrive);
- every send and recv costs the rank ``op_overhead_s`` of processor time (the workers'
  software cost per op, measured on the machine: see topolab.calibrate); a rank's ops
  take turns on its processor, so many small ops add up as they do in the workers. With
  ``Network.cores`` the ranks share that many processors, as the workers of one machine
  share its cores: the ranks with an op due share the cores equally, at most one each
  (processor sharing, kept in virtual time: `_Replay.cpu_submit`), so an op costs more while
  many ranks are busy and ``op_overhead_s`` alone when few are; a recv's reduce follows it.

One module (over 300 lines): the network description, the rate model (max-min fairness with
reservations) and the replays that use them change together.

Two replays, one prediction. When no two connections ever share a link (TopoOpt's rings: each
ring edge is a cable of its own) and ops cost no processor time, every message runs alone at
its path's rate and each op's end follows from the ops it waits for: `_dedicated_replay`
computes them in rounds over the schedule's arrays (`contract.schedule.Program`), the next op
of every stream at once, a ring step per round on all ranks (about 0.1 us per op). Any other
schedule is replayed event by event (`_Replay`), which the first one agrees with to rounding
(`_dedicated_replay`'s docstring). Cost of the event replay (`benchmarks/scale.py`): a few
microseconds per op, and the ops of an iteration grow as n^2 (a ring step is a send and a
recv on every rank). A flow that starts or ends changes the max-min rates only of flows at
or above a threshold (`_Replay.update_rates`), and a message that follows one on the same
connection changes none, so the replay solves again only those: in DLRM's iteration at 128
servers (an all-to-all of 16,256 messages beside the AllReduce rings) a solve takes 1.7
flows on average and at most 2,032 (solving every flow sharing a link with the change,
transitively, made those phases grow as n^3).

The prediction is in the network's own time unit: give it emulated link rates to predict an
emulated run, then divide by the time-scale factor to get the real cluster's time.

`predict_timeline` runs the same replay and records beside it when each op started and ended
and when each message was on the wire (`Timeline`, of the first ranks only if asked): what a
trace of the predicted iteration draws (topolab.trace_events). Recording changes no time.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from contract.emulation import EmulatedRates
from contract.network import cable_capacities, connection_capacities
from contract.physics import DEFAULT_MTU, REDUCE_BYTES_PER_S, cable_goodput
from contract.schedule import COMPUTE as COMPUTE_CODE
from contract.schedule import RECV as RECV_CODE
from contract.schedule import SEND as SEND_CODE
from contract.schedule import Program, Schedule

from .collector import collector_paused


@dataclass
class Network:
    """Directed link capacities (bytes/s of goodput), routes and per-hop latency."""

    capacity: dict[tuple[int, int], float]
    path: Callable[[int, int], list[int]]
    alpha_s: float = 0.0
    reduce_bytes_per_s: float = REDUCE_BYTES_PER_S
    op_overhead_s: float = 0.0
    reduce_cap_bytes: float = float("inf")
    servers: int | None = None  # nodes >= servers are switches: crossing them is not relaying
    plane_path: Callable[[int, int, int], list[int]] | None = None  # planes >= 1 (allocated paths)
    assured: dict[tuple[int, int, int], float] = field(default_factory=dict)  # (src, dst, plane) -> bytes/s
    # directed links of parallel cables: the most one connection gets (one cable's goodput)
    connection_cap: dict[tuple[int, int], float] = field(default_factory=dict)
    # processors the ranks share (None: each rank has its own); with them, ``op_overhead_s``
    # is an op's processor time on one of them (`_Replay`'s shared processors)
    cores: int | None = None
    _paths: dict[tuple[int, int, int], list[tuple[int, int]]] = field(default_factory=dict, repr=False)

    def connection_limit(self, path: list[tuple[int, int]]) -> float | None:
        """The most one connection along ``path`` gets where it crosses parallel cables
        (one cable's goodput, `connection_cap`), when that is below its links' capacities;
        else None."""
        caps = [self.connection_cap[link] for link in path if link in self.connection_cap]
        if not caps:
            return None
        limit = min(caps)
        return limit if limit < min(self.capacity[link] for link in path) else None

    def links(self, src: int, dst: int, plane: int = 0) -> list[tuple[int, int]]:
        key = (src, dst, plane)
        if key not in self._paths:
            if plane and self.plane_path is None:
                raise ValueError(f"a send from {src} to {dst} on plane {plane}, but the network has no allocation")
            nodes = self.plane_path(src, dst, plane) if plane and self.plane_path else self.path(src, dst)
            self._paths[key] = list(zip(nodes, nodes[1:]))
        return self._paths[key]


def plan_network(
    plan,
    link_bps: float | None = None,
    mtu: int = DEFAULT_MTU,
    alpha_s: float | None = None,
    reduce_bytes_per_s: float = REDUCE_BYTES_PER_S,
    op_overhead_s: float = 0.0,
    reduce_cap_bytes: float = float("inf"),
    destination_classes: bool = True,
    rates: EmulatedRates | None = None,
    cores: int | None = None,
) -> Network:
    """A `Network` for ``plan``: each cable gives both directions its goodput, parallel
    cables add up (`contract.network.cable_capacities`), and one connection gets one of them
    (`contract.network.connection_capacities`). ``rates``: the cables as an emulated
    network runs them (`contract.emulation.EmulatedRates`: its rates and its MTU, which
    replaces ``mtu``); ``link_bps`` is the shorthand for a plan link of ``plan.link_gbps``
    emulated at ``link_bps``; by default the plan's own rates are used.
    ``destination_classes`` off: an allocation's planes are routed but their rates are not
    assured (the emulator's ``destination_classes = False``). ``cores``: the processors all
    ranks share (`Network.cores`; None: one each)."""
    if rates is None and link_bps is not None:
        rates = EmulatedRates(plan.link_gbps, link_bps / 1e6, mtu)
    cap = cable_capacities(plan.links, mtu) if rates is None else rates.capacities(plan.links)
    per_connection = (
        connection_capacities(plan.links, mtu) if rates is None else rates.connection_capacities(plan.links)
    )

    def assured_of(gbps: float) -> float:  # bytes/s of goodput of an allocated path's rate
        return cable_goodput(gbps * 1e9, mtu) if rates is None else rates.goodput(gbps)

    alpha = plan.latency_us * 1e-6 if alpha_s is None else alpha_s
    network = plan.network
    assured = {
        (pair.src, pair.dst, plane): assured_of(share.gbps)
        for pair in network.allocation
        for plane, share in enumerate(pair.paths, start=1)
        if destination_classes
    }
    return Network(
        dict(cap),
        plan.path,
        alpha,
        reduce_bytes_per_s,
        op_overhead_s,
        reduce_cap_bytes,
        servers=plan.servers,
        plane_path=network.plane_path if network.allocation else None,
        assured=assured,
        connection_cap=per_connection,
        cores=cores,
    )


@dataclass
class Prediction:
    """What the model predicts for one execution of a schedule."""

    seconds: float  # makespan
    rank_seconds: list[float]  # when each rank's last op ends
    link_bytes: dict[tuple[int, int], float]  # bytes each directed link carried
    relayed_bytes: dict[tuple[int, int], float]  # of those, bytes relayed by another server
    stream_end: dict[tuple[int, str], float] = field(default_factory=dict)  # (rank, stream) -> its last op's end

    def link_bytes_list(self) -> list[dict]:
        return [{"src": a, "dst": b, "bytes": v} for (a, b), v in sorted(self.link_bytes.items())]

    def relayed_bytes_list(self) -> list[dict]:
        return [{"src": a, "dst": b, "bytes": v} for (a, b), v in sorted(self.relayed_bytes.items())]


@dataclass
@dataclass(slots=True, eq=False)
class _Flow:
    """One connection (src, dst, plane): its waiting messages, and the one on the wire (a TCP
    stream serves its messages first in, first out). The rate model's flow is the connection
    while ``on_wire``."""

    index: int  # connections are numbered in order of first use
    src: int
    dst: int
    links: tuple[int, ...]  # link ids (`_Replay.link_ids`) along its path
    relayed: bool  # crosses another server (host-based forwarding)
    assured: float  # bytes/s its plane's allocation guarantees (0: plane 0)
    queue: deque[tuple[int, int, int]]  # (tag, length, message number or -1) of the messages waiting behind it
    on_wire: bool = False
    # the message on the wire
    tag: int = 0
    length: int = 0
    msg: int = -1  # its number in a `_Recorder` (-1: not recorded)
    remaining: float = 0.0  # bytes left at time ``since``
    since: float = 0.0  # when ``rate`` was set
    rate: float = 0.0
    done_below: float = 0.0  # it is done once ``remaining`` falls to this (rounding leftovers)
    seq: int = 0  # launch order: reservations are summed in it
    reserved: float = 0.0  # of ``rate``, what its allocation reserves (`_reserve`)
    finish: float = 0.0  # when it ends at its current rate
    entry: int = 0  # its current entry in `_Replay.ends` (older ones are stale)
    mark: int = 0  # `_Replay.update_rates`: the pass that last reached it
    fixed: bool = False  # `max_min_rates`: its share is set

    def left(self, t: float) -> float:
        """Bytes left at time ``t`` (at its current rate since ``since``)."""
        return self.remaining - min(self.remaining, self.rate * (t - self.since))


def max_min_rates(flows: list[_Flow], users: list[list[_Flow]], capacity: list[float], held: bool = False) -> None:
    """Set every flow's ``rate`` to its max-min fair share (progressive filling) plus, for a
    planned flow, its assured rate, reserved first (`_reserve`).

    ``flows`` are every flow of the links they cross: ``users[link]`` lists a link's flows,
    all of them among ``flows``; ``capacity[link]`` is its bytes/s. The shares do not depend
    on the order of either (the flows a link fixes all take the same share); reservations
    are summed in launch order. With ``held``, ``users[link]`` may also list flows not in
    ``flows`` and marked ``fixed``: they keep their rates, which their links lose (what
    `_Replay.update_rates` keeps below its threshold; no reservations then).
    The most contended link (least remaining capacity per unfixed flow) fixes its flows'
    share, which is subtracted from their other links; repeat. A link's fair share only grows
    as flows of other links are fixed ((R - s) / (c - 1) >= R / c when s <= R / c), so a heap
    with lazily dropped stale entries finds the next link in O(log L); ties go to the lower
    link id (ids follow the links' sorted order)."""
    reserving = any(f.assured for f in flows)
    if reserving:
        flows = sorted(flows, key=_launch_order)
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


def _reserve(flows: list[_Flow], users: list[list[_Flow]], capacity: list[float]) -> None:
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


_COMPUTE, _SEND, _RECV, _ARRIVE = 0, 1, 2, 3  # what a timer ends (_ARRIVE: a message a recv waits for)


class _Replay:
    """The event-driven replay of one schedule on one network (module docstring).

    Ranks are independent between events (an op waits only for ops of its own rank), so the
    replay keeps per rank and stream a cursor (the stream's next op), whether that op has
    started (``busy``) and whether it may have become startable (``flags``: its stream moved
    on, or an op it waits for ended); an event rescans only the flagged streams of the ranks
    it touched, in stream order, the ranks in increasing order. A flow's bytes left are
    updated only when its rate changes, and rates are recomputed only for the flows sharing a
    link, transitively, with a flow that started or ended."""

    def __init__(self, schedule, network: Network, record: int | None = None):
        ranks = self.ranks = schedule.ranks
        self.schedule, self.network = schedule, network
        self.streams = [[list(ops) for ops in prog.values()] for prog in schedule.programs]  # `Op` objects
        self.cursor = [[0] * len(s) for s in self.streams]
        self.busy = [[False] * len(s) for s in self.streams]
        self.flags = [[True] * len(s) for s in self.streams]
        self.stream_end = [[0.0] * len(s) for s in self.streams]
        self.done: list = []  # per rank: done[op id] = 1 once the op ended
        self.waiters: list[dict[int, list[int]]] = []  # per rank: op id -> streams with an op waiting for it
        for streams in self.streams:
            self._index(streams)
        self.overhead = network.op_overhead_s
        self.reserving = bool(network.assured)  # planned flows reserve rates (`_reserve`)
        self.reduce_cap, self.reduce_rate = network.reduce_cap_bytes, network.reduce_bytes_per_s
        self.conn_of: dict[tuple[int, int, int], _Flow] = {}
        self.conns: list[_Flow] = []
        self.pending: set[int] = set()  # connections that got a message or finished one
        self.on_wire = 0
        self.launched = 0
        self.arrived: dict[tuple[int, int, int], deque[float]] = defaultdict(deque)  # (src,dst,tag) -> arrivals
        self.waiting_recv: dict[tuple[int, int, int], deque] = defaultdict(deque)  # posted recvs
        links = sorted(network.capacity)
        self.links = links
        self.link_ids = {link: i for i, link in enumerate(links)}
        self.capacity = [network.capacity[link] for link in links]
        self.link_users: list[list[_Flow]] = [[] for _ in links]  # flows on the wire, in launch order
        self.touched: set[int] = set()  # links whose flows changed since the rates were set
        # rates of the flows that just ended, by path, until the same paths take new messages
        # (`launch_flows`): the multiset of paths on the wire, hence every max-min rate, is then
        # unchanged, and nothing is solved again
        self.freed: dict[tuple[int, ...], list[float]] = {}
        self.started: list[_Flow] = []  # flows launched since the rates were set (`update_rates`)
        self.ends: list[tuple[float, int, _Flow]] = []  # (when it may end, entry, flow): `set_rate`
        self.entries = 0
        self.rate_pass = 0
        self.carried = [0.0] * len(links)
        self.relayed_carried = [0.0] * len(links)
        self.carried_order: list[int] = []  # links in order of first use (the result's key order)
        self.relayed_order: list[int] = []
        self.carried_seen = bytearray(len(links))
        self.relayed_seen = bytearray(len(links))
        self.timers: list[tuple[float, int, int, int, int]] = []  # (time, seq, kind, rank, stream)
        self.seq = 0
        self.now = 0.0
        self.cpu_free = [0.0] * ranks
        # shared processors (`Network.cores`): each rank's ops wait for its processor in order;
        # the ranks with an op on a processor share the cores equally, at most one each
        # (processor sharing), kept in virtual time: ``cpu_v`` grows by the share a busy rank
        # gets, so an op started at virtual time v ends at v + op cost whatever the sharing
        self.cores = network.cores if self.overhead > 0 else None
        self.cpu_queue: list[deque[tuple[int, int, int]]] = [deque() for _ in range(ranks)]  # (kind, stream, length)
        self.cpu_heap: list[tuple[float, int, int]] = []  # (virtual end, seq, rank) of each busy rank's op
        self.cpu_v = 0.0
        self.cpu_t = 0.0  # when cpu_v was brought up to date
        self.cpu_busy = 0
        self.dirty: set[int] = set(range(ranks))  # ranks to scan for ops that can start
        self.flows_changed = False
        # ``record``: when the ops of ranks 0 .. record - 1 start and end (`predict_timeline`)
        self.rec = None if record is None else _Recorder(self.streams, min(record, ranks))

    def _index(self, streams: list[list]) -> None:
        """One rank's done flags (by op id) and who waits for which op."""
        waiters: dict[int, list[int]] = {}
        low, high, count = 0, -1, 0
        for s, ops in enumerate(streams):
            count += len(ops)
            for op in ops:
                if op.after:
                    for a in op.after:
                        waiters.setdefault(a, []).append(s)
            if ops:
                ids = [op.id for op in ops]
                low, high = min(low, min(ids)), max(high, max(ids))
        high = max([high, *waiters])
        dense = low >= 0 and high < 4 * count + 64
        self.done.append(bytearray(high + 1) if dense else defaultdict(int))
        self.waiters.append(waiters)

    def cpu(self, rank: int, t: float) -> float:
        """Charge one op's software cost to ``rank``'s processor from time ``t`` on."""
        overhead = self.overhead
        if overhead <= 0:
            return t
        t = max(t, self.cpu_free[rank]) + overhead
        self.cpu_free[rank] = t
        return t

    def received(self, rank: int, t: float, length: int) -> float:
        """When a recv whose message is there at ``t`` ends: the rank's processor takes it,
        then reduces or copies it."""
        if self.overhead > 0:
            t = self.cpu(rank, t)
        return t + self.reduce_s(length)

    def reduce_s(self, length: int) -> float:
        """How long a recv of ``length`` bytes reduces or copies after its processor time (the
        exposed part of a pipelined message, ``reduce_cap``)."""
        return min(length, self.reduce_cap) / self.reduce_rate

    def cpu_share(self) -> float:
        """The processor share of each busy rank now (shared processors)."""
        busy = self.cpu_busy
        return min(1.0, self.cores / busy) if busy and self.cores else 0.0

    def cpu_sync(self, t: float) -> None:
        """Bring the virtual time up to ``t``."""
        if self.cpu_busy:
            self.cpu_v += self.cpu_share() * (t - self.cpu_t)
        self.cpu_t = t

    def cpu_submit(self, rank: int, kind: int, stream: int, length: int) -> None:
        """Queue an op of ``rank`` for its processor now (shared processors): it ends when it
        has had ``op_overhead_s`` of a processor, after the rank's ops queued before it."""
        queue = self.cpu_queue[rank]
        queue.append((kind, stream, length))
        if len(queue) == 1:
            self.cpu_sync(self.now)
            self.cpu_busy += 1
            self.seq += 1
            heapq.heappush(self.cpu_heap, (self.cpu_v + self.overhead, self.seq, rank))

    def cpu_next(self) -> float:
        """When the next op on a shared processor ends (at the current sharing)."""
        if not self.cpu_heap:
            return INF
        return self.cpu_t + max(0.0, self.cpu_heap[0][0] - self.cpu_v) / self.cpu_share()

    def cpu_end(self, t: float) -> None:
        """End the ops whose processor time is done at ``t`` (the first one in the heap, and
        any that end with it): a send hands its message over, a recv reduces; each rank's
        next queued op takes the processor."""
        self.cpu_sync(t)
        heap = self.cpu_heap
        self.cpu_v = max(self.cpu_v, heap[0][0])
        limit = self.cpu_v + 1e-9 * self.overhead
        while heap and heap[0][0] <= limit:
            rank = heapq.heappop(heap)[2]
            queue = self.cpu_queue[rank]
            kind, stream, length = queue.popleft()
            if kind == _SEND:
                self.push(t, _SEND, rank, stream)
            else:
                self.push(t + self.reduce_s(length), _RECV, rank, stream)
            if queue:
                self.seq += 1
                heapq.heappush(heap, (self.cpu_v + self.overhead, self.seq, rank))
            else:
                self.cpu_busy -= 1

    def recv_ready(self, rank: int, stream: int, t: float, length: int) -> None:
        """The message of ``rank``'s recv on ``stream`` is there at ``t`` (not before now)."""
        if not self.cores:
            self.push(self.received(rank, t, length), _RECV, rank, stream)
        elif t <= self.now:
            self.cpu_submit(rank, _RECV, stream, length)
        else:
            self.push(t, _ARRIVE, rank, stream)

    def push(self, t: float, kind: int, rank: int, stream: int) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (t, self.seq, kind, rank, stream))

    def connection(self, key: tuple[int, int, int]) -> _Flow:
        """The connection ``key`` = (src, dst, plane), numbered at its first use."""
        path = self.network.links(*key)
        limit = self.network.servers if self.network.servers is not None else float("inf")
        relayed = any(b < limit for _, b in path[:-1])
        ids = tuple(self.link_ids[link] for link in path)
        own = self.network.connection_limit(path)
        if own is not None:  # a link of its own at that capacity, outside the byte accounting
            ids += (len(self.capacity),)
            self.capacity.append(own)
            self.link_users.append([])
        conn = _Flow(len(self.conns), key[0], key[1], ids, relayed, self.network.assured.get(key, 0.0), deque())
        self.conns.append(conn)
        self.conn_of[key] = conn
        return conn

    def start_ready(self, rank: int) -> None:
        """Start every op of ``rank`` whose stream, dependencies and message allow it."""
        now, done = self.now, self.done[rank]
        streams, cursor, busy, flags = self.streams[rank], self.cursor[rank], self.busy[rank], self.flags[rank]
        waiters, conn_of, pending = self.waiters[rank], self.conn_of, self.pending
        rec = self.rec
        mine = rec is not None and rank < rec.ranks  # its ops' times are recorded
        for s in range(len(flags)):
            if not flags[s]:
                continue
            flags[s] = False
            if busy[s]:
                continue
            ops, c = streams[s], cursor[s]
            while c < len(ops):
                op = ops[c]
                if op.after and not all(done[a] for a in op.after):
                    break
                if mine:
                    rec.start[rank][s].append(now)
                kind = op.kind
                if kind == "send":
                    if self.cores:
                        busy[s] = True
                        self.cpu_submit(rank, _SEND, s, 0)
                        break
                    t_send = self.cpu(rank, now)
                    if t_send <= now:  # handed to its connection at once: the stream goes on
                        key = (rank, op.peer, op.plane)
                        conn = conn_of.get(key) or self.connection(key)
                        msg = -1 if rec is None else rec.message(rank, s, c, op.peer, op.plane)
                        conn.queue.append((op.tag, op.length, msg))
                        pending.add(conn.index)
                        done[op.id] = 1
                        self.stream_end[rank][s] = now
                        if mine:
                            rec.end[rank][s].append(now)
                        c += 1
                        waiting = waiters.get(op.id)
                        if waiting:
                            for w in waiting:
                                flags[w] = True
                            self.dirty.add(rank)  # a stream before this one may go on
                        continue
                    busy[s] = True
                    self.push(t_send, _SEND, rank, s)
                    break
                busy[s] = True
                if kind == "compute":
                    self.push(now + op.seconds, _COMPUTE, rank, s)
                    break
                # recv: completes when the matching message has arrived
                key = (op.peer, rank, op.tag)
                arrived = self.arrived.get(key)
                if arrived:
                    if rec is not None:
                        rec.received(rec.arrived[key].popleft(), s, c)
                    self.recv_ready(rank, s, max(now, arrived.popleft()), op.length)
                else:
                    self.waiting_recv[key].append((rank, s, now))
                break
            cursor[s] = c

    def launch_flows(self) -> None:
        """Put the head message of every idle connection on the wire (connections in order
        of first use)."""
        conns, users, freed = self.conns, self.link_users, self.freed
        carried, relayed_carried = self.carried, self.relayed_carried
        cables = len(self.links)
        for index in sorted(self.pending):
            f = conns[index]
            if f.on_wire or not f.queue:
                continue
            f.tag, length, f.msg = f.queue.popleft()
            if f.msg >= 0:
                self.rec.wire_start[f.msg] = self.now
            f.on_wire, f.length, f.remaining, f.rate = True, length, float(length), 0.0
            f.done_below = 1e-6 * max(1, length)
            self.launched += 1
            f.seq = self.launched
            self.on_wire += 1
            relayed = f.relayed
            for link in f.links:
                users[link].append(f)
                if link >= cables:
                    continue  # a connection's own limit (`connection`), not a cable
                if not self.carried_seen[link]:
                    self.carried_seen[link] = 1
                    self.carried_order.append(link)
                carried[link] += length
                if relayed:
                    if not self.relayed_seen[link]:
                        self.relayed_seen[link] = 1
                        self.relayed_order.append(link)
                    relayed_carried[link] += length
            if not f.links:
                self.set_rate(f, 0.0)  # no link to share: it ends at the next event
            elif not f.assured and f.links in freed:
                rates = freed[f.links]
                self.set_rate(f, rates.pop())  # in the place of a flow that ended on its path now
                if not rates:
                    del freed[f.links]
            else:
                self.touched.update(f.links)
                self.started.append(f)
            self.flows_changed = True
        self.pending.clear()

    def update_rates(self) -> None:
        """Max-min rates again after flows started or ended (`launch_flows`, `advance`).

        Only flows at or above a threshold can change. Progressive filling fixes the flows in
        increasing order of rate, and a flow that ends at rate r crosses no link that fixed a
        flow below r (it would have been fixed there), so every step below r runs as it did
        with it; symmetrically, a flow that starts and gets rate r' leaves every flow below r'
        as it was, and r' is at least the least equal share C / n of a link on its path (a
        link's share only grows while filling: see `max_min_rates`). With the threshold the
        lowest of these, the flows below it are held at their rates, and filling continues on
        what they leave of their links: the flows reached from the links that changed through
        flows at or above the threshold are solved again (the others' residual problem did not
        change). Planned (assured) flows reserve in launch order: with any, every flow reached
        is solved again. A flow alone on every link of its path gets the slowest of them."""
        users, capacity = self.link_users, self.capacity
        floor = 0.0 if self.reserving else INF
        for links, rates in self.freed.items():  # ended with no new message on their path
            self.touched.update(links)
            if floor > 0.0:
                floor = min(floor, *rates)
        if floor > 0.0:
            for f in self.started:
                if f.on_wire:
                    floor = min(floor, *[capacity[link] / len(users[link]) for link in f.links])
        self.freed.clear()
        self.started.clear()
        if floor == INF:
            floor = 0.0  # nothing to bound it by: every flow reached is solved again
        below = floor * (1.0 - 1e-9)  # a flow at the threshold itself is solved again
        self.rate_pass += 1
        mark = self.rate_pass
        seen = set(self.touched)
        stack = list(self.touched)
        self.touched.clear()
        shared: list[_Flow] = []
        held = False
        while stack:
            for f in users[stack.pop()]:
                if f.mark == mark:
                    continue
                f.mark = mark
                if f.rate < below and f.entry:
                    f.fixed = held = True  # `max_min_rates` takes its rate off its links
                    continue
                links = f.links
                alone = not f.assured
                if alone:
                    for link in links:
                        if len(users[link]) != 1:
                            alone = False
                            break
                if alone:
                    rate = min([capacity[link] for link in links])
                    if rate != f.rate or not f.entry:
                        self.set_rate(f, rate)
                    continue
                shared.append(f)
                for link in links:
                    if link not in seen:
                        seen.add(link)
                        stack.append(link)
        if shared:
            before = [f.rate for f in shared]
            max_min_rates(shared, users, capacity, held)
            for f, old in zip(shared, before):
                if f.rate != old or not f.entry:
                    rate, f.rate = f.rate, old  # the bytes moved until now, at the old rate
                    self.set_rate(f, rate)

    def set_rate(self, f: _Flow, rate: float) -> None:
        """From now on ``f`` runs at ``rate``: when it ends, in `ends`."""
        now = self.now
        left = f.remaining - min(f.remaining, f.rate * (now - f.since))
        f.remaining, f.since, f.rate = left, now, rate
        f.finish = finish = now + (left / rate if rate > 0 else 0.0)
        # it ends at the first event when its finish time is reached or only rounding
        # leftovers are left, whichever comes first
        if rate > 0 and left > f.done_below:
            near = now + (left - f.done_below) / rate
            if near > finish:
                near = finish
        else:
            near = now
        self.entries += 1
        f.entry = self.entries
        heapq.heappush(self.ends, (near, f.entry, f))

    def advance(self) -> bool:
        """Move the clock to the next event (a timer or the first flow to finish); False
        when nothing is left to happen."""
        timers, ends = self.timers, self.ends
        if not self.on_wire and not timers and not self.cpu_heap:
            return False
        # the first finish time: among the flows whose end entry (finish time or the time
        # only rounding leftovers are left, the earlier) is before it
        t_flow = INF
        near = []
        while ends and ends[0][0] <= t_flow:
            item = heapq.heappop(ends)
            f = item[2]
            if f.entry != item[1]:
                continue  # stale: its rate changed since
            near.append(item)
            if f.finish < t_flow:
                t_flow = f.finish
        t_timer = timers[0][0] if timers else INF
        t_cpu = self.cpu_next()
        t_next = min(t_flow, t_timer, t_cpu)
        ended = []
        for item in near:
            f = item[2]
            # done when its finish time is reached (comparing times, not leftover bytes, stays
            # exact when a transfer is far shorter than the clock's float resolution)
            if f.finish <= t_next or f.left(t_next) <= f.done_below:
                ended.append(f)
            else:
                heapq.heappush(ends, item)
        self.now = t_next
        if len(ended) > 1:
            ended.sort(key=_launch_order)
        users, touched, pending, freed = self.link_users, self.touched, self.pending, self.freed
        alpha, waiting_recv = self.network.alpha_s, self.waiting_recv
        streams, cursor, rec = self.streams, self.cursor, self.rec
        for f in ended:  # delivered: the message arrives after every hop's latency
            f.on_wire = False
            f.entry = 0
            self.on_wire -= 1
            pending.add(f.index)
            for link in f.links:
                users[link].remove(f)
            if f.assured or not f.links:
                touched.update(f.links)
            else:
                freed.setdefault(f.links, []).append(f.rate)
            key = (f.src, f.dst, f.tag)
            t_arr = t_next + alpha * len(f.links)
            if f.msg >= 0:
                rec.wire_end[f.msg], rec.arrival[f.msg] = t_next, t_arr
            waiting = waiting_recv.get(key)
            if waiting:
                rank, s, t_post = waiting.popleft()
                op = streams[rank][s][cursor[rank][s]]
                if rec is not None:
                    rec.received(f.msg, s, cursor[rank][s])
                self.recv_ready(rank, s, max(t_arr, t_post), op.length)
            else:
                self.arrived[key].append(t_arr)
                if rec is not None:
                    rec.arrived[key].append(f.msg)
        if ended:
            self.flows_changed = True
        if t_cpu <= t_next:
            self.cpu_end(t_next)
        if timers and timers[0][0] <= t_next + 1e-15:
            self.end_ops(t_next)
        return True

    def end_ops(self, t: float) -> None:
        """End the ops whose timers are due at ``t`` (sends handed over, computes done,
        recvs reduced or copied)."""
        timers, pending, conn_of = self.timers, self.pending, self.conn_of
        streams, cursor, busy, flags_of = self.streams, self.cursor, self.busy, self.flags
        done, stream_end, waiters, dirty = self.done, self.stream_end, self.waiters, self.dirty
        rec = self.rec
        pop = heapq.heappop
        while timers and timers[0][0] <= t + 1e-15:
            _, _, kind, rank, s = pop(timers)
            op = streams[rank][s][cursor[rank][s]]
            if kind == _ARRIVE:  # its processor takes the recv now (shared processors)
                self.cpu_submit(rank, _RECV, s, op.length)
                continue
            if kind == _SEND:
                key = (rank, op.peer, op.plane)
                conn = conn_of.get(key) or self.connection(key)
                msg = -1 if rec is None else rec.message(rank, s, cursor[rank][s], op.peer, op.plane)
                conn.queue.append((op.tag, op.length, msg))
                pending.add(conn.index)
            done[rank][op.id] = 1
            stream_end[rank][s] = t
            if rec is not None and rank < rec.ranks:
                rec.end[rank][s].append(t)
            cursor[rank][s] += 1
            busy[rank][s] = False
            flags = flags_of[rank]
            flags[s] = True
            waiting = waiters[rank].get(op.id)
            if waiting:
                for w in waiting:
                    flags[w] = True
            dirty.add(rank)

    def run(self) -> Prediction:
        while True:
            while self.dirty:
                ranks = sorted(self.dirty)
                self.dirty.clear()
                for r in ranks:
                    self.start_ready(r)
            if self.pending:
                self.launch_flows()
            if self.flows_changed:
                self.update_rates()
                self.flows_changed = False
            if not self.advance():
                break
        programs = self.schedule.programs
        for r, prog in enumerate(programs):
            for s, (name, ops) in enumerate(prog.items()):
                if self.cursor[r][s] < len(ops):
                    raise RuntimeError(
                        f"schedule deadlocks in the model: rank {r} stream {name!r} stops at op "
                        f"{ops[self.cursor[r][s]].id}"
                    )
        rank_seconds = [max(ends, default=0.0) for ends in self.stream_end]
        links = self.links
        return Prediction(
            max(rank_seconds, default=0.0),
            rank_seconds,
            {links[i]: self.carried[i] for i in self.carried_order},
            {links[i]: self.relayed_carried[i] for i in self.relayed_order},
            {(r, name): self.stream_end[r][s] for r, prog in enumerate(programs) for s, name in enumerate(prog)},
        )


def _launch_order(f: _Flow) -> int:
    return f.seq


INF = float("inf")


def predict(schedule: Schedule, network: Network, events: bool = False) -> Prediction:
    """Predict one execution of ``schedule`` (a contract.schedule Schedule) on ``network``:
    in rounds over all ranks at once when no two connections share a link
    (`_dedicated_replay`), else (or with ``events``) event by event (`_Replay`)."""
    with collector_paused():
        fast = None if events else _dedicated_replay(schedule, network)
        return fast if fast is not None else _Replay(schedule, network).run()


def predict_timeline(
    schedule: Schedule, network: Network, ranks: int | None = None, events: bool = False
) -> tuple[Prediction, Timeline]:
    """`predict`, recording when each op of ranks ``0 .. ranks - 1`` (all by default) started
    and ended and when each message they sent or received was on the wire (`Timeline`). The
    replay is the one `predict` runs, recording beside it, so the prediction is the same."""
    record = schedule.ranks if ranks is None else max(0, min(ranks, schedule.ranks))
    with collector_paused():
        fast = None if events else _dedicated_replay_timed(schedule, network, record)
        if fast is not None:
            pred, timeline = fast
            assert timeline is not None
            return pred, timeline
        replay = _Replay(schedule, network, record)
        pred = replay.run()
        assert replay.rec is not None
        return pred, replay.rec.timeline(schedule)


@dataclass
class Timeline:
    """When the ops of ranks ``0 .. ranks - 1`` started and ended in a replay, and when each
    message such a rank sent or received was on the wire (`predict_timeline`): what a trace of
    the predicted iteration draws (topolab.trace_events). Times are seconds in the network's
    time unit (as `Prediction.seconds`). An op is named by its row in its rank's
    `contract.schedule.Program`; the ops of one stream follow one another (an op starts when
    the one before it has ended, or later), the messages of one connection too (one goes on
    the wire when the one before it has left)."""

    ranks: int  # ranks recorded: 0 .. ranks - 1
    op_start: list[np.ndarray]  # per recorded rank, per row of its program: when the op started
    op_end: list[np.ndarray]  # ... and ended (a send: handed to its connection; a recv: reduced or copied)
    # per message sent or received by a recorded rank (in no particular order):
    msg_src: np.ndarray  # the sending rank
    msg_send_row: np.ndarray  # its send's row in the sender's program
    msg_dst: np.ndarray  # the receiving rank
    msg_recv_row: np.ndarray  # the row of the recv that took it in the receiver's program
    msg_plane: np.ndarray  # the send's plane (0: the destination route)
    wire_start: np.ndarray  # when it went on the wire (its connection free, after its send)
    wire_end: np.ndarray  # when its last byte left
    arrival: np.ndarray  # when it was at the receiver (the hops' latency later)


_MESSAGE_COLUMNS = ("src", "stream", "index", "dst", "plane", "recv_stream", "recv_index")


class _Recorder:
    """What `_Replay` records for `predict_timeline`: per rank below ``ranks`` and stream, its
    ops' start and end times in stream order; per message that such a rank sends or receives,
    its send and recv (stream and position in it) and its times on the wire."""

    def __init__(self, streams: list[list[list]], ranks: int):
        self.ranks = ranks
        self.start: list[list[list[float]]] = [[[] for _ in streams[r]] for r in range(ranks)]
        self.end: list[list[list[float]]] = [[[] for _ in streams[r]] for r in range(ranks)]
        self.columns: dict[str, list[int]] = {name: [] for name in _MESSAGE_COLUMNS}
        self.wire_start: list[float] = []
        self.wire_end: list[float] = []
        self.arrival: list[float] = []
        # (src, dst, tag) -> the numbers of the messages in `_Replay.arrived`, in its order
        self.arrived: dict[tuple[int, int, int], deque[int]] = defaultdict(deque)

    def message(self, src: int, stream: int, index: int, dst: int, plane: int) -> int:
        """Number the message of ``src``'s send (the ``index``-th op of its ``stream``) to
        ``dst``; -1 when neither rank is recorded."""
        if src >= self.ranks and dst >= self.ranks:
            return -1
        for name, value in zip(_MESSAGE_COLUMNS, (src, stream, index, dst, plane, -1, -1)):
            self.columns[name].append(value)
        for times in (self.wire_start, self.wire_end, self.arrival):
            times.append(float("nan"))
        return len(self.arrival) - 1

    def received(self, msg: int, stream: int, index: int) -> None:
        """Message ``msg`` is taken by the ``index``-th op of its receiver's ``stream``."""
        if msg >= 0:
            self.columns["recv_stream"][msg] = stream
            self.columns["recv_index"][msg] = index

    def timeline(self, schedule: Schedule) -> Timeline:
        """The `Timeline` of what was recorded: positions in streams back to program rows."""
        programs = schedule.programs
        op_start, op_end = [], []
        for r in range(self.ranks):
            p = programs[r]
            start, end = np.full(p.op_count, np.nan), np.full(p.op_count, np.nan)
            for s in range(len(p.streams)):
                rows = p.stream_rows(s)
                start[rows[: len(self.start[r][s])]] = self.start[r][s]
                end[rows[: len(self.end[r][s])]] = self.end[r][s]
            op_start.append(start)
            op_end.append(end)
        c = self.columns

        def rows_of(ranks: list[int], streams: list[int], index: list[int]) -> np.ndarray:
            return np.array(
                [programs[r].stream_rows(s)[i] if s >= 0 else -1 for r, s, i in zip(ranks, streams, index)], np.int64
            )

        return Timeline(
            self.ranks,
            op_start,
            op_end,
            np.array(c["src"], np.int64),
            rows_of(c["src"], c["stream"], c["index"]),
            np.array(c["dst"], np.int64),
            rows_of(c["dst"], c["recv_stream"], c["recv_index"]),
            np.array(c["plane"], np.int64),
            np.array(self.wire_start),
            np.array(self.wire_end),
            np.array(self.arrival),
        )


# ---- schedules whose every connection has links of its own: evaluated in rounds ----------


@dataclass
class _Layout:
    """A schedule's ops of all ranks in one set of arrays, stream by stream (a rank's streams
    in order, each stream's ops in order), sends matched with recvs: what
    `_dedicated_replay` works on. Sends are numbered rank by rank, a rank's by channel
    (destination, tag) then in program order."""

    kind: np.ndarray  # per op: SEND / RECV / COMPUTE
    length: np.ndarray  # per op: bytes (sends and recvs)
    aux: np.ndarray  # per op: a send's number, a recv's matched send, a compute's entry in seconds
    seconds: np.ndarray  # compute seconds
    starts: np.ndarray  # per stream (ranks in order): its first op; starts[-1] = the op count
    after_pos: np.ndarray  # ops that wait for others (ascending)
    after_ptr: np.ndarray  # CSR into after_of
    after_of: np.ndarray  # the ops they wait for
    conn: np.ndarray  # per send: its connection
    conn_src: np.ndarray  # per connection: source and destination rank
    conn_dst: np.ndarray
    conn_bytes: np.ndarray  # per connection: bytes of all its messages


def _segments(lo: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The indices lo[0] .. lo[0]+sizes[0]-1, lo[1] .., concatenated (CSR rows gathered)."""
    return np.repeat(lo - np.cumsum(sizes) + sizes, sizes) + np.arange(sizes.sum())


def _groups(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort ``keys`` (stably): the order and where each run of equal keys begins in it."""
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    return order, np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if len(k) else np.zeros(0, np.int64)


def _one_each(values: np.ndarray, starts: np.ndarray) -> bool:
    """Whether every run (beginning at ``starts``) of ``values`` holds one value."""
    return not len(starts) or bool((np.minimum.reduceat(values, starts) == np.maximum.reduceat(values, starts)).all())


def _layout(schedule: Schedule) -> _Layout | None:
    """The arrays of `_Layout`, or None when the schedule is not one `_dedicated_replay`
    takes: a send names a plane (planes are connections of their own), an op is of an
    unknown kind, a connection is fed by two streams or a channel received by two, a
    channel's sends and recvs do not pair up."""
    n = schedule.ranks
    programs = schedule.programs
    total = sum(p.op_count for p in programs)
    index = np.int32 if total < 2**31 else np.int64
    kind = np.empty(total, np.int8)
    length = np.empty(total, np.result_type(np.int32, *(np.asarray(p.length).dtype for p in programs)))
    aux = np.full(total, -1, index)
    tags = np.unique(np.concatenate([np.unique(np.asarray(p.tag)) for p in programs]))
    t = len(tags)
    seconds, starts = [], []
    after_pos, after_count, after_of = [], [], []
    conn, conn_src, conn_dst, conn_bytes = [], [], [], []
    chan_key, chan_base, chan_count = [], [], []
    base = timed = sent = conns = 0

    def columns(p: Program) -> tuple[np.ndarray, ...]:
        """Stream-major order and bounds; per op: stream, peer, tag (as its index in tags), kind."""
        order, bounds = p.stream_order(keep=False)
        stream = np.repeat(np.arange(len(p.streams), dtype=np.int32), np.diff(bounds))
        peer = np.asarray(p.peer, np.int64)[order]
        tag = np.searchsorted(tags, np.asarray(p.tag)[order]).astype(np.int32)
        return order, bounds, stream, peer, tag, np.asarray(p.kind)[order]

    for rank, p in enumerate(programs):  # ops, computes, afters, sends
        if (np.asarray(p.plane) != 0).any() or (p.op_count and int(np.asarray(p.kind).max()) > COMPUTE_CODE):
            return None
        order, bounds, stream, peer, tag, k = columns(p)
        m = p.op_count
        sl = slice(base, base + m)
        kind[sl] = k
        length[sl] = np.asarray(p.length)[order]
        position = np.empty(m, np.int64)  # row -> op
        position[order] = np.arange(base, base + m)
        comp = np.flatnonzero(k == COMPUTE_CODE)
        aux[base + comp] = timed + p.seconds_index()[order[comp]]
        seconds.append(p.seconds)
        timed += len(p.seconds)
        starts.append(base + bounds[:-1])
        if len(p.after_rows):
            after_pos.append(position[p.after_rows])
            after_count.append(np.diff(p.after_ptr))
            ids = np.asarray(p.after_ids, np.int64)
            if p.ids is None:
                rows = ids
            else:
                by_id = np.argsort(p.ids)
                rows = by_id[np.searchsorted(p.ids, ids, sorter=by_id)]
            after_of.append(position[rows])
        s = np.flatnonzero(k == SEND_CODE)
        if len(s):
            o, runs = _groups(peer[s] * t + tag[s])  # by channel (destination, tag), in program order
            s = s[o]
            aux[base + s] = sent + np.arange(len(s))
            key = peer[s] * t + tag[s]
            chan_key.append((rank * n * t) + key[runs])
            chan_base.append(sent + runs)
            chan_count.append(np.diff(np.r_[runs, len(s)]))
            dst = peer[s]
            first = np.flatnonzero(np.r_[True, dst[1:] != dst[:-1]])  # connections (by destination)
            if not _one_each(stream[s], first):
                return None
            conn.append(conns + np.cumsum(np.r_[True, dst[1:] != dst[:-1]]) - 1)
            conns += len(first)
            conn_src.append(np.full(len(first), rank, np.int64))
            conn_dst.append(dst[first])
            conn_bytes.append(np.add.reduceat(np.asarray(length[base + s], np.int64), first))
            sent += len(s)
        base += m
    keys, bases, counts = (np.concatenate(a) if a else np.zeros(0, np.int64) for a in (chan_key, chan_base, chan_count))
    base = matched = 0
    for rank, p in enumerate(programs):  # recvs: the matching send
        _, _, stream, peer, tag, k = columns(p)
        m = p.op_count
        r = np.flatnonzero(k == RECV_CODE)
        if len(r):
            o, runs = _groups(peer[r] * t + tag[r])  # by channel (source, tag), in program order
            r = r[o]
            if not _one_each(stream[r], runs):
                return None
            key = (peer[r[runs]] * n + rank) * t + tag[r[runs]]
            c = np.minimum(np.searchsorted(keys, key), max(len(keys) - 1, 0))
            sizes = np.diff(np.r_[runs, len(r)])
            if not len(keys) or (keys[c] != key).any() or (counts[c] != sizes).any():
                return None
            aux[base + r] = np.repeat(bases[c] - runs, sizes) + np.arange(len(r))
            matched += len(r)
        base += m
    if matched != sent:
        return None
    after_pos_a = np.concatenate(after_pos) if after_pos else np.zeros(0, np.int64)
    ptr = np.zeros(len(after_pos_a) + 1, np.int64)
    ptr[1:] = np.cumsum(np.concatenate(after_count)) if after_count else []
    after_of_a = np.concatenate(after_of) if after_of else np.zeros(0, np.int64)
    order = np.argsort(after_pos_a, kind="stable")  # rows are in id order, ops stream by stream
    sizes = np.diff(ptr)[order]
    after_of_a = after_of_a[_segments(ptr[:-1][order], sizes)]
    ptr[1:] = np.cumsum(sizes)
    cat = np.concatenate
    return _Layout(
        kind,
        length,
        aux,
        cat(seconds),
        cat([*starts, [total]]).astype(np.int64),
        after_pos_a[order],
        ptr,
        after_of_a,
        cat(conn).astype(index) if conn else np.zeros(0, index),
        cat(conn_src) if conn_src else np.zeros(0, np.int64),
        cat(conn_dst) if conn_dst else np.zeros(0, np.int64),
        cat(conn_bytes) if conn_bytes else np.zeros(0, np.int64),
    )


def _dedicated_replay(schedule: Schedule, network: Network) -> Prediction | None:
    """`_dedicated_replay_timed` without a timeline."""
    timed = _dedicated_replay_timed(schedule, network)
    return None if timed is None else timed[0]


def _dedicated_replay_timed(
    schedule: Schedule, network: Network, record: int | None = None
) -> tuple[Prediction, Timeline | None] | None:
    """The prediction of the event replay (`_Replay`), computed op by op in rounds over all
    ranks at once, for a schedule on which no two connections ever share a link; None when
    the schedule is not of that kind (the caller replays it event by event).

    The conditions: no software cost per op (``op_overhead_s`` = 0: no rank's processor is
    shared), no planes, every connection (src, dst) fed by one stream of src and every
    channel (src, dst, tag) received by one stream of dst, each connection's path its own
    (no link on two connections' paths), every send matched by a recv. Then every message
    runs alone at the slowest rate of its path, a connection's messages go first in, first
    out in program order, and the k-th send of a channel meets its k-th recv, so every op's
    end follows from the ops before it (the rules of the module docstring): an op starts
    when its stream's previous op and its ``after`` ops ended; a compute ends ``seconds``
    later; a send ends at once and puts its message on the wire when the connection's
    previous message has left, for length / rate, arriving ``hops * alpha`` after; a recv
    ends when its message is there (and it started), plus its reduction. Each round ends
    the next op of every stream whose op can end (its dependencies ended): a ring pass
    advances one step per round on every rank at once.

    The event replay agrees to rounding: it ends timers due within 1e-15 s of each other
    together, and a message once only a millionth of it is left when another event comes
    (its ``done_below``), so its times may be earlier by up to a millionth of a message's
    time on the wire.

    With ``record``, also the `Timeline` of ranks ``0 .. record - 1`` (`predict_timeline`)."""
    if network.op_overhead_s > 0 or schedule.op_count() == 0:
        return None
    lay = _layout(schedule)
    if lay is None:
        return None
    limit = network.servers if network.servers is not None else float("inf")
    capacity = network.capacity
    rate = np.empty(len(lay.conn_src))
    hops = np.empty(len(lay.conn_src), np.int64)
    relayed = np.zeros(len(lay.conn_src), bool)
    used: set[tuple[int, int]] = set()
    paths = []
    for c, (a, b) in enumerate(zip(lay.conn_src.tolist(), lay.conn_dst.tolist())):
        path = network.links(a, b, 0)
        if not path or used.intersection(path) or len(set(path)) < len(path):
            return None
        used.update(path)
        paths.append(path)
        rate[c] = min([capacity[link] for link in path])
        own = network.connection_limit(path)
        if own is not None:
            rate[c] = own
        hops[c] = len(path)
        relayed[c] = any(v < limit for _, v in path[:-1])
    times = None if record is None else _RoundTimes.empty(lay)
    ends = _rounds(lay, rate, hops, network, times)
    if ends is None:
        return None
    link_bytes: dict[tuple[int, int], float] = {}
    relayed_bytes: dict[tuple[int, int], float] = {}
    for path, nbytes, via in zip(paths, lay.conn_bytes.tolist(), relayed.tolist()):
        for link in path:
            link_bytes[link] = float(nbytes)
            if via:
                relayed_bytes[link] = float(nbytes)
    ends_list = ends.tolist()
    stream_end: dict[tuple[int, str], float] = {}
    rank_seconds = []
    s = 0
    for r, p in enumerate(schedule.programs):
        mine = ends_list[s : s + len(p.streams)]
        rank_seconds.append(max(mine, default=0.0))
        for name, t in zip(p.streams, mine):
            stream_end[(r, name)] = t
        s += len(p.streams)
    pred = Prediction(
        max(rank_seconds, default=0.0),
        rank_seconds,
        dict(sorted(link_bytes.items())),
        dict(sorted(relayed_bytes.items())),
        stream_end,
    )
    return pred, None if times is None or record is None else times.timeline(schedule, lay, record)


@dataclass
class _RoundTimes:
    """What `_rounds` records for a `Timeline`: per op of the `_Layout`, its start and end;
    per send (its number), when its message went on the wire, left and arrived."""

    start: np.ndarray
    end: np.ndarray
    wire_start: np.ndarray
    wire_end: np.ndarray
    arrival: np.ndarray

    @classmethod
    def empty(cls, lay: _Layout) -> _RoundTimes:
        ops, sends = len(lay.kind), len(lay.conn)
        return cls(*(np.full(k, np.nan) for k in (ops, ops, sends, sends, sends)))

    def timeline(self, schedule: Schedule, lay: _Layout, ranks: int) -> Timeline:
        """The `Timeline` of ranks ``0 .. ranks - 1``: layout positions back to program rows."""
        programs = schedule.programs
        bases = np.cumsum([0, *(p.op_count for p in programs)])
        row_of = np.concatenate([p.stream_order(keep=False)[0] for p in programs]).astype(np.int64)
        op_start, op_end = [], []
        for r in range(ranks):
            order = row_of[bases[r] : bases[r + 1]]
            start, end = np.empty(len(order)), np.empty(len(order))
            start[order] = self.start[bases[r] : bases[r + 1]]
            end[order] = self.end[bases[r] : bases[r + 1]]
            op_start.append(start)
            op_end.append(end)
        sends = np.flatnonzero(lay.kind == SEND_CODE)
        recvs = np.flatnonzero(lay.kind == RECV_CODE)
        send_at = np.empty(len(lay.conn), np.int64)  # per message: its send's and its recv's position
        recv_at = np.empty(len(lay.conn), np.int64)
        send_at[lay.aux[sends]] = sends
        recv_at[lay.aux[recvs]] = recvs
        src = np.searchsorted(bases, send_at, side="right") - 1
        dst = np.searchsorted(bases, recv_at, side="right") - 1
        keep = np.flatnonzero((src < ranks) | (dst < ranks))
        return Timeline(
            ranks,
            op_start,
            op_end,
            src[keep],
            row_of[send_at[keep]],
            dst[keep],
            row_of[recv_at[keep]],
            np.zeros(len(keep), np.int64),
            self.wire_start[keep],
            self.wire_end[keep],
            self.arrival[keep],
        )


def _rounds(
    lay: _Layout, rate: np.ndarray, hops: np.ndarray, network: Network, times: _RoundTimes | None = None
) -> np.ndarray | None:
    """Every stream's end (`_dedicated_replay`), or None if the schedule deadlocks; with
    ``times``, each op's and message's times recorded in it."""
    starts = lay.starts
    streams = len(starts) - 1
    cursor = starts[:-1].copy()
    stop = starts[1:]
    last = np.zeros(streams)  # the end of each stream's last ended op
    free = np.zeros(len(rate))  # when each connection's last message left
    arrival = np.full(len(lay.conn), np.nan)  # per send: when its message is there
    kind, length, aux, seconds, conn = lay.kind, lay.length, lay.aux, lay.seconds, lay.conn
    alpha, cap, reduce_rate = network.alpha_s, network.reduce_cap_bytes, network.reduce_bytes_per_s
    # ops that wait (after): how many of their ops have not ended; waited-for ops: their end
    after_pos, after_ptr, after_of = lay.after_pos, lay.after_ptr, lay.after_of
    waited, which = np.unique(after_of, return_inverse=True)
    waited_end = np.zeros(len(waited))
    unmet = np.diff(after_ptr)
    owner = np.repeat(np.arange(len(after_pos)), unmet)  # per after entry: its waiting op
    by_waited = np.argsort(which, kind="stable")
    dep_ptr = np.searchsorted(which[by_waited], np.arange(len(waited) + 1))
    dependents = owner[by_waited]  # per waited-for op (CSR by dep_ptr): the entries' waiting ops
    unmet = unmet.copy()
    waits = len(after_pos) > 0
    active = np.flatnonzero(cursor < stop)
    while len(active):
        heads = cursor[active]
        k = kind[heads]
        ok = np.ones(len(heads), bool)
        if waits:
            j = np.minimum(np.searchsorted(after_pos, heads), len(after_pos) - 1)
            has = after_pos[j] == heads
            ok &= ~has | (unmet[j] == 0)
        recv = np.flatnonzero(k == RECV_CODE)
        ok[recv] &= ~np.isnan(arrival[aux[heads[recv]]])
        if not ok.any():
            return None  # deadlock: the event replay names the op
        go = active[ok]
        h, k = heads[ok], k[ok]
        start = last[go]
        if waits:
            j, has = j[ok], has[ok]
            w = np.flatnonzero(has)
            if len(w):
                lo = after_ptr[j[w]]
                sizes = after_ptr[j[w] + 1] - lo
                latest = np.maximum.reduceat(waited_end[which[_segments(lo, sizes)]], np.cumsum(sizes) - sizes)
                start[w] = np.maximum(start[w], latest)
        end = start.copy()
        c = np.flatnonzero(k == COMPUTE_CODE)
        end[c] = start[c] + seconds[aux[h[c]]]
        s = np.flatnonzero(k == SEND_CODE)
        if len(s):
            msg = aux[h[s]]
            cs = conn[msg]
            on_wire = np.maximum(start[s], free[cs])
            left = on_wire + length[h[s]] / rate[cs]
            free[cs] = left
            arrival[msg] = left + alpha * hops[cs]
            if times is not None:
                times.wire_start[msg], times.wire_end[msg] = on_wire, left
        r = np.flatnonzero(k == RECV_CODE)
        if len(r):
            end[r] = np.maximum(start[r], arrival[aux[h[r]]]) + np.minimum(length[h[r]], cap) / reduce_rate
        last[go] = end
        if times is not None:
            times.start[h], times.end[h] = start, end
        cursor[go] += 1
        if len(waited):
            j = np.minimum(np.searchsorted(waited, h), len(waited) - 1)
            hit = np.flatnonzero(waited[j] == h)
            if len(hit):
                waited_end[j[hit]] = end[hit]
                lo = dep_ptr[j[hit]]
                np.subtract.at(unmet, dependents[_segments(lo, dep_ptr[j[hit] + 1] - lo)], 1)
        active = active[cursor[active] < stop[active]]
    if times is not None:
        times.arrival[:] = arrival
    return last
