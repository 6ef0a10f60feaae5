"""Small helpers to act inside another process's network namespace, and to name processes.

``setns(2)`` changes the namespace of the calling thread only, so entering a host's
namespace for a few netlink calls or sysctl writes and coming back is cheap (microseconds),
unlike pyroute2's ``netns=`` argument, which forks a helper process per socket.
A process is identified by (pid, start time) so a recycled PID is never mistaken for ours
(`contract.processes`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

# naming processes lives in contract (the workers name their folders so too); here for the emulator's callers
from contract.processes import is_same_process as is_same_process
from contract.processes import process_alive as process_alive
from contract.processes import process_id as process_id
from contract.processes import start_time as start_time

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
