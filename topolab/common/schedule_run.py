"""Run one schedule on a running emulated network: one worker per server, started in its
host, warm-up then timed iterations, each verified by the workers.

The measuring commands (`topolab collective`, `alloc --measure`, `place --run`, the
all-to-all routings) all do exactly this; `topolab run` has its own loop because it journals
every iteration and injects faults between them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Measured:
    """The timed iterations of one schedule (warm-ups left out of the lists)."""

    times_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)  # workers' CPU seconds per iteration, summed
    verified: bool = True  # every iteration, warm-ups included
    mismatches: list[str] = field(default_factory=list)
    # with ``trace_ranks``: the last timed iteration (a `workers.coordinator.IterationResult`
    # whose first ranks report every op) and each rank's clock (`ClockReading` by rank)
    traced: Any = None
    clocks: dict[int, Any] = field(default_factory=dict)


def run_schedule_on(
    net: Any,
    schedule: dict[str, Any],
    *,
    repeat: int,
    warmup: int = 1,
    timeout_s: float = 30.0,
    chunk_bytes: int | None = None,
    each: Callable[[int, Any], None] | None = None,
    trace_ranks: int | None = None,
) -> Measured:
    """Start the workers of ``schedule`` on ``net``'s hosts (with their plane source
    addresses) and run ``warmup + repeat`` iterations; ``each(i, result)`` sees every one.
    ``trace_ranks``: measure the ranks' clocks once they are up, and have ranks ``0 ..
    trace_ranks - 1`` report every op's start and end in the last timed iteration alone (a
    timeline of it: `topolab.results.trace_events`)."""
    from workers.coordinator import Coordinator

    servers = int(schedule["ranks"])
    hosts = [net.host_address(i) for i in range(servers)]

    def spawn(rank: int, argv: list[str]) -> subprocess.Popen:
        return net.popen(rank, argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)

    options: dict[str, Any] = {"chunk_bytes": chunk_bytes} if chunk_bytes else {}
    out = Measured()
    with Coordinator(
        schedule,
        hosts,
        spawn=spawn,
        timeout_s=timeout_s,
        plane_sources=[net.plane_addresses(i) for i in range(servers)],
        control_relay=net.relay_control,
        **options,
    ) as coord:
        traced = warmup + repeat - 1 if trace_ranks and repeat else None
        if traced is not None:
            out.clocks = coord.clock_offsets()
        for i in range(warmup + repeat):
            res = coord.run_iteration(i, {r: "ops" for r in range(trace_ranks or 0)} if i == traced else None)
            if i == traced:
                out.traced = res
            out.verified = out.verified and res.ok
            out.mismatches += res.mismatches[:3]
            if i >= warmup:
                out.times_s.append(res.time_s)
                out.cpu_s.append(sum(r.get("cpu_s", 0.0) for r in res.ranks))
            if each:
                each(i, res)
    return out
