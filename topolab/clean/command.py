"""`topolab clean`: remove what killed topolab runs left behind, and only that.

A run records itself in ``<run-dir>/run-<pid>.json`` (its host shells, the processes it
started in hosts with their start times, its namespaces). For each run whose owner process is
gone, clean ends the recorded processes that still run (matched by PID *and* start time),
the processes marked with the run's ``TOPOLAB_RUN`` id, and any process still living in one of
the run's namespaces; the kernel then frees the namespaces and their veth cables. A namespace
is the run's only while a recorded process holds it and a root process in it carries the
run's mark (every host shell does), never PID 1's or clean's own; the run folder must be one
root may own and a state file must have the expected name, owner, size and shape
(`emulator.state.clean_dead_runs`), so a forged file cannot point clean at anything else. Runs
whose owner is alive are left alone. Never uses killall, pkill or `mn -c`.

A multi-machine run also leaves, if killed, its ssh control directory
(``$TMPDIR/tlcl-<pid>-<start time>-*``, `emulator.cluster.ssh.clean_control_dirs`): removed
here when that process is gone; with ``--machines``, what it left on those machines too
(`emulator.cluster.state.clean_machines`). And the folder of the workers' control socket and
logs (``$TMPDIR/topolab-coll-<pid>-<start time>-*``, `workers.coordinator.clean_dead_workdirs`)
of a run that was killed.
"""

from __future__ import annotations

import argparse
import json
import sys

from contract.emulation import DEFAULT_RUN_DIR, DEFAULT_SSH_USER
from contract.names import check_ssh_file, check_ssh_user, machines_from_text

from ..common.network import checked_argument


def add_clean_arguments(parser: argparse.ArgumentParser) -> None:
    """clean's options; the ones that reach ssh are checked as they are parsed
    (`contract.names`: one line naming the flag, exit 2), as a scenario's are when it is read."""
    parser.add_argument(
        "--run-dir", default=DEFAULT_RUN_DIR, help=f"run lock and state directory (default {DEFAULT_RUN_DIR})"
    )
    parser.add_argument("--json", action="store_true", help="print what was cleaned as JSON")
    parser.add_argument(
        "--machines",
        # the shapes of a network's --machines, not its loopback refusal: nothing is built here
        type=checked_argument(lambda text, flag: machines_from_text(text, flag, tunnels=False), "--machines"),
        metavar="HOST,...",
        help="also clean these machines of multi-machine runs whose driver here is gone (over ssh; "
        "IP addresses or host names)",
    )
    parser.add_argument(
        "--ssh-user",
        type=checked_argument(check_ssh_user, "--ssh-user"),
        default=DEFAULT_SSH_USER,
        metavar="USER",
        help=f"with --machines: the user to log in as (a login name; default {DEFAULT_SSH_USER})",
    )
    parser.add_argument(
        "--ssh-identity",
        type=checked_argument(check_ssh_file, "--ssh-identity"),
        metavar="FILE",
        help="with --machines: ssh private key file",
    )
    parser.add_argument(
        "--ssh-known-hosts",
        type=checked_argument(check_ssh_file, "--ssh-known-hosts"),
        metavar="FILE",
        help="with --machines: known_hosts file of the machines",
    )


def run_clean(args) -> int:
    from emulator.cluster.ssh import clean_control_dirs
    from emulator.state import clean_dead_runs
    from workers.coordinator import clean_dead_workdirs

    from ..common.network import check_ssh_files
    from ..common.options import require_root

    require_root("clean")
    machines = getattr(args, "machines", None)  # None: this machine only (and callers that set no flags)
    if machines is not None:  # before anything is cleaned here
        check_ssh_files({"--ssh-identity": args.ssh_identity, "--ssh-known-hosts": args.ssh_known_hosts})
    log = (lambda msg: print(msg, file=sys.stderr)) if args.json else print
    report = clean_dead_runs(args.run_dir, log=log)
    for run in report.runs_alive:
        log(f"clean: run {run} is still running: left alone")
    cleaned, alive, killed = list(report.runs_cleaned), list(report.runs_alive), report.killed
    remote_killed = 0  # other machines report how many processes they ended, not their PIDs
    if machines is not None:
        remote = _clean_machines(args, log)
        cleaned, alive, remote_killed = cleaned + remote.runs_cleaned, alive + remote.runs_alive, remote.killed
        for run in remote.runs_alive:
            log(f"clean: machine run {run} is still running: left alone")
    # after the machines: ending a dead run's ssh masters also ends its host shells' sessions
    # there (and the ssh clients here that outlived their driver), but only the machines'
    # own clean ends every process the run started on them
    control_dirs = clean_control_dirs(log=log)
    workdirs = clean_dead_workdirs(log=log)
    if not cleaned and not control_dirs and not workdirs and not args.json:
        print("clean: nothing left behind by topolab runs")
    if args.json:
        print(
            json.dumps(
                {
                    "cleaned": cleaned,
                    "alive": alive,
                    "killed": killed,
                    "killed_on_machines": remote_killed,
                    "ssh_control_dirs": control_dirs,
                    "worker_dirs": workdirs,
                }
            )
        )
    return 0


def _clean_machines(args, log):
    from emulator.cluster.ssh import Machine, SshOptions, check_machines
    from emulator.cluster.state import clean_machines

    machines = [Machine(name, name) for name in args.machines]  # checked by --machines' type
    with SshOptions.session(args.ssh_user, args.ssh_identity, args.ssh_known_hosts) as ssh:
        try:
            check_machines(machines, ssh)
            return clean_machines(machines, ssh, log=log)
        finally:
            for machine in machines:
                ssh.exit_master(machine)
