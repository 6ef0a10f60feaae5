"""Marks a multi-machine run leaves on each machine, and `clean_machines` that uses them.

On every machine a run uses, its configuration script first writes
``/run/topolab/cluster-<run id>.pids``: a first line ``driver <driver host>`` (`driver_host`:
the driving machine's ``/etc/machine-id``, or its host name), then one line
``<pid> <start time>`` per host shell of the run on that machine (the start time is field 22
of ``/proc/<pid>/stat``, so a recycled PID never matches). The run id is
``<driver pid>-<driver start time>`` of the process that drives the emulation. The run also
keeps, in the machine's root namespace, the nftables table that filters its tunnels' underlay
(`filter_table`, built by `emulator.cluster.net`). A normal teardown ends the hosts, removes
the table, then the file.

A driver killed outright (SIGKILL, a crash, a lost laptop) cannot do that, and its hosts'
shells and the processes started in them keep running on the other machines. `clean_machines`
(``topolab clean --machines``), run on the driver's machine, asks each machine for its
``cluster-*.pids``; for every run recorded by *this* driver host whose driver is no longer
alive here it ends, on that machine, every process living in the network namespace of one of
the recorded shells (only our processes live there), by PID, then removes the run's filter
table, its control sockets there (``cluster-<run id>-control-<k>.ipc``: the ends of the
workers' control channels, which the driver forwards over ssh) and the file. Runs whose
driver is alive, and runs recorded by another driver host (whose liveness cannot be judged
here), are left alone. Nothing is matched by name.

What reaches a machine's shell is data of known shape only: a run id is ``<digits>-<digits>``
(`check_run_id`), a driver host a name of letters, digits, dots and dashes, and every path is
quoted (``shlex.quote``) besides. What comes back is read only when it has the expected shape:
a state file's name must be ``cluster-<digits>-<digits>.pids``, its first line ``driver
<host>``, and a line of PIDs two integers; anything else is skipped. The cleanup never ends a
process in the network namespace of the machine's PID 1 (its root namespace, or a
container's own) or of the shell running it, whatever a state file says.
"""

from __future__ import annotations

import re
import shlex
import socket
from dataclasses import dataclass, field

from contract.emulation import DEFAULT_RUN_DIR
from contract.errors import RunError
from contract.files import FileInputError, read_capped_text

from .. import nsutil
from .ssh import Machine, SshOptions

STATE_DIR = DEFAULT_RUN_DIR  # on every machine: where a one-machine run keeps its state too
CLEAN_TIMEOUT_S = 10.0
KILL_ROUNDS = 10  # x 0.2 s: how long SIGKILLed processes may take to be gone
_PREFIX = "cluster-"
_SUFFIX = ".pids"
FILTER_TABLE_PREFIX = "topolab_"  # nftables table `inet topolab_<pid>_<start>` of a run
DROP_COUNTER = "vxlan_dropped"  # the named counter of the UDP 4789 datagrams a run's filter dropped
MACHINE_ID_FILE = "/etc/machine-id"
LEFT_ALONE = "left alone:"  # what kill_script prints for a state file of another driver host

RUN_ID = re.compile(r"[0-9]{1,10}-[0-9]{1,20}")  # nsutil.process_id: <pid>-<start time>
DRIVER_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}")  # a machine id (hex) or a host name
# one line of clean_machines' listing: a state file's name and its first line
_LISTED = re.compile(rf"{re.escape(_PREFIX)}({RUN_ID.pattern}){re.escape(_SUFFIX)} driver ({DRIVER_HOST.pattern})")
_NAME_CHARS = "a-z0-9.-"  # the characters a state file's name may have (shell bracket expression)


def check_run_id(run_id: str) -> str:
    """``run_id`` if it is a run id (``<digits>-<digits>``, `nsutil.process_id`); else ValueError:
    nothing else may become part of a remote file name or command."""
    if not RUN_ID.fullmatch(run_id):
        raise ValueError(f"run id {run_id!r} is not <pid>-<start time>")
    return run_id


def check_driver_host(driver: str) -> str:
    """``driver`` if it is a driver host name (`DRIVER_HOST`); else ValueError."""
    if not DRIVER_HOST.fullmatch(driver):
        raise ValueError(f"driver host {driver!r} is not a machine id or host name")
    return driver


def driver_host() -> str:
    """What names this driving machine in the state files it leaves on the others: its
    ``/etc/machine-id`` (32 hex digits, fixed for the installation), or its host name where
    there is none; a RunError if neither is usable. Two drivers on different machines never
    share it, so neither cleans the other's runs."""
    try:
        machine_id = read_capped_text(MACHINE_ID_FILE, 256, "machine id").strip()
    except FileInputError:
        machine_id = ""
    if re.fullmatch(r"[0-9a-f]{32}", machine_id):
        return machine_id
    name = socket.gethostname()
    if DRIVER_HOST.fullmatch(name):
        return name
    raise RunError(f"this machine has no usable {MACHINE_ID_FILE} and its host name {name!r} is not a host name")


def state_file(run_id: str) -> str:
    return f"{STATE_DIR}/{_PREFIX}{check_run_id(run_id)}{_SUFFIX}"


def filter_table(run_id: str) -> str:
    """The name of the run's nftables table (family ``inet``) on each machine: the run id with
    ``_`` for ``-``, so the table says which run it belongs to."""
    return FILTER_TABLE_PREFIX + check_run_id(run_id).replace("-", "_")


# the start time of process $1 (field 22 of /proc/<pid>/stat; counted after the command
# name's closing parenthesis, since a name may hold spaces)
_START_TIME = "st() { sed 's/.*) //' /proc/$1/stat 2>/dev/null | cut -d' ' -f20; }\n"


def _state_dir_check() -> str:
    """Shell: stop (exit 1) unless the state folder is a folder of ours, not a link."""
    d = shlex.quote(STATE_DIR)
    return (
        f'[ -d {d} ] && [ ! -L {d} ] && [ -O {d} ] || {{ echo "{STATE_DIR}: not a folder owned by '
        f'$(id -un)" >&2; exit 1; }}\n'
    )


def record_script(run_id: str, shell_pids: list[int], driver: str) -> str:
    """Shell: write the run's state file on this machine (before anything else is made)."""
    pids = " ".join(str(int(p)) for p in shell_pids)
    path = shlex.quote(state_file(run_id))
    tmp = shlex.quote(state_file(run_id) + ".tmp")
    return (
        f"mkdir -p {shlex.quote(STATE_DIR)}\n"
        + _state_dir_check()
        + _START_TIME
        + f"rm -f {tmp}\n"
        + f"{{ echo {shlex.quote('driver ' + check_driver_host(driver))}\n"
        + f'  for p in {pids}; do echo "$p $(st $p)"; done; }} > {tmp}\n'
        + f"mv -f {tmp} {path}\n"
    )


def control_socket(run_id: str, index: int) -> str:
    """Where, on a machine, the run's ``index``-th forwarded control socket listens."""
    return f"{STATE_DIR}/{_PREFIX}{check_run_id(run_id)}-control-{int(index)}.ipc"


def kill_script(run_id: str, driver: str) -> str:
    """Shell: if the run's state file was written by ``driver``, end every process in the
    namespaces of its recorded shells whose start time still matches (never the namespace
    of PID 1 or of this shell), wait until none is left, then remove the run's filter table,
    its forwarded control sockets (`control_socket`) and the state file. A state file of
    another driver host is left as it is (one line ``left alone: ...``)."""
    path = shlex.quote(state_file(run_id))
    driver_line = shlex.quote("driver " + check_driver_host(driver))
    sockets = shlex.quote(f"{STATE_DIR}/{_PREFIX}{run_id}-control-") + "*" + shlex.quote(".ipc")
    table = shlex.quote(filter_table(run_id))
    return f"""\
f={path}
[ -f "$f" ] && [ ! -L "$f" ] || exit 0
[ "$(head -n 1 -- "$f")" = {driver_line} ] || {{ echo "{LEFT_ALONE} recorded by another driver host"; exit 0; }}
{_START_TIME}root=$(readlink /proc/1/ns/net) && self=$(readlink /proc/$$/ns/net) || exit 1
want=""
while read -r p t rest; do
  case "$p" in ''|*[!0-9]*) continue;; esac
  case "$t" in ''|*[!0-9]*) continue;; esac
  [ -z "$rest" ] || continue
  [ "$(st "$p")" = "$t" ] || continue
  n=$(readlink "/proc/$p/ns/net" 2>/dev/null) || continue
  if [ "$n" = "$root" ] || [ "$n" = "$self" ]; then continue; fi
  want="$want $n"
done < "$f"
i=0
while [ -n "$want" ] && [ $i -lt {KILL_ROUNDS} ]; do
  left=0
  for d in /proc/[0-9]*; do
    n=$(readlink "$d/ns/net" 2>/dev/null) || continue
    case " $want " in *" $n "*) kill -9 "${{d#/proc/}}" 2>/dev/null && echo "killed ${{d#/proc/}}"; left=1;; esac
  done
  [ $left = 0 ] && break
  i=$((i + 1)); sleep 0.2
done
[ $i -lt {KILL_ROUNDS} ] || {{ echo "processes still in the run's namespaces" >&2; exit 1; }}
if command -v nft >/dev/null 2>&1 && nft list table inet {table} >/dev/null 2>&1; then
  nft delete table inet {table}
fi
rm -f -- {sockets} "$f"
"""


def listing_script() -> str:
    """Shell: one line ``<name> <first line>`` per state file of this machine whose name has
    only the characters a state file's name has (a name with a newline or a space cannot
    make up a line) and that is a regular file, not a link; the first line is cut at 300
    characters. `clean_machines` reads only lines of the expected shape."""
    d = shlex.quote(STATE_DIR)
    return f"""\
[ -d {d} ] && [ ! -L {d} ] || exit 0
for f in {d}/{_PREFIX}*{_SUFFIX}; do
  n=${{f##*/}}
  case "$n" in *[!{_NAME_CHARS}]*) continue;; esac
  [ -f "$f" ] && [ ! -L "$f" ] || continue
  printf '%s %s\\n' "$n" "$(head -n 1 -- "$f" | cut -c 1-300)"
done
"""


def parse_listing(text: str) -> list[tuple[str, str]]:
    """``(run id, driver host)`` of each line of `listing_script`'s output that has the
    expected shape; other lines are skipped."""
    found = []
    for line in text.splitlines():
        match = _LISTED.fullmatch(line)
        if match is not None:
            found.append((match.group(1), match.group(2)))
    return found


@dataclass
class MachinesCleanReport:
    runs_cleaned: list[str] = field(default_factory=list)  # "<machine>: <run id>"
    runs_alive: list[str] = field(default_factory=list)
    runs_other_driver: list[str] = field(default_factory=list)  # recorded by another driver host
    killed: int = 0


def clean_machines(
    machines: list[Machine], ssh: SshOptions, log=print, driver: str | None = None
) -> MachinesCleanReport:
    """Clean every machine of the runs recorded by this driver host (``driver``, default
    `driver_host`) whose driver (on this machine) is gone."""
    driver = check_driver_host(driver_host() if driver is None else driver)
    report = MachinesCleanReport()
    for machine in machines:
        for run_id, recorded_by in parse_listing(ssh.run(machine, listing_script(), CLEAN_TIMEOUT_S, "listing runs")):
            if recorded_by != driver:
                report.runs_other_driver.append(f"{machine.name}: {run_id}")
                log(f"clean: machine {machine.name}: run {run_id} was started from another machine: left alone")
                continue
            if nsutil.process_alive(run_id):
                report.runs_alive.append(f"{machine.name}: {run_id}")
                continue
            out = ssh.run(machine, kill_script(run_id, driver), CLEAN_TIMEOUT_S, f"cleaning run {run_id}")
            if any(line.startswith(LEFT_ALONE) for line in out.splitlines()):  # rewritten meanwhile
                report.runs_other_driver.append(f"{machine.name}: {run_id}")
                continue
            killed = sum(1 for line in out.splitlines() if line.startswith("killed "))
            report.killed += killed
            report.runs_cleaned.append(f"{machine.name}: {run_id}")
            log(f"clean: machine {machine.name}: run {run_id}: ended {killed} process(es)")
    return report
