"""Stand-in machines (tests/fixtures/standins.py) and the ssh to them (emulator/cluster/ssh.py):
isolated like real machines, reached only over the underlay, and gone without a trace."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from contract.errors import RunError
from emulator.cluster.ssh import check_machines
from tests.fixtures.standins import StandIns, processes_in

pytestmark = pytest.mark.root


@pytest.fixture
def machines() -> Iterator[StandIns]:
    with StandIns(3) as standins:
        yield standins
    assert standins.leftovers() == []


def _root_state() -> tuple[str, list[str]]:
    """The root namespace's addresses and its ssh listeners (others' test servers on loopback
    come and go meanwhile)."""
    addrs = subprocess.run(["ip", "-br", "addr"], capture_output=True, text=True, check=True).stdout
    listen = subprocess.run(["ss", "-Hltn", "sport", "= :22"], capture_output=True, text=True, check=True).stdout
    return addrs, listen.splitlines()


def test_multi_machine_standins_are_separate_machines(machines: StandIns) -> None:
    assert machines.ssh is not None
    seen_netns = set()
    for s in machines.standins:
        out = machines.ssh.run(
            s.machine, "cat /proc/1/comm; readlink /proc/self/ns/net; ss -Hltn; ls /run\n", 5, "probe"
        )
        comm, netns, *rest = out.splitlines()
        assert comm == "sleep"  # its own PID namespace: its init is the holder's sleep
        assert netns == s.netns
        seen_netns.add(netns)
        listening = [line.split()[3] for line in rest if line.startswith("LISTEN")]
        assert listening == [f"{s.machine.address}:22"]  # sshd only on its underlay address
        assert "sshd" in rest and "netns" not in rest  # its own /run
    assert len(seen_netns) == 3


def test_multi_machine_nothing_in_root_namespace() -> None:
    before = _root_state()
    with StandIns(2) as standins:
        assert _root_state() == before  # no bridge, address, route or listening socket here
        me = os.readlink("/proc/self/ns/net")
        assert me not in {s.netns for s in standins.standins} | {standins.underlay_netns}
    assert _root_state() == before
    assert standins.leftovers() == []


def test_machines_ssh_is_multiplexed_and_bounded(machines: StandIns) -> None:
    assert machines.ssh is not None
    assert check_machines(machines.machines, machines.ssh) < 8
    sockets = list((machines.workdir / "control").iterdir())
    assert len(sockets) == 3  # one master per machine
    for _ in range(5):
        machines.ssh.run(machines.machines[0], "true\n", 5, "probe")
    assert len(list((machines.workdir / "control").iterdir())) == 3
    # sessions ride the masters: still one TCP connection per machine, no handshake each
    established = subprocess.run(
        machines.in_underlay("ss", "-Htn", "state", "established", "( dport = :22 )"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert len(established.splitlines()) == 3


def test_machines_not_answering_are_named_within_10s(machines: StandIns) -> None:
    assert machines.ssh is not None
    machines.kill_machine(1)  # m1 crashes outright
    machines.ssh.exit_master(machines.machines[2])
    time.sleep(0.2)  # the session's sshd ends after the master: only the listener stays
    outside = [
        p for p in processes_in({machines.standins[2].netns}) if open(f"/proc/{p}/comm").read().strip() == "sshd"
    ]
    assert outside
    for pid in outside:
        os.kill(pid, signal.SIGSTOP)  # m2 hangs: TCP accepts, nobody speaks (the listener lives on)
    try:
        start = time.monotonic()
        with pytest.raises(RunError) as err:
            check_machines(machines.machines, machines.ssh)
        assert time.monotonic() - start < 10
    finally:
        for pid in outside:
            os.kill(pid, signal.SIGCONT)
    message = str(err.value)
    assert "\n" not in message
    assert "machine m1 (192.0.2.202)" in message and "machine m2 (192.0.2.203)" in message
    assert "m0" not in message


def test_machines_clean_cli_names_a_machine_it_cannot_reach(tmp_path) -> None:
    # loopback only: nothing of ours listens on 127.0.0.1:22 (and a foreign sshd refuses our batch-mode login);
    # a refused connection is named at once (2 s measured, Python's start included): the timeout stops a hang
    done = subprocess.run(
        [sys.executable, "-m", "topolab", "clean", "--run-dir", str(tmp_path), "--machines", "127.0.0.1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "machine 127.0.0.1 (127.0.0.1)" in done.stderr
    assert "Traceback" not in done.stderr
