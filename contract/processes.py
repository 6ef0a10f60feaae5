"""Processes named so that a recycled PID is never mistaken for ours, and the temporary
folders such a process leaves if it is killed.

A process is ``<pid>-<start time>`` (`process_id`; the start time in clock ticks since boot,
field 22 of ``/proc/PID/stat``): no later process has the same name. A run that keeps files
in a temporary folder names the folder ``<prefix><pid>-<start time>-<random>``
(`process_temp_dir`) and removes it when it ends; if it is killed (SIGKILL, a crash),
``topolab clean`` finds the folders whose process is gone (`dead_process_dirs`) and removes
them, and only folders that could be ours: of the right name, a real folder (not a link),
owned by root or the effective user and writable by no one else (`contract.files.folder_problem`;
`tempfile.mkdtemp` makes them 0700), as a folder of that name in a shared ``/tmp`` may be
anyone's.
"""

from __future__ import annotations

import glob
import os
import re
import tempfile
from pathlib import Path

from .files import folder_problem


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


def process_temp_dir(prefix: str, parent: str | None = None) -> Path:
    """A new folder ``<prefix><pid>-<start time>-<random>`` (mode 0700) of this process in
    ``parent`` (default: the temporary directory), for `dead_process_dirs` to find if the
    process is killed before it removes the folder."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{process_id()}-", dir=parent))


def dead_process_dirs(prefix: str, parent: str | None = None) -> list[tuple[Path, str]]:
    """The folders `process_temp_dir` made with ``prefix`` in ``parent`` (default: the
    temporary directory) whose process is gone, with that process's id: only real folders
    of the exact name, owned by a trusted user and writable by no one else."""
    pattern = re.compile(rf"{re.escape(prefix)}(\d+-\d+)-[a-z0-9_]+")
    found = []
    for path in sorted(Path(parent or tempfile.gettempdir()).glob(f"{glob.escape(prefix)}*-*-*")):
        match = pattern.fullmatch(path.name)
        if match is None or folder_problem(path) is not None or process_alive(match.group(1)):
            continue
        found.append((path, match.group(1)))
    return found
