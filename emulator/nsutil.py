"""Small helpers to act inside another process's network namespace, and to name processes.

``setns(2)`` changes the namespace of the calling thread only, so entering a host's
namespace for a few netlink calls or sysctl writes and coming back is cheap (microseconds),
unlike pyroute2's ``netns=`` argument, which forks a helper process per socket.
A process is identified by (pid, start time) so a recycled PID is never mistaken for ours.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def in_netns_of(pid: int) -> Iterator[None]:
    """Run the body with this thread in the network namespace of process ``pid``."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(home)


def netns_inode(pid: int | str) -> int | None:
    """Inode of the network namespace ``pid`` lives in (None if it is gone)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def protected_netns() -> set[int]:
    """Network namespaces that are never the project's, whatever a state file says: the one of
    PID 1 (the machine's root namespace, or a container's own) and the caller's own."""
    return {ino for ino in (netns_inode(1), netns_inode(os.getpid())) if ino is not None}


def start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rindex(b")") + 2 :].split()
    return int(rest[19])


def is_same_process(pid: int, started: int | None) -> bool:
    """True if ``pid`` still runs and is the process that started at ``started``."""
    now = start_time(pid)
    return now is not None and (started is None or now == started)


def all_pids(proc: str = "/proc") -> list[int]:
    return [int(p) for p in os.listdir(proc) if p.isdigit()]


NETNS_WORKQUEUE_MARK = "+netns"
"""How a kernel worker's name shows that it runs the work that frees network namespaces
(``kworker/u8:3+netns``: Linux appends ``+`` and the workqueue's name while a worker executes
its work, in ``/proc/PID/comm``)."""


def kernel_freeing_namespaces(proc: str = "/proc") -> bool:
    """Whether the kernel is freeing network namespaces now (its ``netns`` workqueue runs: their
    cables, classes and routes go, under the routing-netlink lock every tc and netlink change
    also takes). A kernel that does not name its workers so reads as not freeing."""
    for pid in all_pids(proc):
        try:
            with open(f"{proc}/{pid}/comm", encoding="utf-8", errors="replace") as f:
                name = f.read()
        except OSError:
            continue
        if name.startswith("kworker") and NETNS_WORKQUEUE_MARK in name:
            return True
    return False


def pids_in_netns(inodes: set[int]) -> list[int]:
    """PIDs of every process living in one of the network namespaces ``inodes``."""
    if not inodes:
        return []
    return [pid for pid in all_pids() if netns_inode(pid) in inodes]


def pids_with_env(key: str, value: str) -> list[int]:
    """PIDs whose environment has ``key=value`` (the mark `EmulatedNetwork.popen` sets)."""
    needle = f"{key}={value}".encode()
    out = []
    for pid in all_pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    out.append(pid)
        except OSError:
            continue
    return out


def process_id(pid: int | None = None) -> str:
    """``<pid>-<start time>`` of ``pid`` (default: this process): a name no later process has."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{start_time(pid)}"


def process_alive(name: str) -> bool:
    """Whether the process `process_id` named is still running (same PID, same start time)."""
    pid_text, _, start = name.partition("-")
    try:
        return is_same_process(int(pid_text), int(start))
    except ValueError:  # not a process_id (or one whose start time was unreadable)
        return False
