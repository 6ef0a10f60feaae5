"""The one interface of a built network (emulator/interface.py): the one-machine network and
the multi-machine one both offer every name of `RunningNetwork`, so a command takes either."""

from __future__ import annotations

from pathlib import Path

from emulator import EmulatedNetwork, EmulationConfig, RunningNetwork
from emulator.cluster import ClusterNetwork
from emulator.cluster.ssh import Machine, SshOptions
from tests.fixtures.sample_plans import circulant_plan

# what the commands read of the network they get (topolab run, collective, verify, place, alloc)
USED_BY_COMMANDS = (
    "network facts netem delay_us link_mbps ports hosts servers nodes mtu time_scale link_rate_bps "
    "reference_gbps rates capacities "
    "host_address host_name popen plane_addresses relay_control cable_tx_bytes"
).split()


def test_both_networks_are_running_networks(tmp_path: Path) -> None:
    plan = circulant_plan(6, (1, 2))
    one = EmulatedNetwork(plan, EmulationConfig(run_dir=str(tmp_path)))  # not started: nothing is built
    machines = [Machine("m0", "192.0.2.201"), Machine("m1", "192.0.2.202")]
    several = ClusterNetwork(plan.network, [0, 0, 0, 1, 1, 1], machines, SshOptions(control_dir=tmp_path))
    for net in (one, several):
        assert isinstance(net, RunningNetwork)
        assert (net.time_scale, net.servers, net.nodes) == (250.0, 6, 6)


class _Copy:
    """The names of a network, all but one."""

    def __init__(self, net: object, left_out: str) -> None:
        for name in USED_BY_COMMANDS:
            if name != left_out:
                setattr(self, name, getattr(net, name))


def test_every_name_the_commands_use_is_in_the_interface(tmp_path: Path) -> None:
    one = EmulatedNetwork(circulant_plan(4, (1,)), EmulationConfig(run_dir=str(tmp_path)))
    assert isinstance(_Copy(one, ""), RunningNetwork)
    for name in USED_BY_COMMANDS:
        assert not isinstance(_Copy(one, name), RunningNetwork), name
