"""The event replay: a schedule run op by op on a network, event by event (a timer ends, a
message leaves its last link, a shared processor finishes an op), with the messages on the
wire sharing their links max-min fairly (`max_min`). It follows the rules of
`planner.cost.predict` (streams, eager sends, one TCP stream per connection, per-hop latency,
reduction, the ranks' processor time per op) for any schedule; `dedicated_links` computes
the same prediction faster for the schedules whose connections never share a link.

Re-solving only what can change. A flow that starts or ends changes the max-min rates only
of the flows at or above a threshold (`EventReplay.update_rates`): progressive filling fixes
the flows in increasing order of rate, so a flow that ends at rate r leaves every step below
r as it was, and a flow that starts with rate r' leaves every flow below r' as it was, where

    r' >= min over its links l of C(l) / n(l)      (a link's share only grows while filling)

With the threshold the lowest of these, the flows below it keep their rates and the filling
goes on with the others. A message that follows one on the same path, when the one before
it ended, takes its rate and changes none. In DLRM's iteration at 128 servers (an all-to-all
of 16,256 messages beside the AllReduce rings) a solve takes 1.7 flows on average and at
most 2,032 (solving every flow sharing a link with the change, transitively, made those
phases grow as n^3).

Cost (`benchmarks/scale.py`): a few microseconds per op; the ops of an iteration grow as n^2
(a ring step is a send and a recv on every rank).

Shared processors (`Network.cores`): the ranks with an op due share the cores equally, at
most one each (processor sharing, kept in virtual time: `EventReplay.cpu_submit`), so an
op costs more while many ranks are busy and ``op_overhead_s`` alone when few are.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque

import numpy as np

from contract.schedule import Schedule

from .max_min import Flow, launch_order, max_min_rates
from .network_view import Network
from .results import Prediction, Timeline

_COMPUTE, _SEND, _RECV, _ARRIVE = 0, 1, 2, 3  # what a timer ends (_ARRIVE: a message a recv waits for)
INF = float("inf")


class EventReplay:
    """The event-driven replay of one schedule on one network (the rules of `planner.cost.predict`).

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
        self.reserving = bool(network.assured)  # planned flows reserve rates (`max_min._reserve`)
        self.reduce_cap, self.reduce_rate = network.reduce_cap_bytes, network.reduce_bytes_per_s
        self.conn_of: dict[tuple[int, int, int], Flow] = {}
        self.conns: list[Flow] = []
        self.pending: set[int] = set()  # connections that got a message or finished one
        self.on_wire = 0
        self.launched = 0
        self.arrived: dict[tuple[int, int, int], deque[float]] = defaultdict(deque)  # (src,dst,tag) -> arrivals
        self.waiting_recv: dict[tuple[int, int, int], deque] = defaultdict(deque)  # posted recvs
        links = sorted(network.capacity)
        self.links = links
        self.link_ids = {link: i for i, link in enumerate(links)}
        self.capacity = [network.capacity[link] for link in links]
        self.link_users: list[list[Flow]] = [[] for _ in links]  # flows on the wire, in launch order
        self.touched: set[int] = set()  # links whose flows changed since the rates were set
        # rates of the flows that just ended, by path, until the same paths take new messages
        # (`launch_flows`): the multiset of paths on the wire, hence every max-min rate, is then
        # unchanged, and nothing is solved again
        self.freed: dict[tuple[int, ...], list[float]] = {}
        self.started: list[Flow] = []  # flows launched since the rates were set (`update_rates`)
        self.ends: list[tuple[float, int, Flow]] = []  # (when it may end, entry, flow): `set_rate`
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

    def connection(self, key: tuple[int, int, int]) -> Flow:
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
        conn = Flow(len(self.conns), key[0], key[1], ids, relayed, self.network.assured.get(key, 0.0), deque())
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
        shared: list[Flow] = []
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

    def set_rate(self, f: Flow, rate: float) -> None:
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
            ended.sort(key=launch_order)
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


_MESSAGE_COLUMNS = ("src", "stream", "index", "dst", "plane", "recv_stream", "recv_index")


class _Recorder:
    """What `EventReplay` records for `predict_timeline`: per rank below ``ranks`` and stream, its
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
        # (src, dst, tag) -> the numbers of the messages in `EventReplay.arrived`, in its order
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
