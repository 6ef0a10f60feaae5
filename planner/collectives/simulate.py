"""Data-level simulator: execute a schedule on numpy buffers, without sockets or time.

It runs every rank's streams with the executor's semantics (ops of a stream in order, an op
waits for its ``after`` ops, eager sends that capture the region's content when they start,
FIFO matching per (src, dst, tag), recv reduces or copies) and returns the final buffers, so
a test can prove a generator's schedule AllReduces correctly before any worker runs it.

Interleaving is chosen by a seeded random generator: a schedule whose result depends on the
order concurrent streams happen to run in (a race) fails for some seed. A state where ops
remain but none can run is a deadlock and is reported with the blocked ops.
"""

from __future__ import annotations

import random
from collections import defaultdict, deque
from dataclasses import dataclass

import numpy as np

from contract.schedule import Schedule


class ScheduleError(RuntimeError):
    """The schedule cannot execute (deadlock, mismatched send/recv)."""


@dataclass
class SimResult:
    buffers: dict[str, np.ndarray]  # name -> array of shape (ranks, items)
    ops_executed: int
    messages: int


def make_inputs(schedule: Schedule, seed: int = 0, high: int = 16) -> dict[str, np.ndarray]:
    """Random small-integer inputs per rank, so float32 sums are exact."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, buf in schedule.buffers.items():
        items = buf.bytes // buf.itemsize
        out[name] = rng.integers(0, high, size=(schedule.ranks, items)).astype(buf.dtype)
    return out


def simulate_schedule(schedule: Schedule, inputs: dict[str, np.ndarray] | None = None, seed: int = 0) -> SimResult:
    """Execute ``schedule`` on copies of ``inputs`` (default `make_inputs`)."""
    schedule.validate()
    inputs = inputs if inputs is not None else make_inputs(schedule, seed)
    bufs = {name: np.array(inputs[name], dtype=buf.dtype, copy=True) for name, buf in schedule.buffers.items()}
    views = {name: bufs[name].view(np.uint8).reshape(schedule.ranks, -1) for name in bufs}
    rng = random.Random(seed)

    streams = [(rank, name, ops) for rank, prog in enumerate(schedule.programs) for name, ops in prog.items()]
    cursor = [0] * len(streams)
    done: list[set[int]] = [set() for _ in range(schedule.ranks)]
    channels: dict[tuple[int, int, int], deque] = defaultdict(deque)
    remaining = sum(len(ops) for _, _, ops in streams)
    executed = messages = 0
    order = list(range(len(streams)))

    while remaining:
        progress = False
        rng.shuffle(order)
        for si in order:
            rank, _, ops = streams[si]
            # run this stream's head op if it can run; random budget interleaves streams
            for _ in range(rng.randint(1, 3)):
                if cursor[si] >= len(ops):
                    break
                op = ops[cursor[si]]
                if any(a not in done[rank] for a in op.after):
                    break
                if op.kind == "send":
                    itemsize = schedule.buffers[op.buffer].itemsize
                    data = views[op.buffer][rank, op.offset : op.offset + op.length].copy()
                    channels[(rank, op.peer, op.tag)].append((data, itemsize, op.id))
                    messages += 1
                elif op.kind == "recv":
                    chan = channels[(op.peer, rank, op.tag)]
                    if not chan:
                        break
                    data, _, send_id = chan.popleft()
                    if len(data) != op.length:
                        raise ScheduleError(
                            f"rank {rank} op {op.id} expects {op.length} bytes from rank "
                            f"{op.peer} (tag {op.tag}) but its send op {send_id} has {len(data)}"
                        )
                    dt = schedule.buffers[op.buffer].dtype
                    target = bufs[op.buffer][rank].view(np.uint8)[op.offset : op.offset + op.length]
                    tv, dv = target.view(dt), data.view(dt)
                    if op.mode == "reduce":
                        np.add(tv, dv, out=tv)
                    else:
                        tv[:] = dv
                done[rank].add(op.id)
                cursor[si] += 1
                remaining -= 1
                executed += 1
                progress = True
        if not progress:
            blocked = []
            for si, (rank, name, ops) in enumerate(streams):
                if cursor[si] < len(ops):
                    op = ops[cursor[si]]
                    blocked.append(
                        f"rank {rank} stream {name!r} op {op.id} ({op.kind}"
                        + (f" peer {op.peer} tag {op.tag}" if op.peer >= 0 else "")
                        + ")"
                    )
            raise ScheduleError(
                "deadlock: no op can run; blocked: "
                + "; ".join(blocked[:8])
                + (f" and {len(blocked) - 8} more" if len(blocked) > 8 else "")
            )
    leftovers = {k: len(v) for k, v in channels.items() if v}
    if leftovers:
        (src, dst, tag), count = next(iter(leftovers.items()))
        raise ScheduleError(
            f"{sum(leftovers.values())} messages never received, e.g. "
            f"{count} from rank {src} to rank {dst} with tag {tag}"
        )
    return SimResult(bufs, executed, messages)


def verify(schedule: Schedule, inputs: dict[str, np.ndarray], final: dict[str, np.ndarray]) -> list[str]:
    """Compare ``final`` buffers with what the schedule's checks require; list mismatches."""
    problems = []
    for check in schedule.checks:
        buf = schedule.buffers[check.buffer]
        lo, hi = check.offset // buf.itemsize, (check.offset + check.length) // buf.itemsize
        if check.kind == "allreduce":
            for group in check.groups:
                expected = inputs[check.buffer][group, lo:hi].sum(axis=0, dtype=np.float64)
                for m in group:
                    got = final[check.buffer][m, lo:hi]
                    if not np.array_equal(got, expected):
                        bad = int(np.flatnonzero(got != expected)[0])
                        problems.append(
                            f"rank {m} {check.buffer}[{lo + bad}] = {got[bad]}, "
                            f"expected {expected[bad]} (group {group})"
                        )
        elif check.kind == "copy":
            expected = inputs[check.buffer][check.src, lo:hi]
            got = final[check.buffer][check.dst, lo:hi]
            if not np.array_equal(got, expected):
                problems.append(f"rank {check.dst} {check.buffer}[{lo}:{hi}] differs from rank {check.src}'s input")
        else:
            problems.append(f"unknown check kind {check.kind!r}")
    return problems


def simulate_and_verify(schedule: Schedule, seed: int = 0) -> list[str]:
    """Run with random inputs and return the mismatches (empty list: correct)."""
    inputs = make_inputs(schedule, seed)
    result = simulate_schedule(schedule, inputs, seed)
    return verify(schedule, inputs, result.buffers)
