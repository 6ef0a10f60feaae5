"""One training job of `topolab train`: COMMAND started once per server inside its emulated
host, watched until every rank has exited, ended as a whole when one fails.

Each rank gets the caller's environment, what torchrun gives (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK`` = 0, ``LOCAL_WORLD_SIZE`` = 1, ``MASTER_ADDR`` = server 0's address,
``MASTER_PORT``), ``OMP_NUM_THREADS=1`` and ``PYTHONUNBUFFERED=1`` unless the caller set
them, and topolab's own variables (`topolab_torch.protocol`); its PYTHONPATH starts with
topolab_torch's autoload folder (which registers the ``topolab`` backend once the script
imports torch) and the repository. It runs in the caller's working directory, with the
host's name as hostname (`named_host`); its stdout
and stderr go to ``rank-<r>.stdout`` / ``.stderr`` in the job's folder, and rank 0's are
also streamed to ours.

Faults, each one line (`contract.errors.RunError`, exit 1) after every other rank is ended
(SIGTERM to its process group, SIGKILL after `END_GRACE_S`):

- a rank exits with a non-zero code: it is named, with the last lines of its stderr; when
  those blame a peer (the topolab backend's ``peer rank N``, or N's address in Gloo's) that
  exits non-zero within `CULPRIT_GRACE_S`, that peer is named instead: the rank that failed
  first, not the ones that lost it;
- a rank has not called ``init_process_group`` `init_timeout_s` after the start (the
  autoload writes ``rank-<r>.init`` when it does), or exits without calling it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from contract.errors import RunError
from contract.files import open_for_append, write_file
from topolab_torch import protocol

from ..common.options import make_output_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
AUTOLOAD_DIR = REPO_ROOT / "topolab_torch" / "autoload"
MASTER_PORT = 29500  # torchrun's default; each host has its own network namespace
POLL_S = 0.05  # how often the ranks are looked at: bounds how late a crash is noticed
END_GRACE_S = 2.0  # between SIGTERM and SIGKILL of the ranks still running after a failure
TAIL_LINES = 3  # lines of a failed rank's stderr quoted in the one-line error


class RankFailure(RunError):
    """A rank failed (``rank``); ``detected_at``: when the driver saw it (CLOCK_MONOTONIC)."""

    def __init__(self, message: str, rank: int) -> None:
        super().__init__(message)
        self.rank = rank
        self.detected_at = time.monotonic()


@dataclass
class JobOptions:
    backend: str
    command: Sequence[str]
    folder: Path
    init_timeout_s: float
    timeout_s: float  # the data plane's silence limit (TOPOLAB_TIMEOUT_S)
    chunk_bytes: int = 1 << 20
    stream: TextIO | None = None  # where rank 0's output is streamed (None: not streamed)


@dataclass
class JobRun:
    """What a finished job leaves: its wall time and each rank's exit code."""

    wall_s: float
    codes: list[int] = field(default_factory=list)


def rank_environment(
    base: dict[str, str], rank: int, world: int, master: str, backend: str, folder: Path, control: str, address: str
) -> dict[str, str]:
    """The environment of ``rank`` (module docstring)."""
    env = dict(base)
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK="0",
        LOCAL_WORLD_SIZE="1",
        MASTER_ADDR=master,
        MASTER_PORT=str(MASTER_PORT),
    )
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env[protocol.ENV_BACKEND] = backend
    env[protocol.ENV_DIR] = str(folder.resolve())
    env[protocol.ENV_CONTROL] = control
    env[protocol.ENV_ADDRESS] = address
    path = [str(AUTOLOAD_DIR), str(REPO_ROOT)] + [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env


NAMED_HOST = 'mount --bind "$1" /etc/hosts && echo "$2" > /proc/sys/kernel/hostname && shift 2 && exec "$@"'


def named_host(net: Any, n: int, rank: int, private: Path, command: list[str]) -> list[str]:
    """``command`` run with the host's name (``h<rank>``) as hostname, and an /etc/hosts of its
    own that names every server's address, in mount and UTS namespaces of its own (gone with
    the process): PyTorch's Gloo binds the address the hostname resolves to, which is then
    the emulated host's, not the machine's loopback."""
    names = [f"{net.host_address(i)} h{i}" for i in range(n)]
    hosts = private / f"hosts-{rank}"
    write_file(hosts, "127.0.0.1 localhost\n" + "\n".join(names) + "\n", exclusive=True)  # a private folder: new
    return ["unshare", "--mount", "--uts", "--propagation", "private", "--", "/bin/sh", "-c", NAMED_HOST,
            "topolab-rank", str(hosts), f"h{rank}", *command]  # fmt: skip


def stderr_tail(folder: Path, rank: int, lines: int = TAIL_LINES) -> str:
    try:
        text = Path(protocol.rank_file(str(folder), rank, "stderr")).read_text(errors="replace")
    except OSError:
        return ""
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:])


class _Tail(threading.Thread):
    """Copies what rank 0 writes to its files onto our stdout / stderr as it comes."""

    def __init__(self, pairs: list[tuple[Path, TextIO]]) -> None:
        super().__init__(name="topolab-train-tail", daemon=True)
        self.pairs = pairs
        self.done = threading.Event()

    def run(self) -> None:
        handles = [(open(path, errors="replace"), out) for path, out in self.pairs]
        try:
            while True:
                finished = self.done.is_set()
                for f, out in handles:
                    text = f.read()
                    if text:
                        out.write(text)
                        out.flush()
                if finished:
                    return
                time.sleep(POLL_S)
        finally:
            for f, _ in handles:
                f.close()


def run_job(net: Any, n: int, opts: JobOptions, control: str, log: Callable[[str], None]) -> JobRun:
    """Start the command on every server of ``net``, wait for all, fail fast (module docstring)."""
    folder = opts.folder
    make_output_dir(folder)
    for old in folder.glob("rank-*.*"):  # an earlier job's files (--force): records are appended
        old.unlink()
    master = net.host_address(0)
    procs: dict[int, subprocess.Popen] = {}
    files: list[TextIO] = []
    tail: _Tail | None = None
    t0 = time.monotonic()
    try:
        for rank in range(n):
            env = rank_environment(
                dict(os.environ), rank, n, master, opts.backend, folder, control, net.host_address(rank)
            )
            env[protocol.ENV_TIMEOUT] = f"{opts.timeout_s:g}"
            env[protocol.ENV_CHUNK] = str(opts.chunk_bytes)
            out = os.fdopen(open_for_append(protocol.rank_file(str(folder), rank, "stdout")), "w")
            err = os.fdopen(open_for_append(protocol.rank_file(str(folder), rank, "stderr")), "w")
            files += [out, err]
            argv = named_host(net, n, rank, Path(control.removeprefix("ipc://")).parent, list(opts.command))
            procs[rank] = net.popen(rank, argv, env=env, cwd=os.getcwd(), stdout=out, stderr=err)
        log(f"  started {n} ranks ({opts.backend}): {' '.join(opts.command)}")
        if opts.stream is not None:
            tail = _Tail(
                [
                    (Path(protocol.rank_file(str(folder), 0, "stdout")), opts.stream),
                    (Path(protocol.rank_file(str(folder), 0, "stderr")), sys.stderr),
                ]
            )
            tail.start()
        codes = _watch(procs, folder, opts.init_timeout_s, t0, [net.host_address(r) for r in range(n)])
        return JobRun(time.monotonic() - t0, codes)
    finally:
        _end(procs)
        if tail is not None:
            tail.done.set()
            tail.join(2.0)
        for f in files:
            f.close()


def _initialized(folder: Path, rank: int) -> bool:
    return os.path.exists(protocol.rank_file(str(folder), rank, "init"))


PEER_RE = re.compile(r"peer rank (\d+)")
CULPRIT_GRACE_S = 5.0
"""How long a rank named by the first failure (``peer rank N`` in the topolab backend's line,
or its address in Gloo's) may take to exit: a rank that raised runs its exit handlers and
tears torch down while its peers, which lost it, have already ended."""


def named_peer(tail: str, addresses: list[str], rank: int) -> int | None:
    """The other rank a failed rank's last lines blame, if any."""
    match = PEER_RE.search(tail)
    if match and int(match.group(1)) != rank:
        return int(match.group(1))
    for peer, address in enumerate(addresses):
        if peer != rank and re.search(rf"{re.escape(address)}(?!\d)", tail):
            return peer
    return None


def _failure(procs: dict[int, subprocess.Popen], folder: Path, rank: int, addresses: list[str], t0: float) -> None:
    """Raise the one-line failure of ``rank``, or of the peer it names, once that one exited."""
    tail = stderr_tail(folder, rank)
    seen = {rank}
    deadline = time.monotonic() + CULPRIT_GRACE_S
    while (culprit := named_peer(tail, addresses, rank)) is not None and culprit not in seen:  # follow the blame
        seen.add(culprit)
        while procs[culprit].poll() is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if procs[culprit].poll() is None:
            raise RankFailure(
                f"rank {culprit} failed (still running {CULPRIT_GRACE_S:g} s later): rank {rank}: {tail}", culprit
            )
        if procs[culprit].poll() == 0:
            break
        rank, tail = culprit, stderr_tail(folder, culprit)
    code = procs[rank].poll()
    raise RankFailure(
        f"rank {rank} exited with code {code} after {time.monotonic() - t0:.1f} s"
        + (f": {tail}" if tail else " (nothing on its stderr)"),
        rank,
    )


def _watch(
    procs: dict[int, subprocess.Popen], folder: Path, init_timeout_s: float, t0: float, addresses: list[str]
) -> list[int]:
    """Until every rank exited 0; raises RunError at the first fault."""
    codes: dict[int, int] = {}
    while len(codes) < len(procs):
        for rank, proc in procs.items():
            code = proc.poll()
            if code is None or rank in codes:
                continue
            codes[rank] = code
            if code != 0:
                _failure(procs, folder, rank, addresses, t0)
            if not _initialized(folder, rank):
                raise RankFailure(f"rank {rank} exited without calling torch.distributed.init_process_group", rank)
        if time.monotonic() - t0 > init_timeout_s:
            missing = [r for r in procs if r not in codes and not _initialized(folder, r)]
            if missing:
                others = f" (nor did ranks {missing[1:]})" if len(missing) > 1 else ""
                raise RankFailure(
                    f"rank {missing[0]} did not call torch.distributed.init_process_group within "
                    f"{init_timeout_s:g} s (--init-timeout){others}",
                    missing[0],
                )
        time.sleep(POLL_S)
    return [codes[r] for r in sorted(codes)]


def _end(procs: dict[int, subprocess.Popen]) -> None:
    """End every rank still running: SIGTERM to its process group, SIGKILL after the grace."""
    running = [p for p in procs.values() if p.poll() is None]
    for proc in running:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + END_GRACE_S
    for proc in running:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
    for proc in running:
        try:
            proc.wait(END_GRACE_S)
        except subprocess.TimeoutExpired:
            pass


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """The rank's own session (net.popen starts each in a new one): the script and its children."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass


def control_endpoint() -> tuple[str, str]:
    """A private folder and the ipc:// endpoint of the control channel in it (short path)."""
    folder = tempfile.mkdtemp(prefix="tltrain-")
    return folder, f"ipc://{folder}/control.ipc"
