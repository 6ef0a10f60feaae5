"""What the workers cost this machine: CPU seconds per op and per byte, measured once per
machine and per version of the workers, so that `topolab.run.time_dilation` can pick a cable rate
at which the workers' CPU demand fits the cores.

The probe runs real workers on loopback (no network built): `PROBE_RANKS` ranks
run TopoOpt's multi-ring AllReduce over both directions of one ring,

- ``PROBE_ROUNDS`` rounds of it chained on the same streams with a payload so small that only
  the per-op cost counts: ``op_cpu_s`` = the workers' CPU seconds (user + system, summed over
  the ranks, `workers.executor.IterationReport.cpu_s`) over the ops run;
- one round on ``PROBE_BYTES`` bytes: ``byte_cpu_s`` = (its CPU seconds - its ops x
  ``op_cpu_s``) over the bytes the ranks sent (each byte is also received, reduced or copied
  once: its whole path through the workers).

A run whose cables carry frames of one MTU (``[emulation] packets``) has TCP send many more
packets than offload packets take, each with its own cost in the workers' system calls: the
large round runs again on the same loopback, now at that MTU under one HTB class of a rate that
does not bind (the cables' qdisc, `emulator.shaping.tc_batch`), once with offload packets and
once with ``gso_max_size`` = the MTU, and ``packet_cpu_s[mtu]`` = the difference of their CPU
seconds over the difference of their packets (`contract.physics.extra_frames`): 6.3-6.8 us a
packet at MTU 9000 here, so that a topoopt-12 iteration in frames costs about twice its offload
figure (`probe_frames`, once per MTU, added to the cache).

Each figure is the median of `PROBE_REPEATS` verified iterations after a warm-up. Loopback
TCP costs the kernel less than a shaped veth cable (no qdisc, no netem, a larger MTU): the
rate chooser doubles the estimate (`topolab.run.time_dilation.SHAPED_CABLE_CPU`) and leaves the
workers only a share of the cores (`topolab.run.time_dilation.WORKER_CPU_SHARE`).

The workers run in a network namespace of the probe's own (`private_loopback`: nothing but
its loopback, up), never in the machine's: their data sockets on 127.0.0.1 are out of reach
of every other process, and the namespace has no name, so nothing is left to clean. Making it
needs root (CAP_SYS_ADMIN), as every command that probes has (`topolab run`, `compare`);
without it the probe refuses in one line rather than listen on the machine's loopback (its
control socket is ipc:// in a 0700 folder; its data plane is TCP, which it measures, so it
cannot move to ipc:// without measuring something else).

The result is cached in ``$XDG_CACHE_HOME/topolab/machine-cost.json`` (default
``~/.cache``), keyed by this machine (``/etc/machine-id``, the number of cores) and by a hash
of the workers' source files: a new executor is probed again, a new plan is not.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import socket
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from contract.errors import RunError
from contract.physics import OFFLOAD_PACKET_BYTES, extra_frames
from contract.schedule import Check, Schedule, ScheduleBuilder
from planner.collectives.rings import add_multiring_allreduce, topoopt_rings

PROBE_RANKS = 4
PROBE_ROUNDS = 40  # 40 x 96 ops: a few thousand ops per iteration
PROBE_BYTES = 32 << 20
PROBE_REPEATS = 3
PROBE_TIMEOUT_S = 60.0  # a probe worker silent for this long fails the probe, naming its rank
CACHE_FILE = "machine-cost.json"
PROBE_HTB_BPS = 100_000_000_000  # the frames probe's HTB class: 100 Gbit/s, a rate loopback never reaches
TC_TIMEOUT_S = 10.0  # one tc -batch of two lines on the probe's own loopback


@dataclass(frozen=True)
class MachineCost:
    """The workers' CPU cost on this machine (module docstring)."""

    op_cpu_s: float  # CPU seconds per op (send or recv), payload aside
    byte_cpu_s: float  # CPU seconds per byte sent (and received at the other end)
    cores: int
    key: str  # machine and workers' version the figures hold for
    probe_s: float  # how long the probe took
    packet_cpu_s: Mapping[str, float] = field(default_factory=dict)
    """CPU seconds per packet sent as frames of one MTU beyond what offload packets take, by
    MTU (as text; `probe_frames`)."""

    def demand_s(self, ops: int, bytes_sent: float) -> float:
        """CPU seconds the workers need for ``ops`` ops moving ``bytes_sent`` bytes."""
        return ops * self.op_cpu_s + bytes_sent * self.byte_cpu_s

    def frame_cpu_s(self, mtu: int) -> float | None:
        """``packet_cpu_s`` at ``mtu`` (None: not probed yet)."""
        return self.packet_cpu_s.get(str(mtu))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "packet_cpu_s": dict(self.packet_cpu_s)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MachineCost:
        return cls(
            op_cpu_s=float(d["op_cpu_s"]),
            byte_cpu_s=float(d["byte_cpu_s"]),
            cores=int(d["cores"]),
            key=str(d["key"]),
            probe_s=float(d["probe_s"]),
            packet_cpu_s={str(int(k)): float(v) for k, v in d.get("packet_cpu_s", {}).items()},
        )


def machine_key() -> str:
    """This machine and the workers' version: machine id, cores, hash of workers/*.py and of
    the compiled loop's source (workers/engine.c)."""
    try:
        machine = Path("/etc/machine-id").read_text().strip()
    except OSError:
        machine = os.uname().nodename
    import workers

    digest = hashlib.sha256()
    here = Path(workers.__file__).parent
    for path in sorted([*here.glob("*.py"), *here.glob("*.c")]):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return f"{machine[:12]}-{os.cpu_count() or 1}cpu-workers.{digest.hexdigest()[:12]}"


def cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "topolab" / CACHE_FILE


def probe_schedule(rounds: int, nbytes: int) -> Schedule:
    """``rounds`` multi-ring AllReduces of ``nbytes`` over `PROBE_RANKS` ranks, one after the
    other on the same streams, each checked."""
    n = PROBE_RANKS
    rings = topoopt_rings(n, [1])
    b = ScheduleBuilder(n, "probe")
    b.buffer("grad", nbytes * rounds)
    after: dict[int, list[int]] = {}
    for r in range(rounds):
        lasts = add_multiring_allreduce(b, rings, "grad", r * nbytes, nbytes, stream_prefix="ar", after=after)
        after = {rank: ops for rank, ops in lasts.items()}
    b.check(Check("allreduce", "grad", 0, nbytes * rounds, groups=[list(range(n))]))
    return b.build()


@contextlib.contextmanager
def private_loopback() -> Iterator[None]:
    """Run the body with the calling thread in a new network namespace whose only interface,
    its loopback, is up; the processes the body starts (the probe's workers) live in it.

    The namespace is held by that thread until the body ends and by those processes until
    they end (the coordinator ends them; killed, it takes them along by PR_SET_PDEATHSIG), and
    vanishes with the last of them: it has no name and no file. The thread comes back to its
    namespace at the end, also on an exception (SIGTERM's SystemExit included). Raises
    `RunError` without root (CAP_SYS_ADMIN)."""
    from emulator import nlbatch  # the emulator's import (~0.4 s) only where a probe runs
    from emulator.nsutil import CLONE_NEWNET

    libc = ctypes.CDLL(None, use_errno=True)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.unshare(CLONE_NEWNET) != 0:
            raise RunError(
                "machine probe: cannot make a network namespace of its own for its workers "
                f"(unshare: {os.strerror(ctypes.get_errno())}): it needs root, and never runs them "
                "on the machine's own loopback"
            )
        try:
            nlbatch.send(nlbatch.link_up(1, socket.if_nametoindex("lo")), labels={1: "machine probe: lo up"})
            yield
        finally:
            if libc.setns(home, CLONE_NEWNET) != 0:
                raise RunError(
                    f"machine probe: cannot return to its network namespace: {os.strerror(ctypes.get_errno())}"
                )
    finally:
        os.close(home)


def _median_cpu(schedule: Schedule, timeout_s: float) -> float:
    """The median over `PROBE_REPEATS` verified iterations of the workers' summed CPU seconds
    (run inside `private_loopback`)."""
    from workers.coordinator import run_schedule

    results = run_schedule(schedule.to_dict(), iterations=PROBE_REPEATS, warmup=1, timeout_s=timeout_s)
    if not all(r.ok for r in results):
        raise RunError(f"machine probe: a probe iteration failed verification: {results[0].mismatches[:1]}")
    return statistics.median(sum(r.get("cpu_s", 0.0) for r in res.ranks) for res in results)


def probe(timeout_s: float = PROBE_TIMEOUT_S, clock: Callable[[], float] = time.monotonic) -> MachineCost:
    """Measure the workers' CPU cost per op and per byte on the loopback of a network
    namespace of the probe's own (module docstring)."""
    t0 = clock()
    min_bytes = 4 * PROBE_RANKS * 2  # every ring's every chunk non-empty
    small = probe_schedule(PROBE_ROUNDS, min_bytes)
    large = probe_schedule(1, PROBE_BYTES)
    with private_loopback():
        op_cpu = _median_cpu(small, timeout_s) / small.op_count()
        large_cpu = _median_cpu(large, timeout_s)
    sent = sum(large.bytes_sent())
    byte_cpu = max(0.0, large_cpu - large.op_count() * op_cpu) / sent
    return MachineCost(op_cpu, byte_cpu, os.cpu_count() or 1, machine_key(), clock() - t0)


def shape_loopback(mtu: int, gso_max_size: int, shaped: bool) -> None:
    """Give the probe's loopback (the calling thread's namespace, `private_loopback`) ``mtu``
    and ``gso_max_size``, and with ``shaped`` the cables' HTB qdisc at `PROBE_HTB_BPS`."""
    from pyroute2 import IPRoute

    from emulator.shaping import Shaping, tc_batch

    with IPRoute() as ipr:
        ipr.link("set", index=socket.if_nametoindex("lo"), mtu=mtu, gso_max_size=gso_max_size)
    if shaped:
        text = tc_batch([Shaping("lo", PROBE_HTB_BPS)], use_netem=False)
        try:
            done = subprocess.run(
                ["tc", "-batch", "-"], input=text, capture_output=True, text=True, timeout=TC_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise RunError(f"machine probe: tc on its own loopback: {err}") from err
        if done.returncode != 0:
            raise RunError(f"machine probe: tc refused the loopback's HTB class: {done.stderr.strip()[:200]}")


def probe_frames(mtu: int, timeout_s: float = PROBE_TIMEOUT_S) -> float:
    """CPU seconds per packet TCP sends as frames of one ``mtu`` beyond the offload packets
    it would send (module docstring): the large probe round on the shaped loopback at ``mtu``
    with offload packets, then with frames."""
    large = probe_schedule(1, PROBE_BYTES)
    extra = extra_frames(large.send_lengths(), mtu)
    with private_loopback():
        shape_loopback(mtu, OFFLOAD_PACKET_BYTES, shaped=True)
        offload = _median_cpu(large, timeout_s)
        shape_loopback(mtu, mtu, shaped=False)
        frames = _median_cpu(large, timeout_s)
    return max(0.0, frames - offload) / max(1, extra)


def machine_cost(
    log: Callable[[str], None] | None = None, refresh: bool = False, frames_mtu: int | None = None
) -> MachineCost:
    """The cached `MachineCost` of this machine and workers' version, probed first if there is
    none (``refresh``: probe again); with ``frames_mtu``, its frames' cost at that MTU too
    (`probe_frames`, added to the cache when missing)."""
    key, path = machine_key(), cache_path()
    cost = None
    if not refresh:
        try:
            cached = MachineCost.from_dict(json.loads(path.read_text()))
            if cached.key == key:
                cost = cached
        except (OSError, ValueError, KeyError, TypeError):
            pass
    if cost is not None and (frames_mtu is None or cost.frame_cpu_s(frames_mtu) is not None):
        return cost
    if cost is None:
        if log:
            log(f"      probing the workers' CPU cost on this machine (once per machine and workers' version; {path})")
        cost = probe()
    if frames_mtu is not None and cost.frame_cpu_s(frames_mtu) is None:
        if log:
            log(f"      probing the cost of frames of {frames_mtu} bytes on this machine (once per MTU)")
        t0 = time.monotonic()
        per_packet = probe_frames(frames_mtu)
        cost = replace(
            cost,
            packet_cpu_s={**cost.packet_cpu_s, str(frames_mtu): per_packet},
            probe_s=cost.probe_s + time.monotonic() - t0,
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cost.to_dict(), indent=1) + "\n")
        tmp.replace(path)
    except OSError as err:
        if log:
            log(f"      (not cached: {err})")
    return cost
