"""The network a command builds: on this machine, or over the scenario's ``machines``.

`open_network` is what every command that builds a plan's network calls: without
``[emulation] machines`` (or ``--machines``) it is `emulator.EmulatedNetwork` as always; with
them, the servers are partitioned over the machines (`planner.partition.partition_network`:
fewest crossing cables, balanced load; docs/cluster.md section 1) and the network is built
there by `emulator.cluster.ClusterNetwork` (Mininet Cluster Edition, VXLAN tunnels between
machines; docs/cluster.md section 2), reached over ssh with the config's user, key and
known_hosts, multiplexed through a control directory of its own that is removed afterwards.

What a multi-machine network does not do yet is refused up front, in one line naming the key:
a per-destination allocation (planes) and ``netem = "on"`` (no link latency across machines).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from contract.emulation import EmulationConfig
from contract.errors import UsageError
from contract.plan import Plan


def machines_from_flag(spec: str) -> tuple[str, ...]:
    """``--machines A,B,C`` as a tuple of addresses; one-line UsageError naming the flag."""
    from emulator.config import check_machines

    names = tuple(name.strip() for name in spec.split(",") if name.strip())
    if not names:
        raise UsageError("--machines: give one or more machine addresses, separated by commas")
    check_machines(names, "--machines")
    return names


def open_network(plan: Plan, config: EmulationConfig, log: Callable[[str], None]) -> AbstractContextManager:
    """The context manager that builds ``plan``'s network as ``config`` says: an
    `EmulatedNetwork`, or a `ClusterNetwork` over ``config.machines``. Bad multi-machine input
    raises `UsageError` before anything starts."""
    from emulator import EmulatedNetwork

    if not config.machines:
        return EmulatedNetwork(plan, config, log=log)
    _check_multi_machine(plan, config)
    return _cluster_network(plan, config, log)


def _check_multi_machine(plan: Plan, config: EmulationConfig) -> None:
    machines = len(config.machines)
    if machines > plan.network.nodes:
        raise UsageError(
            f"emulation.machines: {machines} machines for {plan.network.nodes} nodes; give at most one per node"
        )
    if plan.network.allocation:
        raise UsageError(
            "emulation.machines: this plan routes per destination over several paths (planes), "
            "which is not built across machines yet; emulate it on one machine"
        )
    if config.netem == "on":
        raise UsageError(
            "emulation.netem = 'on': link latency (netem) is not applied across machines; use 'auto' or 'off'"
        )
    for key in ("ssh_identity", "ssh_known_hosts"):
        path = getattr(config, key)
        if path is not None and not Path(path).is_file():
            raise UsageError(f"emulation.{key} = {path!r}: no such file")


@contextmanager
def _cluster_network(plan: Plan, config: EmulationConfig, log: Callable[[str], None]) -> Iterator:
    from emulator.cluster import ClusterNetwork
    from emulator.cluster_ssh import Machine, SshOptions
    from planner.partition import partition_network

    machines = [Machine(address, address) for address in config.machines]
    cut = partition_network(plan.network, len(machines))
    hosts = [cut.assignment.count(m) for m in range(len(machines))]
    log(
        f"{len(machines)} machines ({cut.method}): {cut.cut_cables} of {cut.cables} cables cross "
        f"({cut.cut_fraction:.1%}); hosts per machine: "
        + ", ".join(f"{m.name} {n}" for m, n in zip(machines, hosts, strict=True))
    )
    with SshOptions.session(config.ssh_user, config.ssh_identity, config.ssh_known_hosts) as ssh:
        with ClusterNetwork(plan.network, cut.assignment, machines, ssh, config) as net:
            yield net
