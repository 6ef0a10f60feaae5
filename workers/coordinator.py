"""The coordinator: starts the workers of one schedule, drives iterations, collects results.

Used by `topolab collective` and the end-to-end run. It needs only the schedule as a dict
(``Schedule.to_dict()``), one host address per rank and a ``spawn(rank, argv) -> Popen``
callable: the default runs the worker as a plain subprocess (loopback tests); the emulator
supplies one that runs it inside the emulated host's namespace. The control plane is a
ROUTER socket on an ipc:// endpoint in a private directory (the filesystem is shared by
every namespace on this machine), ``$TMPDIR/topolab-coll-<pid>-<start time>-*``
(`contract.processes.process_temp_dir`): removed when the coordinator closes, and by
`clean_dead_workdirs` (``topolab clean``) if its process was killed; it refuses a frame longer than the longest ``result`` a
rank's spec allows (`workers.protocol`, "Sizes").

Workers on other machines (a multi-machine emulation) share neither that directory nor any
other file: ``control_relay(rank, path)`` names, on rank's machine, a socket that leads to the
control socket at ``path`` (the emulator forwards it over its ssh connection to that machine),
and such a worker gets that endpoint in its spec, its spec on standard input
(``python -m workers.worker -``; ``spawn`` must give the process a stdin pipe) and no log file:
what it writes to stderr comes back through ``spawn``'s pipe and is quoted when it fails.

Iterations are barriers: ``start`` goes to every worker, the next one starts after every
worker reported. An iteration's time is max(t_end) - min(t_start) over the ranks, on the
system-wide CLOCK_MONOTONIC. ``run_iteration(i, timestamps)`` asks some ranks for more
detail in that one iteration (``{rank: "ops"}``: every op's start and end), the others
report as their spec says. `Coordinator.clock_offsets` measures each rank's clock against
this process's, between iterations (`ClockReading`).

Faults: a worker that cannot be spawned, exits, reports an error, sends no ``ready`` /
``connected`` within ``start_timeout_s`` (default `start_timeout_for(n)`), or stays silent (no
message for ``timeout_s`` + `ITERATION_GRACE_S` while an iteration runs) fails the run; the
coordinator then sends ``abort`` naming the culprit to everyone else, collects their errors
for at most `ABORT_COLLECT_S`, and raises `WorkerFailure` with one line naming the rank, its
host and the cause. Every process it started is ended by PID on exit, on exception, and on
SIGTERM/SIGHUP (the context manager's ``__exit__``), never by name: a worker that ever
talked gets ``stop`` and `STOP_GRACE_S` to exit, then SIGKILL; one that never did, SIGKILL.

(Over 300 lines: one class whose methods (start, gather, blame, abort, stop) all share the
run's state, i.e. the processes, who talked and when; split up, that state would be passed
around instead.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq

from contract.errors import RunError
from contract.limits import limit_s
from contract.processes import dead_process_dirs, process_temp_dir

from .protocol import (
    CONTROL_MESSAGE_BYTES,
    CONTROL_POLL_MS,
    ITERATION_GRACE_S,
    REPORT_PER_SPEC_BYTE,
    SILENCE_S,
    decode,
    encode,
    identity,
    limit_frames,
    now,
)
from .spec import DEFAULT_CHUNK, DEFAULT_TIMEOUT_S, WorkerSpec, specs_for_schedule

Spawn = Callable[[int, list[str]], subprocess.Popen]
ControlRelay = Callable[[int, str], "str | None"]
"""``relay(rank, path)``: for a rank on another machine, the path there of a socket that leads
to our control socket at ``path``; None for a rank on this machine."""
REPO_ROOT = Path(__file__).resolve().parent.parent
WORKDIR_PREFIX = "topolab-coll-"  # the control socket's folder: topolab-coll-<pid>-<start time>-<random>

START_TIMEOUT_S = limit_s(7.0)
"""Bound on each start phase (``ready``, then ``connected``). A worker's start is Python plus
numpy and pyzmq imports, ~0.3 s of CPU: twelve on two busy cores take ~2-3 s, so 7 s is a
>2x margin that still names a worker that never connects, and ends every process, within
10 s (the abort and stop that follow take well under a second)."""
WORKER_START_CPU_S = limit_s(0.3)  # one worker's start: Python, numpy and pyzmq imports
FILL_CPU_S_PER_BYTE = limit_s(2.5e-9)
"""CPU a worker spends per byte of its buffers before it says ``connected``: the first fill
touches every page (2.25 ns/B measured filling a fresh 1 GiB float32 buffer with
`workers.patterns.fill_input`, page faults included; 0.03 ns/B once the pages exist)."""
START_MARGIN = 2.5  # how much slower than the CPU alone a start may be (a loaded machine)


def start_timeout_for(workers: int, buffer_bytes: int = 0) -> float:
    """Bound on each start phase for ``workers`` workers holding ``buffer_bytes`` of buffers
    together: at least `START_TIMEOUT_S`, more when their imports and first fills need longer
    on this machine's cores (64 workers on 2 cores: about 10 s of CPU for the imports, so 24 s;
    12 BERT-large workers filling 15.5 GiB: about 42 s of CPU, so 52 s)."""
    cores = os.cpu_count() or 1
    work_s = WORKER_START_CPU_S * workers + FILL_CPU_S_PER_BYTE * buffer_bytes
    return max(START_TIMEOUT_S, START_MARGIN * work_s / cores)


ABORT_COLLECT_S = 2.0
"""After an abort, how long the other workers' errors are collected (they answer at once)."""
STOP_GRACE_S = 3.0  # a worker told ``stop`` exits within this (it flushes its sends), else SIGKILL
REAP_S = 5.0  # bound on waiting for a SIGKILLed process to be reaped
IDLE_TIMEOUTS = 4
IDLE_MIN_S = 120.0
"""A worker exits on its own once the coordinator is silent for max(IDLE_MIN_S, IDLE_TIMEOUTS
x timeout_s) between iterations (the coordinator was killed so hard that PR_SET_PDEATHSIG did
not reach the worker, e.g. a worker in a namespace started by a helper process)."""


CLOCK_ROUNDS = 5
"""Round trips per rank when `Coordinator.clock_offsets` measures the clocks: the shortest
one is kept (a round trip the machine's scheduler delayed says least about the offset)."""


@dataclass
class ClockReading:
    """One rank's clock against the coordinator's: ``offset_s`` = the rank's clock minus the
    coordinator's, measured as the rank's reading minus the middle of the shortest round trip
    (``rtt_s``), so known to +- rtt_s / 2. ``same_clock``: the rank runs on this machine, whose
    CLOCK_MONOTONIC every process and namespace shares, so its true offset is 0 (and what was
    measured is that round trip's asymmetry); `applied_s` is what its times are corrected by."""

    rank: int
    offset_s: float
    rtt_s: float
    same_clock: bool

    @property
    def applied_s(self) -> float:
        return 0.0 if self.same_clock else self.offset_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "offset_s": self.offset_s,
            "rtt_s": self.rtt_s,
            "same_clock": self.same_clock,
            "applied_s": self.applied_s,
        }


class WorkerFailure(RunError):
    """A worker died, failed or went silent; ``rank`` names the culprit when known."""

    def __init__(self, message: str, rank: int | None = None, errors: dict[int, str] | None = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.errors = errors or {}


@dataclass
class IterationResult:
    iteration: int
    ok: bool  # every rank verified its buffers
    time_s: float  # max(t_end) - min(t_start) over ranks
    ranks: list[dict[str, Any]] = field(default_factory=list)  # each worker's report
    mismatches: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "ok": self.ok,
            "time_s": self.time_s,
            "mismatches": self.mismatches,
            "ranks": self.ranks,
        }


def clean_dead_workdirs(log: Callable[[str], Any] = print) -> list[str]:
    """Remove the coordinator folders (`WORKDIR_PREFIX`, in this process's temporary
    directory) of coordinators whose process is gone (killed before it closed); only
    folders that could be ours (`contract.processes.dead_process_dirs`). Returns them."""
    removed = []
    for path, owner in dead_process_dirs(WORKDIR_PREFIX):
        shutil.rmtree(path, ignore_errors=True)
        removed.append(str(path))
        log(f"clean: removed the workers' control folder {path} of run {owner}")
    return removed


def loopback_spawn(log_dir: str | None = None) -> Spawn:
    """Spawn workers as plain subprocesses of this Python (no namespaces, no root)."""

    def spawn(rank: int, argv: list[str]) -> subprocess.Popen:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        return subprocess.Popen(
            argv,
            cwd=str(REPO_ROOT),
            env=env,
            stdin=subprocess.PIPE,  # a relayed worker's spec (Coordinator); closed for the others
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )

    return spawn


class Coordinator:
    """Run one schedule on one worker per rank. Use as a context manager."""

    def __init__(
        self,
        schedule: dict[str, Any],
        hosts: Sequence[str],
        *,
        spawn: Spawn | None = None,
        chunk_bytes: int = DEFAULT_CHUNK,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        timestamps: str = "streams",
        start_timeout_s: float | None = None,
        python: str = sys.executable,
        workdir: str | None = None,
        keep_workdir: bool = False,
        relay_failures: bool = True,
        progress: Callable[[str], None] | None = None,
        plane_sources: Sequence[dict[int, str]] | None = None,
        control_relay: ControlRelay | None = None,
    ) -> None:
        """``plane_sources[rank]``: rank's {plane: source IP} for sends with a plane >= 1;
        ``control_relay``: how ranks on other machines reach the control socket (module
        docstring)."""
        self.schedule = schedule
        self.n = int(schedule["ranks"])
        self.hosts = list(hosts)
        self.spawn = spawn or loopback_spawn()
        self.timeout_s = timeout_s
        buffer_bytes = self.n * sum(int(b["bytes"]) for b in schedule["buffers"])  # every rank holds them all
        self.start_timeout_s = start_timeout_for(self.n, buffer_bytes) if start_timeout_s is None else start_timeout_s
        self.python = python
        self.keep_workdir = keep_workdir
        self.relay_failures = relay_failures
        self.progress = progress or (lambda msg: None)
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else process_temp_dir(WORKDIR_PREFIX)
        self.control_endpoint = f"ipc://{self.workdir}/control.ipc"
        self.specs: list[WorkerSpec] = specs_for_schedule(
            schedule,
            self.hosts,
            self.control_endpoint,
            chunk_bytes=chunk_bytes,
            timeout_s=timeout_s,
            timestamps=timestamps,
            log_dir=str(self.workdir),
            idle_timeout_s=max(IDLE_MIN_S, IDLE_TIMEOUTS * timeout_s),
            plane_sources=plane_sources,
        )
        self.control_relay = control_relay
        self.remote: set[int] = set()  # ranks on another machine (spec on stdin, no log file)
        self.procs: dict[int, subprocess.Popen] = {}
        self.addresses: dict[int, str] = {}
        self.ctx: zmq.Context | None = None
        self.sock: zmq.Socket | None = None
        self.last_heard: dict[int, float] = {}
        self.talked: set[int] = set()  # ranks that ever sent a control message
        self.exited: dict[int, int] = {}
        self._old_handlers: dict[int, Any] = {}

    # ---- life cycle ------------------------------------------------------------------
    def __enter__(self) -> Coordinator:
        self._install_signal_handlers()
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def on_term(signum, frame):
            raise SystemExit(128 + signum)

        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                self._old_handlers[sig] = signal.signal(sig, on_term)

    def start(self) -> None:
        """Spawn every worker, wait until all are bound, connected and ready."""
        longest = 0
        for spec in self.specs:  # a rank's text at a time: all at once held 99 bytes an op more
            text = json.dumps(spec.to_dict())
            longest = max(longest, len(text))
            self._spec_path(spec.rank).write_text(text)
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        limit_frames(self.sock, CONTROL_MESSAGE_BYTES + REPORT_PER_SPEC_BYTE * longest)
        socket_path = os.fsencode(self.workdir / "control.ipc")
        if len(socket_path) > zmq.IPC_PATH_MAX_LEN:
            raise WorkerFailure(
                f"cannot open the control endpoint {self.control_endpoint}: its path is {len(socket_path)} bytes, "
                f"over the {zmq.IPC_PATH_MAX_LEN} a Unix socket allows: set TMPDIR to a shorter folder"
            )
        try:
            self.sock.bind(self.control_endpoint)
        except zmq.ZMQError as exc:
            raise WorkerFailure(f"cannot open the control endpoint {self.control_endpoint}: {exc}") from None
        for spec in self.specs:
            relayed = self._relay(spec.rank)
            if relayed is not None:  # on another machine: its spec (as it reaches us) on stdin
                self.remote.add(spec.rank)
                spec.control, spec.log = f"ipc://{relayed}", ""
                self._spec_path(spec.rank).unlink()
                argv = [self.python, "-m", "workers.worker", "-"]
            else:
                argv = [self.python, "-m", "workers.worker", str(self._spec_path(spec.rank))]
            try:
                proc = self.procs[spec.rank] = self.spawn(spec.rank, argv)
            except (OSError, subprocess.SubprocessError, ValueError) as exc:
                raise WorkerFailure(
                    f"worker rank {spec.rank} (host {self.hosts[spec.rank]}) could not be started: "
                    f"{getattr(exc, 'filename', None) or argv[0]}: {getattr(exc, 'strerror', None) or exc}",
                    spec.rank,
                ) from None
            if relayed is not None:
                self._feed(spec.rank, proc, json.dumps(spec.to_dict()).encode())
            elif proc.stdin is not None:
                proc.stdin.close()
        self.progress(f"started {self.n} workers")
        ready = self._gather("ready", self.start_timeout_s)
        self.addresses = {r: m["address"] for r, m in ready.items()}
        for rank in range(self.n):
            peers = {str(p): self.addresses[p] for p in self.specs[rank].peers}
            self._send(rank, "connect", peers=peers)
        self._gather("connected", self.start_timeout_s)

    def _spec_path(self, rank: int) -> Path:
        return self.workdir / f"rank-{rank}.json"

    def _relay(self, rank: int) -> str | None:
        if self.control_relay is None:
            return None
        try:
            return self.control_relay(rank, self.control_endpoint.removeprefix("ipc://"))
        except RunError as exc:
            raise WorkerFailure(f"{self._who(rank)}: no control channel: {exc}", rank) from None

    def _feed(self, rank: int, proc: subprocess.Popen, spec: bytes) -> None:
        """Write ``spec`` to the worker's stdin and close it, within ``start_timeout_s``."""
        pipe = proc.stdin
        if pipe is None:
            raise WorkerFailure(f"{self._who(rank)}: spawn gave it no stdin pipe for its spec", rank)

        def write() -> None:
            try:
                pipe.write(spec)
                pipe.close()
            except OSError:  # it exited already: its exit code and stderr tell why
                pass

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        writer.join(self.start_timeout_s)
        if writer.is_alive():
            raise WorkerFailure(f"{self._who(rank)} did not read its spec within {self.start_timeout_s:g} s", rank)

    def close(self) -> None:
        """Stop the workers (politely, then by SIGKILL to their PIDs) and clean up."""
        told = []
        if self.sock is not None:
            for rank in self.talked:
                if self.procs[rank].poll() is None:
                    self._send(rank, "stop", quiet=True)
                    told.append(self.procs[rank])
        deadline = now() + STOP_GRACE_S
        for proc in told:
            try:
                proc.wait(max(0.0, deadline - now()))
            except subprocess.TimeoutExpired:
                pass
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            try:
                proc.wait(REAP_S)
            except subprocess.TimeoutExpired:
                pass
        if self.sock is not None:
            self.sock.close(linger=0)
            self.sock = None
        if self.ctx is not None:
            self.ctx.term()
            self.ctx = None
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers.clear()
        if self._own_workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]

    # ---- messaging -------------------------------------------------------------------
    def _send(self, rank: int, kind: str, quiet: bool = False, **fields: Any) -> None:
        try:
            self.sock.send_multipart([identity(rank), encode(kind, **fields)], zmq.NOBLOCK)
        except zmq.ZMQError:  # not connected (EHOSTUNREACH) or not reading (EAGAIN)
            if not quiet:
                raise WorkerFailure(f"{self._who(rank)} is not connected to the control plane", rank) from None

    def _recv(self) -> dict[str, Any]:
        _ident, payload = self.sock.recv_multipart()
        msg = decode(payload)
        rank = int(msg["rank"])
        self.last_heard[rank] = now()
        self.talked.add(rank)
        return msg

    def _who(self, rank: int) -> str:
        """``worker rank R (host H, pid P)``: how every failure names a worker."""
        proc = self.procs.get(rank)
        pid = f", pid {proc.pid}" if proc is not None else ""
        return f"worker rank {rank} (host {self.hosts[rank]}{pid})"

    def _log_tail(self, rank: int, lines: int = 5) -> str:
        """The last lines a failed worker wrote: its log file, or (on another machine) its
        stderr pipe, read once it has exited."""
        proc = self.procs.get(rank)
        try:
            if rank not in self.remote:
                text = (self.workdir / f"rank-{rank}.log").read_text()
            elif proc is not None and proc.stderr is not None and proc.poll() is not None:
                raw = proc.stderr.read()
                text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
            else:
                return ""
        except (OSError, ValueError):
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def _dead(self) -> dict[int, int]:
        for rank, proc in self.procs.items():
            code = proc.poll()
            if code is not None and rank not in self.exited:
                self.exited[rank] = code
        return self.exited

    def _fail(self, culprit: int | None, reason: str, errors: dict[int, str]) -> None:
        """Abort every other worker, wait briefly for their errors, raise WorkerFailure."""
        if self.relay_failures:
            for rank, proc in self.procs.items():
                if proc.poll() is None and rank != culprit:
                    self._send(rank, "abort", quiet=True, reason=reason)
        # without relaying (tests of the workers' own detection) give them their timeout
        deadline = now() + ABORT_COLLECT_S + (0.0 if self.relay_failures else self.timeout_s)
        expected = set(self.talked) - {culprit}  # a rank that never talked will not answer
        while now() < deadline and not expected <= set(errors) | set(self._dead()):
            if self.sock.poll(CONTROL_POLL_MS):
                msg = self._recv()
                if msg.get("type") == "error":
                    errors.setdefault(int(msg["rank"]), msg["message"])
        raise WorkerFailure(reason, culprit, errors)

    def _culprit(self, reporter: int, msg: dict[str, Any], got: dict, errors: dict) -> tuple[int, str]:
        """Who to blame for ``reporter``'s error. A rank that times out names the peer it
        waits for, but that peer may itself be blocked behind the real culprit; workers
        send a heartbeat every HEARTBEAT_S during iterations, so a rank not heard from for
        SILENCE_S while the named peer is alive is the one that hangs."""
        named = msg.get("peer")
        named = reporter if named is None else int(named)
        dead = self._dead()
        if dead:
            rank = min(dead)
            return rank, f"{self._who(rank)} exited with code {dead[rank]}; rank {reporter} reported: {msg['message']}"
        t = now()
        if t - self.last_heard.get(named, 0.0) < SILENCE_S:
            silent = sorted(
                (
                    r
                    for r in range(self.n)
                    if r not in got and r not in errors and t - self.last_heard.get(r, 0.0) > SILENCE_S
                ),
                key=lambda r: self.last_heard.get(r, 0.0),
            )
            if silent:
                r = silent[0]
                return r, (
                    f"{self._who(r)} went silent (no message for "
                    f"{t - self.last_heard[r]:.1f} s: hung or stopped?); rank "
                    f"{reporter} reported: {msg['message']}"
                )
        told = "" if named == reporter else f"rank {reporter} reported: "
        return named, f"{self._who(named)}: {told}{msg['message']}"

    def _gather(
        self, kind: str, timeout: float, iteration: int | None = None, ranks: Sequence[int] | None = None
    ) -> dict[int, dict[str, Any]]:
        """Wait for message ``kind`` from every rank (of ``ranks``, default all); fail fast on
        deaths, errors, silence."""
        got: dict[int, dict[str, Any]] = {}
        errors: dict[int, str] = {}
        wanted = set(range(self.n) if ranks is None else ranks)
        start = now()
        for r in range(self.n):
            self.last_heard[r] = start
        while len(got) < len(wanted):
            if self.sock.poll(CONTROL_POLL_MS):
                msg = self._recv()
                rank = int(msg["rank"])
                if msg["type"] == kind and rank in wanted and (iteration is None or msg.get("iteration") == iteration):
                    got[rank] = msg
                elif msg["type"] == "error":
                    errors[rank] = msg["message"]
                    culprit, reason = self._culprit(rank, msg, got, errors)
                    self._fail(culprit, reason, errors)
                continue
            dead = self._dead()
            if dead:
                rank, code = next(iter(dead.items()))
                tail = self._log_tail(rank)
                self._fail(
                    rank,
                    f"{self._who(rank)} exited with code {code} during "
                    f"{f'start (before {kind!r})' if iteration is None else f'iteration {iteration}'}"
                    + (f": {tail}" if tail else ""),
                    errors,
                )
            t = now()
            if iteration is None and t - start > timeout:
                missing = sorted(wanted - set(got))
                others = f" (nor did ranks {missing[1:]})" if len(missing) > 1 else ""
                self._fail(
                    missing[0],
                    f"{self._who(missing[0])} sent no {kind!r} within {timeout:g} s: "
                    f"{'never connected to the coordinator' if missing[0] not in self.talked else 'stuck starting'}"
                    f"{others}",
                    errors,
                )
            if iteration is not None:
                silent = sorted(
                    r for r in wanted if r not in got and t - self.last_heard[r] > self.timeout_s + ITERATION_GRACE_S
                )
                if silent:
                    self._fail(
                        silent[0],
                        f"{self._who(silent[0])} silent for "
                        f"{t - self.last_heard[silent[0]]:.1f} s during "
                        f"iteration {iteration} (hung or stopped?)",
                        errors,
                    )
        return got

    # ---- iterations --------------------------------------------------------------------
    def run_iteration(self, iteration: int, timestamps: Mapping[int, str] | None = None) -> IterationResult:
        """Run iteration ``iteration`` on every rank; ``timestamps``: {rank: detail} for the
        ranks that report another detail than their spec's in this iteration alone
        (`workers.spec.TIMESTAMPS`, e.g. "ops" for a timeline of it)."""
        for rank in range(self.n):
            detail = timestamps.get(rank) if timestamps else None
            self._send(rank, "start", iteration=iteration, **({"timestamps": detail} if detail else {}))
        reports = self._gather("result", self.timeout_s, iteration)
        ranks = [reports[r] for r in range(self.n)]
        t0 = min(r["t_start"] for r in ranks)
        t1 = max(r["t_end"] for r in ranks)
        mismatches = [m for r in ranks for m in r["mismatches"]]
        return IterationResult(iteration, all(r["ok"] for r in ranks), t1 - t0, ranks, mismatches)

    def clock_offsets(self, rounds: int = CLOCK_ROUNDS) -> dict[int, ClockReading]:
        """Each rank's clock against this process's (`ClockReading`), between iterations: per
        rank ``rounds`` round trips of ``clock``, one at a time, the shortest kept. About a
        tenth of a millisecond per round trip over ipc://, so 128 ranks take well under a
        second."""
        readings: dict[int, ClockReading] = {}
        for rank in range(self.n):
            best: tuple[float, float] | None = None
            for _ in range(max(1, rounds)):
                sent = now()
                self._send(rank, "clock")
                reply = self._gather("clock", self.start_timeout_s, ranks=[rank])[rank]
                back = self.last_heard[rank]  # when `_recv` took the reply
                if best is None or back - sent < best[1]:
                    best = (float(reply["t"]) - (sent + back) / 2, back - sent)
            assert best is not None
            readings[rank] = ClockReading(rank, best[0], best[1], rank not in self.remote)
        return readings

    def run(self, iterations: int, warmup: int = 1) -> list[IterationResult]:
        """``warmup`` untimed iterations (connections, page faults), then ``iterations``."""
        for i in range(warmup):
            res = self.run_iteration(i)
            if not res.ok:
                return [res]
        return [self.run_iteration(warmup + i) for i in range(iterations)]


def run_schedule(
    schedule: dict[str, Any], iterations: int = 1, warmup: int = 1, hosts: Sequence[str] | None = None, **kwargs
) -> list[IterationResult]:
    """Convenience: run ``schedule`` on loopback workers and return the timed iterations."""
    hosts = list(hosts) if hosts is not None else ["127.0.0.1"] * int(schedule["ranks"])
    with Coordinator(schedule, hosts, **kwargs) as coord:
        return coord.run(iterations, warmup)
