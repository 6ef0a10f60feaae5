"""Automatic time dilation: the cable rate and the payload scale at which this machine emulates
a plan faithfully (``[emulation] link_mbps = "auto"``; docs/emulation.md section 2).

An emulated iteration is faithful while the shaped cables limit it, not the workers' CPU. The
workers' CPU work for one iteration does not depend on the cables' rate,

    W = ops x c_op + B x c_byte          (CPU seconds; `topolab.run.machine_probe.MachineCost`)

where ``ops`` are the iteration schedule's sends and receives and ``B`` the bytes its ranks
send, while the emulated iteration time grows as the rate falls: every dilated part of the
predicted iteration (transfers, compute slowed by the time scale, netem latency) scales with
1 / r, so T(r) = T(r0) x r0 / r from the prediction at the highest rate r0 (the config's
``link_mbps``, 100 Mbit/s by default). The chosen rate is the highest step of `RATE_STEPS`
at or below r0 at which the workers' load stays within their share of the cores:

    W / (cores x T(r)) <= WORKER_CPU_SHARE      i.e.   r <= r0 x WORKER_CPU_SHARE x cores x T(r0) / W

With frames of one MTU on the cables (``[emulation] packets``), TCP sends every message in
more packets than offload packets take, and each costs the workers ``c_packet`` more (the
probe's, at the run's MTU: `topolab.run.machine_probe.probe_frames`):

    W = ops x c_op + B x c_byte + P_extra x c_packet,   P_extra = sum over messages of
        tcp_packets(len, mtu) - tcp_packets(len, 64 KiB)   (`contract.physics.extra_frames`)

(topoopt-12 in frames at 100 Mbit/s: 21% estimated without it, 53% with it, where the warm-up
measured 53%); and the workers' share is `FRAMES_WORKER_CPU_SHARE`, below `WORKER_CPU_SHARE`.

``W`` is the probe's loopback figure times `SHAPED_CABLE_CPU`: on the emulated cables the
same workers need about twice the CPU (veth, HTB and TCP at the cables' MTU in their system
calls), measured 1.8-2.3x the loopback estimate on topoopt-12, ResNet-50 and DLRM at 12
servers and ResNet-50 at 64. `WORKER_CPU_SHARE` is then the share of the cores the workers
are expected to keep busy; the cables' softirq work, not charged to them, takes part of
the rest. At 128 servers the workers measured 1.36-1.46x W (about half of it in ZeroMQ's
I/O threads, mostly system time), so the share is kept below where fidelity was measured to
end (`WORKER_CPU_SHARE`).

A minute an iteration (a run of a few iterations stays a matter of minutes, not a faithful
hour): when the rate so chosen would make the emulated iteration longer than
`ITERATION_BUDGET_S`, the rate is raised to the lowest step at which it is not, provided the
workers' load there stays within `WORKER_CPU_SHARE_LIMIT`:

    r = step_ceil(r0 x T(r0) / ITERATION_BUDGET_S)    if W / (cores x T(r)) <= WORKER_CPU_SHARE_LIMIT

The estimate is checked against the run itself. The workers' CPU for an iteration is not
quite independent of the rate: at a lower rate fewer packets arrive per wake-up of a worker
and of the kernel, so W grows as r falls until every packet pays its own wake-up (DLRM on 64
servers, d = 4, payload scale 0.6: 3.8 CPU-s an iteration at 30 Mbit/s, 6.5 at 10, 7.0 at 5,
against W = 1.9 estimated; 28, 4.3 and 2.5% off). A shaped cable at the run's MTU, on this
machine or in a VM, costs what it costs; so with an automatic rate the warm-up iteration's
measured load L (the workers' CPU seconds over cores x its seconds) decides: above
`WORKER_CPU_SHARE` (`FRAMES_MEASURED_SHARE` with frames) the network is built again at

    r' = step_floor(r x share / L x `LOAD_GROWTH_MARGIN`)

(`rate_for_measured_load`), at most `MEASURED_LOAD_RETRIES` times.

Memory comes first: each worker holds its buffers about twice (the buffers, and what is in
flight in its socket queues) plus `WORKER_BASE_MIB` of interpreter and libraries and
`WORKER_OP_BYTES` for each of its ops, and the n workers must fit in `MEMORY_SHARE` of the
memory available once the emulated hosts have taken theirs (``[emulation] host_memory_mib``
each; `topolab.run.measured_run.dilate`) and the run's own process its copy of the schedule for
the workers (`DRIVER_OP_BYTES` an op: BERT on 128 servers of degree 8 has 13.0 million ops, and
while only the buffers counted the kernel ended that run out of memory). When they would not, the
payload scale (every transfer and buffer multiplied by it) is the highest step that fits;
never an out-of-memory kill. An explicit payload scale or rate is kept; the choice only says
when it would overload the machine (`Dilation.warning`, at the top of the run), and the run's
closing line says it again (`closing_warning`), where a reader of its figures looks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from contract.emulation import MIN_LINK_MBPS
from contract.errors import RunError
from contract.physics import extra_frames
from contract.schedule import COMPUTE, Schedule

from ..results.run_results import CPU_BOUND_LOAD
from .machine_probe import MachineCost

WORKER_CPU_SHARE = 0.5
"""The share of the cores the workers are expected to keep busy (module docstring), W's
estimate: ResNet-50 on 128 servers measured 9.2-11.8% off in eight of nine runs at an
estimated 52-64% (68% measured), 2.9-4.2% in three runs at 53% and 1.9% at 48%; on 64
servers 1.8% at 64% measured and 55% at 92% (docs/emulation.md section 3)."""
FRAMES_WORKER_CPU_SHARE = 0.3
"""`WORKER_CPU_SHARE` where the cables carry frames (module docstring): every frame is also
the kernel's work on each cable it crosses, not charged to the workers, so they leave it more
of the cores. Measured with the frames' cost in the estimate: topoopt-12 in frames 2.9% off at
42% estimated (80 Mbit/s), 0.9% at 32% (60), 0.6% at 27% (50); NCF-12 5.5% at 35% (100), 0.5%
at 21% (60)."""
FRAMES_MEASURED_SHARE = 0.4
"""`WORKER_CPU_SHARE` for the warm-up's measured load where the cables carry frames
(`rate_for_measured_load`): their kernel work on the relays is not the workers', and it
delays the ring steps that follow an all-to-all. NCF on 64 servers of degree 4 in frames of
4096 bytes measured 11.8% slower than predicted at 30 Mbit/s (workers 47% busy, rebuilt from
50), 2.2% and 3.2% at 15 (29-30%); on 32 servers 7.8% at 43%; where the estimate keeps them
within `FRAMES_WORKER_CPU_SHARE`, the 12-server DLRM scenarios measure 16-18%."""
WORKER_CPU_SHARE_LIMIT = 0.6
"""The estimated share up to which the rate may be raised to keep an iteration within
`ITERATION_BUDGET_S` (module docstring)."""
ITERATION_BUDGET_S = 60.0
"""The longest emulated iteration the automatic rate aims for (module docstring)."""
SHAPED_CABLE_CPU = 2.0
"""The workers' CPU on the emulated cables over the loopback probe's estimate (module docstring)."""
MEMORY_SHARE = 0.7
"""The share of the available memory the workers' buffers may take."""
WORKER_BASE_MIB = 48.0
"""One worker process without its buffers: Python, numpy and pyzmq measured 35 MiB resident
here, plus its sockets' queues."""
DRIVER_OP_BYTES = 400.0
"""What the run's own process holds for each op of the schedule while it starts the workers:
the schedule as the workers' JSON objects (`Schedule.to_dict`, 367 bytes an op; BERT on 128
servers of degree 8, 13.0 million ops: 4.45 GiB), measured 2026-11-29; each rank's spec text
is written and dropped in turn (all of them held at once took 99 bytes an op more)."""
WORKER_OP_BYTES = 450.0
"""What a worker holds for each of its ops: its program, read as op records
(`workers.spec.load_spec`), 414 bytes an op resident (``python -m tests.workers.test_op_memory``,
2026-11-29; read as JSON objects first, 886, as a worker of the zero-payload twin of BERT on 128
servers of degree 8 measured: 800-870 bytes an op over `WORKER_BASE_MIB`)."""
BUFFER_COPIES = 2.0
"""How many times a worker holds its buffers' bytes at most (module docstring)."""
LOAD_GROWTH_MARGIN = 0.75
"""How much further than the warm-up's load says the rate falls (module docstring): the
workers' CPU an iteration grows as the rate falls, 1.7x from 30 to 10 Mbit/s for DLRM on 64
servers, so the plain ratio would take several rebuilds to get there."""
MEASURED_LOAD_RETRIES = 2
"""How many times a run with an automatic rate is built again at a lower rate after its
warm-up measured the workers' load above `WORKER_CPU_SHARE` (module docstring)."""
RATE_STEPS = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)
"""The mantissas of the rates and scales chosen (x a power of ten), so that a choice reads
well and does not move with every small change of the probe."""


def step_floor(x: float) -> float:
    """The largest ``m x 10^k`` (m in `RATE_STEPS`) not above ``x`` (> 0)."""
    if not x > 0 or not math.isfinite(x):
        raise ValueError(f"expected a positive number, got {x!r}")
    k = math.floor(math.log10(x))
    for m in reversed(RATE_STEPS):
        v = round(m * 10.0**k, 12)
        if v <= x * (1 + 1e-12):
            return v
    return round(RATE_STEPS[-1] * 10.0 ** (k - 1), 12)


def step_ceil(x: float) -> float:
    """The smallest ``m x 10^k`` (m in `RATE_STEPS`) not below ``x`` (> 0)."""
    k = math.floor(math.log10(step_floor(x)))
    for v in (round(m * 10.0**e, 12) for e in (k, k + 1) for m in RATE_STEPS):
        if v >= x * (1 - 1e-12):
            return v
    raise AssertionError("unreachable: 10^(k+1) > x")


def transfer_ops(schedule: Schedule) -> int:
    """The sends and receives of ``schedule`` (what the per-op CPU cost is paid for)."""
    return sum(int(np.count_nonzero(np.asarray(prog.kind) != COMPUTE)) for prog in schedule.programs)


def extra_frame_packets(schedule: Schedule, mtu: int) -> int:
    """P_extra of ``schedule`` (module docstring): the packets its messages take as frames of
    ``mtu`` beyond what they take as offload packets."""
    return extra_frames(schedule.send_lengths(), mtu)


def schedule_buffer_bytes(schedule: Schedule) -> int:
    """Bytes of buffers one worker allocates for ``schedule``."""
    return sum(b.bytes for b in schedule.buffers.values())


def worker_memory_bytes(buffer_bytes: float, ops: float = 0.0) -> float:
    """What one worker is expected to hold in memory with ``buffer_bytes`` of buffers and
    ``ops`` ops."""
    return BUFFER_COPIES * buffer_bytes + WORKER_BASE_MIB * 2**20 + WORKER_OP_BYTES * ops


@dataclass
class Dilation:
    """The rate and payload scale a run uses, what they were chosen from, and why."""

    auto: bool  # chosen here (False: the scenario's explicit rate, only checked)
    link_mbps: float
    payload_scale: float
    highest_mbps: float  # r0: the rate the prediction T(r0) was made at
    cores: int
    op_cpu_s: float
    byte_cpu_s: float
    ops: int
    bytes_sent: int
    cpu_demand_s: float  # W at the chosen payload scale
    iteration_s: float  # T(link_mbps), emulated seconds (estimated from T(r0))
    cpu_load: float  # W / (cores x T(link_mbps)): the expected share of the cores busy
    memory_gib: float  # the n workers' expected memory: buffers, ops and each one's base (`worker_memory_bytes`)
    memory_available_gib: float
    why: str
    warning: str = ""
    auto_mbps: float | None = None  # with a warning on a fixed rate: what link_mbps = "auto" picks
    extra_packets: int = 0  # frames: P_extra, the packets beyond offload packets (module docstring)
    packet_cpu_s: float = 0.0  # frames: c_packet at the run's MTU

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.warning:
            del d["warning"]
        if self.auto_mbps is None:
            del d["auto_mbps"]
        return d


def closing_warning(dilation: Mapping[str, Any] | None) -> str:
    """The overload warning of a run's start (`Dilation.warning`), said again at its end, in
    the past tense (``dilation``: `Dilation.to_dict`, as results.json keeps it); empty when the
    rate did not overload the cores."""
    if not dilation or not dilation.get("warning"):
        return ""
    rate, load, cores = dilation["link_mbps"], dilation["cpu_load"], dilation["cores"]
    if dilation.get("auto"):
        return (
            f"warning: even the lowest rate, {rate:g} Mbit/s, kept the workers at ~{load:.0%} of the {cores} cores "
            "(estimated): this run measured the CPU as much as the cables"
        )
    pick = dilation.get("auto_mbps")
    return (
        f"warning: the fixed rate emulation.link_mbps = {rate:g} kept the workers at ~{load:.0%} of the {cores} cores "
        "(estimated): this run measured the CPU, not the cables; "
        + (f'link_mbps = "auto" (or --link-mbps auto) picks {pick:g}' if pick else 'try link_mbps = "auto"')
    )


def payload_for_memory(ranks: int, buffer_bytes: float, payload_scale: float, available: float, ops: int = 0) -> float:
    """The highest payload scale (a step, at most ``payload_scale``) at which ``ranks`` workers
    holding ``buffer_bytes`` each at ``payload_scale`` and a schedule of ``ops`` ops in all
    (`worker_memory_bytes`) fit in `MEMORY_SHARE` of ``available`` less the run's own copy of
    the schedule (`DRIVER_OP_BYTES` an op)."""
    driver = DRIVER_OP_BYTES * ops
    budget = MEMORY_SHARE * max(0.0, available - driver) / ranks - worker_memory_bytes(0.0, ops / ranks)
    need = BUFFER_COPIES * buffer_bytes
    if need <= budget or buffer_bytes <= 0:
        return payload_scale
    if budget <= 0:
        without = ranks * worker_memory_bytes(0.0, ops / ranks)
        raise RunError(
            f"not enough memory for the workers: {ranks} workers need {without / 2**30:.1f} GiB without buffers"
            + (f" and this run's copy of the schedule ({ops} ops) {driver / 2**30:.1f} GiB" if ops else "")
            + f"; {available / 2**30:.1f} GiB are available, and the workers may take {MEMORY_SHARE:.0%} of what "
            "the run leaves (fewer servers, or [emulation] machines to spread them over several)"
        )
    return step_floor(payload_scale * budget / need)


def dilated_s(predicted_s: float, link_mbps: float, rate: float) -> float:
    """T(r): the emulated iteration at ``rate``, from ``predicted_s`` at ``link_mbps`` (r0)."""
    return predicted_s * link_mbps / rate


def auto_rate(
    demand_s: float, predicted_s: float, link_mbps: float, cores: int, share: float = WORKER_CPU_SHARE
) -> tuple[float, float]:
    """The automatic rate for an iteration that costs the workers ``demand_s`` CPU seconds and
    takes ``predicted_s`` emulated at ``link_mbps`` (r0), and the rate the workers' ``share``
    (`WORKER_CPU_SHARE`; frames: `FRAMES_WORKER_CPU_SHARE`) alone would give (module
    docstring: the share, then the minute an iteration)."""
    capacity = share * cores
    if demand_s <= capacity * predicted_s:
        return link_mbps, link_mbps
    preferred = max(MIN_LINK_MBPS, step_floor(link_mbps * capacity * predicted_s / demand_s))
    if dilated_s(predicted_s, link_mbps, preferred) <= ITERATION_BUDGET_S:
        return preferred, preferred
    within = min(link_mbps, step_ceil(link_mbps * predicted_s / ITERATION_BUDGET_S))
    if within > preferred and demand_s / (cores * dilated_s(predicted_s, link_mbps, within)) <= WORKER_CPU_SHARE_LIMIT:
        return within, preferred
    return preferred, preferred


def rate_for_measured_load(link_mbps: float, measured_load: float, share: float = WORKER_CPU_SHARE) -> float | None:
    """The rate to build again at after an iteration at ``link_mbps`` kept the workers
    ``measured_load`` busy (CPU seconds over cores x seconds), or None where it stayed within
    ``share`` (`WORKER_CPU_SHARE`; with frames `FRAMES_MEASURED_SHARE`) or no lower rate
    exists (module docstring)."""
    if not measured_load > share:
        return None
    lower = max(MIN_LINK_MBPS, step_floor(link_mbps * share / measured_load * LOAD_GROWTH_MARGIN))
    return lower if lower < link_mbps else None


def choose(
    *,
    ranks: int,
    ops: int,
    bytes_sent: int,
    buffer_bytes: int,
    predicted_s: float,
    link_mbps: float,
    payload_scale: float,
    cost: MachineCost,
    auto: bool,
    available: float,
    frames: bool = False,
    extra_packets: int = 0,
    packet_cpu_s: float = 0.0,
) -> Dilation:
    """The rate (auto: `auto_rate`, a step at or below ``link_mbps``) for a schedule of ``ops``
    ops sending ``bytes_sent`` bytes: where the workers' CPU demand stays within
    `WORKER_CPU_SHARE` of the cores, or within `WORKER_CPU_SHARE_LIMIT` to keep an iteration
    within `ITERATION_BUDGET_S`, given ``predicted_s``, the emulated iteration at ``link_mbps``
    (module docstring). The schedule's figures are at ``payload_scale``; with ``frames`` on
    the cables, ``extra_packets`` cost ``packet_cpu_s`` each and the workers' share is
    `FRAMES_WORKER_CPU_SHARE`."""
    demand = SHAPED_CABLE_CPU * (cost.demand_s(ops, bytes_sent) + extra_packets * packet_cpu_s)
    share = FRAMES_WORKER_CPU_SHARE if frames else WORKER_CPU_SHARE
    frame_work = f" + {extra_packets} frames x {packet_cpu_s * 1e6:.1f} us" if extra_packets else ""
    rate, preferred = auto_rate(demand, predicted_s, link_mbps, cost.cores, share) if auto else (link_mbps, link_mbps)
    iteration_s = dilated_s(predicted_s, link_mbps, rate)
    load = demand / (cost.cores * iteration_s) if iteration_s > 0 else 0.0
    memory = ranks * worker_memory_bytes(buffer_bytes, ops / ranks)
    work = (
        f"the workers need ~{demand:.3g} CPU-s per iteration ({SHAPED_CABLE_CPU:g} x ({ops} ops x "
        f"{cost.op_cpu_s * 1e6:.0f} us + {bytes_sent / 1e9:.3g} GB x {cost.byte_cpu_s * 1e9:.2f} s/GB{frame_work}) on loopback)"
    )
    if not auto:
        why = f"set by the scenario; {work}: {load:.0%} of {cost.cores} cores"
    elif rate < link_mbps or rate > preferred:
        why = f"{work}, {demand / (cost.cores * predicted_s):.0%} of {cost.cores} cores at {link_mbps:g} Mbit/s; " + (
            f"{share:.0%} would take {preferred:g} Mbit/s and "
            f"~{dilated_s(predicted_s, link_mbps, preferred):.0f} s an iteration, so {rate:g} Mbit/s: "
            f"~{iteration_s:.0f} s at {load:.0%} (an iteration within {ITERATION_BUDGET_S:g} s while the load "
            f"stays within {WORKER_CPU_SHARE_LIMIT:.0%})"
            if rate > preferred
            else f"at {rate:g} Mbit/s {load:.0%} (at most {share:.0%}{' with frames' if frames else ''})"
        )
    else:
        why = f"{work}: {load:.0%} of {cost.cores} cores at the highest rate, {link_mbps:g} Mbit/s"
    warning, auto_mbps = "", None
    if load > CPU_BOUND_LOAD:
        auto_mbps = None if auto else auto_rate(demand, predicted_s, link_mbps, cost.cores, share)[0]
        warning = (
            f"emulation.link_mbps = {rate:g}: the workers would keep {load:.0%} of this machine's "
            f"{cost.cores} cores busy, so the run will measure the CPU, not the cables"
            + (f' (link_mbps = "auto" picks {auto_mbps:g})' if auto_mbps is not None else " (the lowest rate there is)")
        )
    return Dilation(
        auto=auto,
        link_mbps=rate,
        payload_scale=payload_scale,
        highest_mbps=link_mbps,
        cores=cost.cores,
        op_cpu_s=cost.op_cpu_s,
        byte_cpu_s=cost.byte_cpu_s,
        ops=ops,
        bytes_sent=bytes_sent,
        cpu_demand_s=demand,
        iteration_s=iteration_s,
        cpu_load=load,
        memory_gib=memory / 2**30,
        memory_available_gib=available / 2**30 if math.isfinite(available) else -1.0,
        why=why,
        warning=warning,
        auto_mbps=auto_mbps,
        extra_packets=extra_packets,
        packet_cpu_s=packet_cpu_s,
    )
