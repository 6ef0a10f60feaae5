"""Marks a multi-machine run leaves on each machine, and `clean_machines` that uses them.

On every machine a run uses, its configuration script first writes
``/run/topolab/cluster-<run id>.pids``: one line ``<pid> <start time>`` per host shell of the
run on that machine (the start time is field 22 of ``/proc/<pid>/stat``, so a recycled PID
never matches). The run id is ``<driver pid>-<driver start time>`` of the process that drives
the emulation. A normal teardown removes the file after ending the hosts.

A driver killed outright (SIGKILL, a crash, a lost laptop) cannot do that, and its hosts'
shells and the processes started in them keep running on the other machines. `clean_machines`
(``topolab clean --machines``), run on the driver's machine, asks each machine for its
``cluster-*.pids``; for every run whose driver is no longer alive here it ends, on that
machine, every process living in the network namespace of one of the recorded shells (only
our processes live there), by PID, then removes the file and the run's control sockets there
(``cluster-<run id>-control-<k>.ipc``: the ends of the workers' control channels, which the
driver forwards over ssh). Runs whose driver is alive are left
alone. Nothing is matched by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contract.emulation import DEFAULT_RUN_DIR

from .. import nsutil
from .ssh import Machine, SshOptions

STATE_DIR = DEFAULT_RUN_DIR  # on every machine: where a one-machine run keeps its state too
CLEAN_TIMEOUT_S = 10.0
KILL_ROUNDS = 10  # x 0.2 s: how long SIGKILLed processes may take to be gone
_PREFIX = "cluster-"
_SUFFIX = ".pids"


def state_file(run_id: str) -> str:
    return f"{STATE_DIR}/{_PREFIX}{run_id}{_SUFFIX}"


def record_script(run_id: str, shell_pids: list[int]) -> str:
    """Shell: write the run's state file on this machine (before anything else is made)."""
    pids = " ".join(map(str, shell_pids))
    return (
        f"mkdir -p {STATE_DIR}\n"
        f"for p in {pids}; do echo \"$p $(cut -d' ' -f22 /proc/$p/stat)\"; done > {state_file(run_id)}.tmp\n"
        f"mv {state_file(run_id)}.tmp {state_file(run_id)}\n"
    )


def control_socket(run_id: str, index: int | str) -> str:
    """Where, on a machine, the run's ``index``-th forwarded control socket listens (``*``:
    a shell pattern for all of them)."""
    return f"{STATE_DIR}/{_PREFIX}{run_id}-control-{index}.ipc"


def kill_script(run_id: str) -> str:
    """Shell: end every process in the namespaces of the run's recorded shells whose start
    time still matches, wait until none is left, then remove the run's forwarded control
    sockets (`control_socket`) and the state file."""
    return f"""\
f={state_file(run_id)}
[ -f "$f" ] || exit 0
want=""
while read -r p t; do
  [ "$(cut -d' ' -f22 /proc/$p/stat 2>/dev/null)" = "$t" ] || continue
  n=$(readlink /proc/$p/ns/net 2>/dev/null) && want="$want $n"
done < "$f"
i=0
while [ -n "$want" ] && [ $i -lt {KILL_ROUNDS} ]; do
  left=0
  for d in /proc/[0-9]*; do
    n=$(readlink $d/ns/net 2>/dev/null) || continue
    case " $want " in *" $n "*) kill -9 ${{d#/proc/}} 2>/dev/null && echo killed ${{d#/proc/}}; left=1;; esac
  done
  [ $left = 0 ] && break
  i=$((i + 1)); sleep 0.2
done
[ $i -lt {KILL_ROUNDS} ] || {{ echo "processes still in the run's namespaces" >&2; exit 1; }}
rm -f {control_socket(run_id, "*")} "$f"
"""


@dataclass
class MachinesCleanReport:
    runs_cleaned: list[str] = field(default_factory=list)  # "<machine>: <run id>"
    runs_alive: list[str] = field(default_factory=list)
    killed: int = 0


def clean_machines(machines: list[Machine], ssh: SshOptions, log=print) -> MachinesCleanReport:
    """Clean every machine of the runs whose driver (on this machine) is gone."""
    report = MachinesCleanReport()
    listing = f"ls {STATE_DIR} 2>/dev/null | grep '^{_PREFIX}.*{_SUFFIX}$' || true\n"
    for machine in machines:
        names = ssh.run(machine, listing, CLEAN_TIMEOUT_S, "listing runs").split()
        for name in names:
            run_id = name[len(_PREFIX) : -len(_SUFFIX)]
            if nsutil.process_alive(run_id):
                report.runs_alive.append(f"{machine.name}: {run_id}")
                continue
            out = ssh.run(machine, kill_script(run_id), CLEAN_TIMEOUT_S, f"cleaning run {run_id}")
            killed = sum(1 for line in out.splitlines() if line.startswith("killed "))
            report.killed += killed
            report.runs_cleaned.append(f"{machine.name}: {run_id}")
            log(f"clean: machine {machine.name}: run {run_id}: ended {killed} process(es)")
    return report
