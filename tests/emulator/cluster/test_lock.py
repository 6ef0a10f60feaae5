"""A multi-machine network takes this machine's run lock as a one-machine network does:
``run_dir`` and ``lock_wait_s`` (``--run-dir``, ``--wait``) mean the same on both, and a
driver that finds the lock held builds nothing on any machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.emulation import EmulationConfig
from contract.network import circulant_network
from emulator import EmulationBusyError
from emulator.cluster import ClusterNetwork
from emulator.cluster.ssh import Machine, SshOptions
from emulator.state import RunLock


def _network(run_dir: Path, wait_s: float = 0.0) -> ClusterNetwork:
    # an address nothing answers on: if the network got past its lock it would fail on ssh
    machines = [Machine("m0", "198.18.255.1"), Machine("m1", "198.18.255.2")]
    config = EmulationConfig(run_dir=str(run_dir), lock_wait_s=wait_s)
    return ClusterNetwork(circulant_network(4, (1,)), [0, 0, 1, 1], machines, SshOptions(run_dir), config=config)


def test_a_held_run_lock_stops_a_multi_machine_network_before_it_builds(tmp_path: Path) -> None:
    holder = RunLock(str(tmp_path))
    holder.acquire()
    try:
        net = _network(tmp_path)
        with pytest.raises(EmulationBusyError, match="another topolab network is up"):
            net.__enter__()
        assert net.hosts == []  # nothing started on any machine
    finally:
        holder.release()


def test_the_lock_is_free_again_after_the_network_stops(tmp_path: Path) -> None:
    net = _network(tmp_path)
    net._lock = RunLock(str(tmp_path))
    net._lock.acquire()
    net.stop()  # what __exit__ and a failed build both run
    probe = RunLock(str(tmp_path))
    probe.acquire()  # would raise EmulationBusyError if stop had kept it
    probe.release()
