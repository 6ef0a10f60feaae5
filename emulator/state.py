"""Marks a run leaves on the machine, so a killed run can be cleaned up (and only ours).

- ``<run_dir>/lock``: ``flock``-ed for the life of a network; it holds the owner's PID and
  command line for the "busy" message. The kernel drops a flock when its owner dies, so a
  killed run never blocks the next one.
- ``<run_dir>/run-<pid>.json``: the state of one run, rewritten (atomically) whenever it
  grows: owner PID and start time, the run id, every host shell and every process started in
  a host (PID and start time), and the network namespace inodes of the hosts.
- every process started in a host carries ``TOPOLAB_RUN=<run id>`` in its environment.

Namespaces are unnamed: each belongs to its host's shell and the kernel frees it, with its
veth cables, once no process lives in it. So cleaning up a killed run means ending the
processes that still live in its namespaces; `clean_dead_runs` does exactly that, for runs
whose owner is gone, matching PIDs by start time so a recycled PID is never touched.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field

from . import nsutil
from .errors import EmulationBusyError

ENV_MARK = "TOPOLAB_RUN"
KILL_WAIT_S = 3.0  # how long a SIGKILLed process may take to be gone on a loaded machine


def run_dir_path(configured: str) -> str:
    os.makedirs(configured, mode=0o755, exist_ok=True)
    return configured


class RunLock:
    """Exclusive lock on ``<run_dir>/lock`` (released by the kernel if we die)."""

    def __init__(self, run_dir: str):
        self.path = os.path.join(run_dir, "lock")
        self.fd: int | None = None

    def acquire(self, wait_s: float = 0.0) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown process"
                    os.close(fd)
                    raise EmulationBusyError(
                        f"another topolab network is up ({holder}); wait for it to finish (lock {self.path})"
                    ) from None
                time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}: {' '.join(sys.argv)[:200]}".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


@dataclass
class RunState:
    """What one run created; saved to ``path`` after every change."""

    path: str
    run_id: str
    owner_pid: int
    owner_start: int | None
    hosts: dict[str, dict] = field(default_factory=dict)  # name -> {pid, start, netns}
    procs: list[dict] = field(default_factory=list)  # {pid, start, argv0}

    @classmethod
    def new(cls, run_dir: str) -> RunState:
        pid = os.getpid()
        start = nsutil.start_time(pid)
        run_id = f"{pid}-{start}"
        return cls(os.path.join(run_dir, f"run-{pid}.json"), run_id, pid, start)

    def save(self) -> None:
        data = {
            "run_id": self.run_id,
            "owner_pid": self.owner_pid,
            "owner_start": self.owner_start,
            "argv": sys.argv[:8],
            "hosts": self.hosts,
            "procs": self.procs,
        }
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, self.path)

    def remove(self) -> None:
        for p in (self.path, self.path + ".tmp"):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


@dataclass
class CleanReport:
    runs_cleaned: list[str] = field(default_factory=list)
    runs_alive: list[str] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)


def _load(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def terminate_pids(pids: list[int], grace_s: float = 1.0) -> list[int]:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL; returns the PIDs that were signalled."""
    started = {pid: nsutil.start_time(pid) for pid in pids}
    hit = []
    for pid, st in started.items():
        if st is None:
            continue
        try:
            os.kill(pid, signal.SIGTERM)
            hit.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(nsutil.is_same_process(p, started[p]) for p in hit):
        time.sleep(0.02)
    killed = []
    for pid in hit:
        if nsutil.is_same_process(pid, started[pid]):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    # SIGKILL is delivered asynchronously: wait (bounded) until the processes are really gone,
    # so that when this returns their namespaces are free (a loaded machine may take a moment)
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline and any(_running(p, started[p]) for p in killed):
        time.sleep(0.02)
    return hit


def _running(pid: int, started: int | None) -> bool:
    """True while ``pid`` is the same process and not yet a zombie."""
    if not nsutil.is_same_process(pid, started):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rindex(b")") + 2 : data.rindex(b")") + 3] != b"Z"


def clean_dead_runs(run_dir: str, log=print) -> CleanReport:
    """End what runs whose owner is dead left behind, and forget those runs.

    Touches only: PIDs recorded in a dead run's state file (if their start time matches),
    processes marked with that run's id, and processes living in a network namespace that one
    of those recorded processes still holds (so the namespace is provably ours)."""
    report = CleanReport()
    if not os.path.isdir(run_dir):
        return report
    for entry in sorted(os.listdir(run_dir)):
        if not (entry.startswith("run-") and entry.endswith(".json")):
            continue
        path = os.path.join(run_dir, entry)
        state = _load(path)
        if state is None:
            continue
        owner, owner_start = int(state["owner_pid"]), state.get("owner_start")
        if nsutil.is_same_process(owner, owner_start):
            report.runs_alive.append(state["run_id"])
            continue
        recorded = [(int(h["pid"]), h.get("start")) for h in state.get("hosts", {}).values()]
        recorded += [(int(p["pid"]), p.get("start")) for p in state.get("procs", [])]
        alive = [pid for pid, st in recorded if nsutil.is_same_process(pid, st)]
        our_ns = {nsutil.netns_inode(pid) for pid in alive} - {None}
        # a namespace is ours only while a recorded process of ours still holds it, and never
        # the root namespace or our own, whatever the state file says
        our_ns &= {int(h["netns"]) for h in state.get("hosts", {}).values() if h.get("netns")}
        our_ns -= nsutil.protected_netns()
        victims = set(alive) | set(nsutil.pids_in_netns(our_ns)) | set(nsutil.pids_with_env(ENV_MARK, state["run_id"]))
        # only processes inside the run's own namespaces are ended (a recorded PID that now
        # lives elsewhere is not ours any more)
        victims = {pid for pid in victims if nsutil.netns_inode(pid) in our_ns}
        victims.discard(os.getpid())
        killed = terminate_pids(sorted(victims))
        for p in (path, path + ".tmp"):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        report.runs_cleaned.append(state["run_id"])
        report.killed.extend(killed)
        log(
            f"clean: run {state['run_id']} (pid {owner}, dead): ended {len(killed)} process(es)"
            f"{' ' + str(sorted(killed)) if killed else ''}; its namespaces and cables go with them"
        )
    return report
