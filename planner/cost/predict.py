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
  the TCP goodput of the link (payload / wire bytes at the MTU);
- a message arrives ``hops * alpha`` after its last byte left (per-hop latency, 1.5) and a
  ``recv`` completes when its message has arrived and been reduced or copied
  (``reduce_bytes / reduce_bytes_per_s``, ``reduce_bytes`` capped at the size of the last
  pipelined chunk: the executor reduces chunks as they arrive);
- every send and recv costs the rank ``op_overhead_s`` of processor time (the workers'
  software cost per op, measured on the machine: see topolab.calibrate); a rank's ops
  take turns on its processor, so many small ops add up as they do in the workers.

One module (over 300 lines): the network description, the rate model (max-min fairness with
reservations) and the replay that uses them change together.

The prediction is in the network's own time unit: give it emulated link rates to predict an
emulated run, then divide by the time-scale factor to get the real cluster's time.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from contract.emulation import EmulatedRates
from contract.network import cable_capacities
from contract.physics import DEFAULT_MTU, REDUCE_BYTES_PER_S, cable_goodput


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
    _paths: dict[tuple[int, int, int], list[tuple[int, int]]] = field(default_factory=dict, repr=False)

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
) -> Network:
    """A `Network` for ``plan``: each cable gives both directions its goodput, parallel
    cables add up (`contract.network.cable_capacities`). ``rates``: the cables as an emulated
    network runs them (`contract.emulation.EmulatedRates`: its rates and its MTU, which
    replaces ``mtu``); ``link_bps`` is the shorthand for a plan link of ``plan.link_gbps``
    emulated at ``link_bps``; by default the plan's own rates are used.
    ``destination_classes`` off: an allocation's planes are routed but their rates are not
    assured (the emulator's ``destination_classes = False``)."""
    if rates is None and link_bps is not None:
        rates = EmulatedRates(plan.link_gbps, link_bps / 1e6, mtu)
    cap = cable_capacities(plan.links, mtu) if rates is None else rates.capacities(plan.links)

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
class _Flow:
    src: int
    dst: int
    tag: int
    length: int
    remaining: float
    links: list[tuple[int, int]]
    rate: float = 0.0
    relayed: bool = False  # crosses another server (host-based forwarding)
    assured: float = 0.0  # bytes/s its plane's allocation guarantees (0: plane 0)


def max_min_rates(flows: Iterable[_Flow], capacity: dict[tuple[int, int], float]) -> None:
    """Set every flow's ``rate`` to its max-min fair share (progressive filling) plus, for a
    planned flow, its assured rate, reserved first (`_reserve`).

    The most contended link (least remaining capacity per unfixed flow) fixes its flows'
    share, which is subtracted from their other links; repeat. A link's fair share only grows
    as flows of other links are fixed ((R - s) / (c - 1) >= R / c when s <= R / c), so a heap
    with lazily dropped stale entries finds the next link in O(log L)."""
    unassigned = [f for f in flows if f.links]
    reserved = _reserve(unassigned, capacity) if any(f.assured for f in unassigned) else {}
    if reserved:
        capacity = dict(capacity)
        for f in unassigned:
            for link in f.links:
                capacity[link] = max(0.0, capacity[link] - reserved.get(id(f), 0.0))
    remaining: dict[tuple[int, int], float] = {}
    users: dict[tuple[int, int], list[_Flow]] = defaultdict(list)
    for f in unassigned:
        for link in f.links:
            users[link].append(f)
            remaining[link] = capacity[link]
    count = {link: len(fs) for link, fs in users.items()}
    heap = [(remaining[link] / c, link) for link, c in count.items()]
    heapq.heapify(heap)
    fixed: set[int] = set()
    while heap and len(fixed) < len(unassigned):
        share, link = heapq.heappop(heap)
        if count[link] == 0 or share != remaining[link] / count[link]:
            continue  # stale: the link's share changed since this entry was pushed
        for f in users[link]:
            if id(f) in fixed:
                continue
            f.rate = share + reserved.get(id(f), 0.0)
            fixed.add(id(f))
            for other in f.links:
                remaining[other] -= share
                count[other] -= 1
                if other != link and count[other] > 0:
                    heapq.heappush(heap, (remaining[other] / count[other], other))


def _reserve(flows: list[_Flow], capacity: dict[tuple[int, int], float]) -> dict[int, float]:
    """The rate reserved for each planned flow (by ``id``): its assured rate, scaled down on a
    link where the reservations exceed the planned flows' head-count share of the capacity (so
    plane-0 flows sharing the link are never starved) or the capacity itself."""
    assured: dict[tuple[int, int], float] = defaultdict(float)
    planned: dict[tuple[int, int], int] = defaultdict(int)
    users: dict[tuple[int, int], int] = defaultdict(int)
    for f in flows:
        for link in f.links:
            users[link] += 1
            if f.assured:
                assured[link] += f.assured
                planned[link] += 1
    scale = {link: min(1.0, capacity[link] * planned[link] / users[link] / a) for link, a in assured.items()}
    return {id(f): f.assured * min(scale[link] for link in f.links) for f in flows if f.assured}


class _Replay:
    """The event-driven replay of one schedule on one network (module docstring)."""

    def __init__(self, schedule, network: Network):
        ranks = self.ranks = schedule.ranks
        self.schedule, self.network = schedule, network
        self.ops_by_id = [
            {op.id: (stream, op) for stream, ops in prog.items() for op in ops} for prog in schedule.programs
        ]
        self.cursor = [{stream: 0 for stream in prog} for prog in schedule.programs]
        self.done: list[dict[int, float]] = [dict() for _ in range(ranks)]
        self.started: list[set[int]] = [set() for _ in range(ranks)]
        self.stream_free = {(r, s): 0.0 for r in range(ranks) for s in schedule.programs[r]}
        # one connection per (src, dst, plane): its waiting messages and the one on the wire
        self.queues: dict[tuple[int, int, int], deque] = defaultdict(deque)
        self.active: dict[tuple[int, int, int], _Flow] = {}
        self.arrived: dict[tuple[int, int, int], deque] = defaultdict(deque)  # (src,dst,tag) -> arrival times
        self.waiting_recv: dict[tuple[int, int, int], deque] = defaultdict(deque)  # posted recvs
        self.link_bytes: dict[tuple[int, int], float] = defaultdict(float)
        self.relayed_bytes: dict[tuple[int, int], float] = defaultdict(float)
        self.timers: list[tuple[float, int, str, tuple]] = []  # (time, seq, kind, payload)
        self.seq = 0
        self.now = 0.0
        self.cpu_free = [0.0] * ranks
        # ranks to scan for ops that can start: all at first, then those an event touched
        # (an op's stream, dependencies and message state belong to its own rank only)
        self.dirty: set[int] = set(range(ranks))
        # max-min rates change only when a flow starts or ends, not at every timer event
        self.flows_changed = False

    def cpu(self, rank: int, t: float) -> float:
        """Charge one op's software cost to ``rank``'s processor from time ``t`` on."""
        overhead = self.network.op_overhead_s
        if overhead <= 0:
            return t
        t = max(t, self.cpu_free[rank]) + overhead
        self.cpu_free[rank] = t
        return t

    def reduce_time(self, length: int) -> float:
        return min(length, self.network.reduce_cap_bytes) / self.network.reduce_bytes_per_s

    def push(self, t: float, kind: str, payload: tuple) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (t, self.seq, kind, payload))

    def finish(self, rank: int, op, stream: str, end: float) -> None:
        self.done[rank][op.id] = end
        self.stream_free[(rank, stream)] = end
        self.cursor[rank][stream] += 1
        self.dirty.add(rank)  # only a rank whose op finished can start new ops

    def start_ready(self, rank: int) -> bool:
        """Start every op of ``rank`` whose stream, dependencies and message allow it."""
        progressed = False
        now, done = self.now, self.done[rank]
        for stream, ops in self.schedule.programs[rank].items():
            while self.cursor[rank][stream] < len(ops):
                op = ops[self.cursor[rank][stream]]
                if op.id in self.started[rank]:
                    break
                if any(a not in done or done[a] > now for a in op.after):
                    break
                if self.stream_free[(rank, stream)] > now:
                    break
                self.started[rank].add(op.id)
                progressed = True
                if op.kind == "compute":
                    self.push(now + op.seconds, "compute", (rank, stream, op.id, now))
                    break
                if op.kind == "send":
                    t_send = self.cpu(rank, now)
                    if t_send <= now:
                        self.queues[(rank, op.peer, op.plane)].append((op.tag, op.length))
                        self.finish(rank, op, stream, now)
                        continue
                    self.push(t_send, "send", (rank, stream, op.id, now))
                    break
                # recv: completes when the matching message has arrived
                key = (op.peer, rank, op.tag)
                if self.arrived[key]:
                    t_arr = self.arrived[key].popleft()
                    end = self.cpu(rank, max(now, t_arr)) + self.reduce_time(op.length)
                    self.push(end, "recv", (rank, stream, op.id, now))
                else:
                    self.waiting_recv[key].append((rank, stream, op.id, now))
                break
        return progressed

    def launch_flows(self) -> None:
        """Put the head message of every idle connection on the wire."""
        limit = self.network.servers if self.network.servers is not None else float("inf")
        for key, q in self.queues.items():
            if q and key not in self.active:
                tag, length = q.popleft()
                src, dst, plane = key
                links = self.network.links(src, dst, plane)
                relayed = any(b < limit for _, b in links[:-1])
                assured = self.network.assured.get(key, 0.0)
                self.active[key] = _Flow(src, dst, tag, length, float(length), links, relayed=relayed, assured=assured)
                self.flows_changed = True

    def deliver(self, flow: _Flow, t: float) -> None:
        key = (flow.src, flow.dst, flow.tag)
        t_arr = t + self.network.alpha_s * len(flow.links)
        if self.waiting_recv[key]:
            rank, stream, op_id, t_post = self.waiting_recv[key].popleft()
            _, op = self.ops_by_id[rank][op_id]
            end = self.cpu(rank, max(t_arr, t_post)) + self.reduce_time(op.length)
            self.push(end, "recv", (rank, stream, op_id, t_post))
        else:
            self.arrived[key].append(t_arr)

    def advance(self) -> bool:
        """Move the clock to the next event (a timer or the first flow to finish); False
        when nothing is left to happen."""
        t_flow = float("inf")
        finish_at: dict[tuple[int, int, int], float] = {}
        for key, f in self.active.items():
            t = self.now + (f.remaining / f.rate if f.rate > 0 else 0.0)
            finish_at[key] = t
            t_flow = min(t_flow, t)
        t_timer = self.timers[0][0] if self.timers else float("inf")
        if not self.active and not self.timers:
            return False
        t_next = min(t_flow, t_timer)
        dt = t_next - self.now
        for f in self.active.values():
            moved = min(f.remaining, f.rate * dt)
            f.remaining -= moved
            self._account(f, moved)
        self.now = t_next
        # a flow is done when its finish time is reached (comparing times, not leftover bytes,
        # stays exact when a transfer is far shorter than the clock's float resolution)
        for key in [
            k for k, f in self.active.items() if finish_at[k] <= t_next or f.remaining <= 1e-6 * max(1, f.length)
        ]:
            f = self.active.pop(key)
            self.flows_changed = True
            self._account(f, f.remaining)  # rounding leftovers
            self.deliver(f, t_next)
        while self.timers and self.timers[0][0] <= t_next + 1e-15:
            _, _, kind, (rank, stream, op_id, _t_start) = heapq.heappop(self.timers)
            _, op = self.ops_by_id[rank][op_id]
            if kind == "send":
                self.queues[(rank, op.peer, op.plane)].append((op.tag, op.length))
            self.finish(rank, op, stream, t_next)
        return True

    def _account(self, f: _Flow, nbytes: float) -> None:
        for link in f.links:
            self.link_bytes[link] += nbytes
            if f.relayed:
                self.relayed_bytes[link] += nbytes

    def run(self) -> Prediction:
        while True:
            while self.dirty:
                ranks = sorted(self.dirty)
                self.dirty.clear()
                for r in ranks:
                    self.start_ready(r)
            self.launch_flows()
            if self.flows_changed:
                max_min_rates(self.active.values(), self.network.capacity)
                self.flows_changed = False
            if not self.advance():
                break
        programs = self.schedule.programs
        unfinished = [
            (r, s) for r in range(self.ranks) for s, ops in programs[r].items() if self.cursor[r][s] < len(ops)
        ]
        if unfinished:
            r, s = unfinished[0]
            raise RuntimeError(
                f"schedule deadlocks in the model: rank {r} stream {s!r} stops at op "
                f"{programs[r][s][self.cursor[r][s]].id}"
            )
        rank_seconds = [max(self.done[r].values(), default=0.0) for r in range(self.ranks)]
        return Prediction(
            max(rank_seconds, default=0.0),
            rank_seconds,
            dict(self.link_bytes),
            dict(self.relayed_bytes),
            dict(self.stream_free),
        )


def predict(schedule, network: Network) -> Prediction:
    """Predict one execution of ``schedule`` (a contract.schedule Schedule) on ``network``."""
    return _Replay(schedule, network).run()
