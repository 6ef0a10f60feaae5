"""Marks a run leaves on the machine, so a killed run can be cleaned up (and only ours).

- ``<run_dir>/lock``: ``flock``-ed for the life of a network; it holds the owner's PID and
  command line for the "busy" message. The kernel drops a flock when its owner dies, so a
  killed run never blocks the next one.
- ``<run_dir>/run-<pid>.json``: the state of one run, rewritten (atomically) whenever it
  grows: owner PID and start time, the run id, every host shell and every process started in
  a host (PID and start time), and the network namespace inodes of the hosts.
- every process started in a host carries ``TOPOLAB_RUN=<run id>`` in its environment.

These files are root's, so the run folder is one root may write into
(`contract.files.folder_problem`: owned by root, the effective user or the user who ran
``sudo``, not writable by others unless sticky, not a symbolic link), refused in one line
naming ``--run-dir`` otherwise; the lock and the state files are opened with ``O_NOFOLLOW``
(a link planted at their name is refused, never followed), a state file is written to a new
``.tmp`` (``O_EXCL``) and renamed over the old one.

Namespaces are unnamed: each belongs to its host's shell and the kernel frees it, with its
veth cables, once no process lives in it. So cleaning up a killed run means ending the
processes that still live in its namespaces; `clean_dead_runs` does exactly that, for runs
whose owner is gone, matching PIDs by start time so a recycled PID is never touched.

A state file is evidence, not orders: `clean_dead_runs` reads only ``run-<digits>.json``
files that are regular files of root (or the effective user), of bounded size and of the
expected shape, and ends processes only inside a namespace that a recorded process still
holds *and* in which a process of root carries the run's mark: a forged file cannot point
clean at a container or a service's private network, nor at the root namespace or its own
(`nsutil.protected_netns`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import signal
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from contract.files import (
    FileInputError,
    folder_problem,
    make_owned_folder,
    nearest_existing,
    read_capped,
    write_file,
)

from . import nsutil
from .errors import EmulationBusyError, EmulationInputError

ENV_MARK = "TOPOLAB_RUN"
KILL_WAIT_S = 3.0  # how long a SIGKILLed process may take to be gone on a loaded machine
STATE_FILE = re.compile(r"run-(\d{1,10})\.json")  # run-<owner pid>.json, the only names clean reads
MAX_STATE_BYTES = 16 << 20  # a state file of 4096 hosts and several processes each is well under 1 MiB
PID_MAX = 1 << 22  # the kernel's largest PID (PID_MAX_LIMIT on 64-bit)


def _run_dir_error(path: str, problem: str, where: str = "") -> EmulationInputError:
    return EmulationInputError(f"--run-dir {path!r}: {where}{problem}")


def check_run_dir(path: str) -> None:
    """The run folder ``path`` (existing or to be made; if not, its nearest existing parent) is
    one root may write into (`contract.files.folder_problem`); one line naming ``--run-dir``
    (the flag that chooses it) otherwise."""
    existing = nearest_existing(path)
    problem = folder_problem(existing)
    if problem is not None:
        where = "" if os.fspath(existing) == os.fspath(path) else f"its folder {os.fspath(existing)!r} "
        raise _run_dir_error(path, problem, where)


def run_dir_path(configured: str) -> str:
    """The run folder ``configured``, made (mode 0755) if missing, after `check_run_dir`."""
    check_run_dir(configured)
    try:
        make_owned_folder(configured, mode=0o755)
    except FileInputError as err:
        raise _run_dir_error(configured, err.problem) from None
    except OSError as err:
        raise _run_dir_error(configured, f"cannot create the folder: {err.strerror}") from None
    return configured


class RunLock:
    """Exclusive lock on ``<run_dir>/lock`` (released by the kernel if we die)."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.path = os.path.join(run_dir, "lock")
        self.fd: int | None = None

    def _open(self) -> int:
        """The lock file, made if missing, never through a link planted at its name: a regular
        file of root (or of the effective user)."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as err:
            problem = "is a symbolic link; refusing to open it" if err.errno == errno.ELOOP else err.strerror
            raise _run_dir_error(self.run_dir, problem, f"its lock {self.path} ") from None
        st = os.fstat(fd)
        problem = None
        if not stat.S_ISREG(st.st_mode):
            problem = "is not a regular file"
        elif st.st_uid not in (0, os.geteuid()):
            problem = f"is owned by another user (uid {st.st_uid})"
        if problem is not None:
            os.close(fd)
            raise _run_dir_error(self.run_dir, problem, f"its lock {self.path} ")
        return fd

    def acquire(self, wait_s: float = 0.0) -> None:
        fd = self._open()
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
        try:  # a .tmp of ours left by a save cut short (or planted): a new one is made
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        write_file(tmp, json.dumps(data), exclusive=True)  # O_EXCL | O_NOFOLLOW
        os.replace(tmp, self.path)  # replaces the name: never writes through a link there

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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_pid(value: Any) -> bool:
    return _is_int(value) and 0 < value <= PID_MAX


def _is_start(value: Any) -> bool:
    """A start time as recorded: clock ticks since boot, or None (it could not be read)."""
    return value is None or (_is_int(value) and value >= 0)


def _is_process(entry: Any, netns: bool) -> bool:
    """``{pid, start}`` (and ``netns`` for a host shell, ``argv0`` for a process) as `RunState` writes them."""
    if not isinstance(entry, dict) or not _is_pid(entry.get("pid")) or not _is_start(entry.get("start")):
        return False
    if netns:
        return entry.get("netns") is None or (_is_int(entry["netns"]) and entry["netns"] > 0)
    return isinstance(entry.get("argv0", ""), str)


def state_shape_problem(state: Any, owner_pid: int) -> str | None:
    """Why ``state`` (a state file's JSON, named after ``owner_pid``) is not what `RunState.save`
    writes, or None: ints where ints are, the run id made of the owner's PID and start time."""
    if not isinstance(state, dict):
        return "not a JSON object"
    if state.get("owner_pid") != owner_pid or not _is_int(state.get("owner_pid")):
        return f"owner_pid is not {owner_pid}, the PID in its name"
    start = state.get("owner_start")
    if not _is_int(start) or start < 0:
        return "owner_start is not a start time"
    if state.get("run_id") != f"{owner_pid}-{start}":
        return "run_id is not the owner's PID and start time"
    hosts, procs = state.get("hosts", {}), state.get("procs", [])
    if not isinstance(hosts, dict) or not all(isinstance(k, str) and _is_process(h, True) for k, h in hosts.items()):
        return "hosts are not host names with a pid, start time and namespace each"
    if not isinstance(procs, list) or not all(_is_process(p, False) for p in procs):
        return "procs are not processes with a pid and start time each"
    argv = state.get("argv", [])
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return "argv is not a list of words"
    return None


def load_state(path: str, name: str) -> tuple[dict | None, str]:
    """The state file ``path`` (its name in the run folder: ``name``), or None and why it is
    not read: a name other than ``run-<digits>.json``, a symbolic link or anything but a
    regular file, a file of another user than root or the effective user, larger than
    `MAX_STATE_BYTES`, not JSON or not of `RunState`'s shape."""
    match = STATE_FILE.fullmatch(name)
    if match is None:
        return None, "not a state file name (run-<pid>.json)"
    try:
        before = os.lstat(path)
    except OSError as err:
        return None, f"cannot be read: {err.strerror}"
    if stat.S_ISLNK(before.st_mode):
        return None, "is a symbolic link"
    if not stat.S_ISREG(before.st_mode):
        return None, "is not a regular file"
    if before.st_uid not in (0, os.geteuid()):
        return None, f"is owned by another user (uid {before.st_uid})"
    try:
        raw = read_capped(path, MAX_STATE_BYTES, "run state file")
        after = os.lstat(path)
    except FileInputError as err:
        return None, err.problem
    except OSError as err:
        return None, f"cannot be read: {err.strerror}"
    if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
        return None, "was replaced while it was read"
    try:
        state = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, "is not JSON"
    problem = state_shape_problem(state, int(match.group(1)))
    if problem is not None:
        return None, problem
    return state, ""


def _runs_as_trusted_user(pid: int) -> bool:
    """Whether ``pid``'s real and effective user are root or ours (``/proc/PID/status``: the
    owner of ``/proc/PID`` is root for any process that made itself non-dumpable)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    for line in lines:
        if line.startswith(b"Uid:"):
            real, effective = (int(x) for x in line.split()[1:3])
            return {real, effective} <= {0, os.geteuid()}
    return False


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


def check_clean_dir(run_dir: str) -> bool:
    """Whether there is a run folder ``run_dir`` to clean: False if it does not exist; one line
    naming ``--run-dir`` if it is not one root may write into (`contract.files.folder_problem`),
    since its state files tell clean what to end."""
    if not os.path.lexists(run_dir):
        return False
    problem = folder_problem(run_dir)
    if problem is not None:
        raise _run_dir_error(run_dir, problem)
    return True


def clean_dead_runs(run_dir: str, log: Callable[[str], Any] = print) -> CleanReport:
    """End what runs whose owner is dead left behind, and forget those runs.

    Reads only state files `load_state` accepts (anything else in the folder that looks like
    one is skipped with one line of ``log``). Touches only: PIDs recorded in a dead run's state
    file (if their start time matches), processes marked with that run's id, and processes
    living in a network namespace that one of those recorded processes still holds, the state
    file names as one of its hosts', and in which a process of root carries the run's mark (so
    the namespace is provably ours: the mark is set only by `EmulatedNetwork.popen`, and a
    forged file cannot put a root process carrying it into another's namespace); never the
    namespace of PID 1 or our own."""
    report = CleanReport()
    if not check_clean_dir(run_dir):
        return report
    for entry in sorted(os.listdir(run_dir)):
        if not (entry.startswith("run-") and entry.endswith(".json")):
            continue  # the lock, a save's .tmp: not state files
        path = os.path.join(run_dir, entry)
        state, why = load_state(path, entry)
        if state is None:
            log(f"clean: {path}: skipped, not a run state file of topolab ({why})")
            continue
        run_id, owner, owner_start = state["run_id"], state["owner_pid"], state["owner_start"]
        if nsutil.is_same_process(owner, owner_start):
            report.runs_alive.append(run_id)
            continue
        hosts = list(state.get("hosts", {}).values())
        recorded = [(h["pid"], h.get("start")) for h in hosts] + [
            (p["pid"], p.get("start")) for p in state.get("procs", [])
        ]
        # a start time that was never read proves nothing: such a PID is not ours
        alive = [pid for pid, st in recorded if st is not None and nsutil.is_same_process(pid, st)]
        marked = {pid for pid in nsutil.pids_with_env(ENV_MARK, run_id) if _runs_as_trusted_user(pid)}
        # a namespace is ours only while a recorded process of ours still holds it, the state
        # file names it as a host's, and a root process in it carries the run's mark; never the
        # root namespace or our own, whatever the state file says
        held = {nsutil.netns_inode(pid) for pid in alive} - {None}
        named = {h["netns"] for h in hosts if h.get("netns")}
        our_ns = held & named & {nsutil.netns_inode(pid) for pid in marked}
        our_ns -= nsutil.protected_netns()
        unproven = (held & named) - our_ns - nsutil.protected_netns()
        if unproven:
            log(
                f"clean: run {run_id}: left {len(unproven)} namespace(s) alone: no process of root in them "
                f"carries {ENV_MARK}={run_id}"
            )
        victims = set(alive) | set(nsutil.pids_in_netns(our_ns)) | marked
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
        report.runs_cleaned.append(run_id)
        report.killed.extend(killed)
        log(
            f"clean: run {run_id} (pid {owner}, dead): ended {len(killed)} process(es)"
            f"{' ' + str(sorted(killed)) if killed else ''}; its namespaces and cables go with them"
        )
    return report
