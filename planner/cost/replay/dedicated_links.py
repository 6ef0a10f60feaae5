"""The replay in rounds: the prediction of the event replay (`events`) for a schedule whose
connections never share a link (TopoOpt's rings: each ring edge is a cable of its own) and
whose ops cost no processor time, computed over the schedule's arrays
(`contract.schedule.Program`) for all ranks at once.

Then every message runs alone at the slowest rate of its path and every op's end follows
from the ops it waits for (the rules of `planner.cost.predict`). With ``end(prev)`` the end
of the op before it in its stream and ``after`` the ops it waits for::

    start = max(end(prev), max over after of end(a))
    compute:  end = start + seconds
    send:     on_wire = max(start, free(c));  free(c) = on_wire + length / rate(c)
              arrival = free(c) + hops(c) * alpha;  end = start
    recv:     end = max(start, arrival of its message) + min(length, reduce_cap) / reduce_rate

where ``c`` is the send's connection, ``rate(c)`` the least capacity on its path (or the
one cable a connection gets of parallel ones) and ``free(c)`` when its previous message
left. Each round ends the next op of every stream whose op can end (a recv's message has
been sent, its ``after`` ops have ended): a ring pass advances one step per round on every
rank at once, about 0.1 us per op.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contract.schedule import COMPUTE as COMPUTE_CODE
from contract.schedule import RECV as RECV_CODE
from contract.schedule import SEND as SEND_CODE
from contract.schedule import Program, Schedule

from .network_view import Network
from .results import Prediction, Timeline


@dataclass
class _Layout:
    """A schedule's ops of all ranks in one set of arrays, stream by stream (a rank's streams
    in order, each stream's ops in order), sends matched with recvs: what
    `dedicated_replay` works on. Sends are numbered rank by rank, a rank's by channel
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
    """The arrays of `_Layout`, or None when the schedule is not one `dedicated_replay`
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


def dedicated_replay(schedule: Schedule, network: Network) -> Prediction | None:
    """`dedicated_replay_timed` without a timeline."""
    timed = dedicated_replay_timed(schedule, network)
    return None if timed is None else timed[0]


def dedicated_replay_timed(
    schedule: Schedule, network: Network, record: int | None = None
) -> tuple[Prediction, Timeline | None] | None:
    """The prediction of the event replay (`events.EventReplay`), computed in rounds (module
    docstring); None when the schedule is not one this replay takes (the caller replays it
    event by event).

    The conditions: no software cost per op (``op_overhead_s`` = 0: no rank's processor is
    shared), no planes, every connection (src, dst) fed by one stream of src and every
    channel (src, dst, tag) received by one stream of dst, each connection's path its own
    (no link on two connections' paths), every send matched by a recv. Then every message
    runs alone at the slowest rate of its path, a connection's messages go first in, first
    out in program order, and the k-th send of a channel meets its k-th recv, so every op's
    end follows from the ops before it.

    The event replay agrees to rounding: it ends timers due within 1e-15 s of each other
    together, and a message once only a millionth of it is left when another event comes
    (its ``done_below``), so its times may be earlier by up to a millionth of a message's
    time on the wire.

    With ``record``, also the `Timeline` of ranks ``0 .. record - 1``
    (`planner.cost.predict.predict_timeline`)."""
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
    """Every stream's end (`dedicated_replay`), or None if the schedule deadlocks; with
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
