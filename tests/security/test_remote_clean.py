"""Remote cleanup (emulator/cluster/state.py) acts only on data of the expected shape, only on
runs this driver host recorded, and never on the namespace of a machine's PID 1."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

import pytest

from emulator.cluster.state import (
    STATE_DIR,
    check_driver_host,
    clean_machines,
    control_socket,
    driver_host,
    filter_table,
    kill_script,
    listing_script,
    parse_listing,
    record_script,
    state_file,
)
from tests.fixtures.standins import StandIns

HOSTILE_RUN_IDS = [
    "1-2; reboot",
    "$(id)",
    "`id`",
    "1-2\nreboot",
    "../../etc/passwd",
    "-1-2",
    "1-2 ",
    " 1-2",
    "1 2",
    "1-2-3",
    "",
    "*",
    "1-*",
    "１-２",  # fullwidth digits: str.isdigit says yes, a shell does not
]
HOSTILE_DRIVERS = ["a b", "$(id)", "x;reboot", "-x", "", "x\ny", "é", "a" * 254, "'"]
DEAD_RUN = "4194305"  # above the largest pid_max (2^22): no process has this PID


@pytest.mark.parametrize("run_id", HOSTILE_RUN_IDS)
def test_remote_names_refuse_hostile_run_ids(run_id: str) -> None:
    me = driver_host()
    for make in (
        lambda: kill_script(run_id, me),
        lambda: record_script(run_id, [1], me),
        lambda: state_file(run_id),
        lambda: filter_table(run_id),
        lambda: control_socket(run_id, 0),
    ):
        with pytest.raises(ValueError, match="run id"):
            make()


@pytest.mark.parametrize("driver", HOSTILE_DRIVERS)
def test_remote_scripts_refuse_hostile_driver_hosts(driver: str) -> None:
    with pytest.raises(ValueError, match="driver host"):
        kill_script("1-2", driver)
    with pytest.raises(ValueError, match="driver host"):
        record_script("1-2", [1], driver)
    with pytest.raises(ValueError, match="driver host"):
        check_driver_host(driver)


def test_remote_scripts_quote_every_name() -> None:
    me = driver_host()
    assert check_driver_host(me) == me
    script = kill_script("12-34", me) + record_script("12-34", [5, 6], me)
    assert f"f={shlex.quote(state_file('12-34'))}\n" in script
    assert f'[ "$(head -n 1 -- "$f")" = {shlex.quote("driver " + me)} ]' in script
    assert "nft delete table inet topolab_12_34\n" in script
    assert f"{{ echo {shlex.quote('driver ' + me)}\n" in script


def test_remote_listing_reads_only_lines_of_the_expected_shape() -> None:
    me = "0123456789abcdef0123456789abcdef"
    text = "\n".join(
        [
            f"cluster-12-34.pids driver {me}",  # the one good line
            f"cluster-12-34.pids driver {me} extra",
            f"cluster-12-34;id.pids driver {me}",
            "cluster-12-34.pids driver $(id)",
            f"cluster-1-2-3.pids driver {me}",
            f"cluster-12-34.pids.tmp driver {me}",
            "cluster-56-78.pids 56 7890",  # a state file without a driver line: not ours
            f"xcluster-12-34.pids driver {me}",
            "",
        ]
    )
    assert parse_listing(text) == [("12-34", me)]


@pytest.fixture
def machine() -> Iterator[StandIns]:
    with StandIns(1) as standins:
        yield standins
    assert standins.leftovers() == []


def _run(standins: StandIns, script: str) -> str:
    assert standins.ssh is not None
    return standins.ssh.run(standins.machines[0], script, 10, "test")


def _state(run: str, driver: str, pids_script: str) -> str:
    """Shell writing the state file of ``run`` by ``driver`` on the machine: the driver line,
    then what ``pids_script`` prints (``<pid> <start time>`` lines)."""
    return (
        f"mkdir -p {STATE_DIR}\n"
        "st() { sed 's/.*) //' /proc/$1/stat | cut -d' ' -f20; }\n"
        f"{{ echo 'driver {driver}'; {pids_script}; }} > {state_file(run)}\n"
    )


def _alive(standins: StandIns, pid: int, start: str) -> bool:
    """Whether ``pid`` still runs as the process started at ``start`` (a zombie does not: the
    stand-in's init, a ``sleep``, never reaps the orphans it inherits)."""
    out = _run(standins, f"sed 's/.*) //' /proc/{pid}/stat 2>/dev/null | cut -d' ' -f1,20\n").split()
    return len(out) == 2 and out[0] != "Z" and out[1] == start


@pytest.mark.root
def test_remote_clean_leaves_another_driver_hosts_run_alone(machine: StandIns) -> None:
    """Two dead-looking runs on a machine, each a process in a namespace of its own: the one
    recorded by another driver host is left as it is; the one recorded by this host is ended."""
    assert machine.ssh is not None
    me = driver_host()
    runs = {}
    for run, driver in ((f"{DEAD_RUN}-1", "driver-b.example"), (f"{DEAD_RUN}-2", me)):
        out = _run(machine, "setsid unshare -n sleep 1000 </dev/null >/dev/null 2>&1 & echo $!\n")
        pid = int(out)
        start = _run(machine, f"sed 's/.*) //' /proc/{pid}/stat | cut -d' ' -f20\n").strip()
        _run(machine, _state(run, driver, f"echo '{pid} {start}'"))
        runs[run] = (pid, start)
    report = clean_machines(machine.machines, machine.ssh, log=lambda _msg: None)
    assert report.runs_other_driver == [f"m0: {DEAD_RUN}-1"]
    assert report.runs_cleaned == [f"m0: {DEAD_RUN}-2"] and report.killed == 1
    assert _alive(machine, *runs[f"{DEAD_RUN}-1"])  # the other driver's process still runs
    assert not _alive(machine, *runs[f"{DEAD_RUN}-2"])
    files = _run(machine, f"ls {STATE_DIR}\n").split()
    assert files == [f"cluster-{DEAD_RUN}-1.pids"]
    _run(machine, f"kill -9 {runs[f'{DEAD_RUN}-1'][0]}; rm {state_file(f'{DEAD_RUN}-1')}\n")


@pytest.mark.root
def test_remote_clean_never_touches_the_namespace_of_pid_1(machine: StandIns) -> None:
    """A state file of ours naming every process of the machine's root namespace (PID 1, its
    sshd, the shell writing it) ends none of them; the run's file is removed all the same. A
    file whose name could make up a forged line of the listing is not read."""
    assert machine.ssh is not None
    me = driver_host()
    run = f"{DEAD_RUN}-3"
    every = 'for d in /proc/[0-9]*; do p=${d#/proc/}; echo "$p $(st $p)"; done 2>/dev/null'
    _run(machine, _state(run, me, every))
    sshd = int(_run(machine, "ss -Hltnp | grep -o 'pid=[0-9]*' | cut -d= -f2\n"))
    lasting = {pid: _run(machine, f"sed 's/.*) //' /proc/{pid}/stat | cut -d' ' -f20\n").strip() for pid in (1, sshd)}
    forged = f"cluster-7\ncluster-{DEAD_RUN}-4.pids driver {me}\n.pids"
    _run(machine, f"printf 'driver {me}\\n' > {shlex.quote(STATE_DIR + '/' + forged)}\n")
    listed = parse_listing(_run(machine, listing_script()))
    assert listed == [(run, me)]  # the name with newlines was skipped, not split into lines
    report = clean_machines(machine.machines, machine.ssh, log=lambda _msg: None)
    assert report.runs_cleaned == [f"m0: {run}"] and report.killed == 0
    assert all(_alive(machine, pid, start) for pid, start in lasting.items())  # PID 1 and the sshd
    assert _run(machine, f"ls -1b {STATE_DIR}\n").splitlines() == [forged.replace("\n", "\\n").replace(" ", "\\ ")]
