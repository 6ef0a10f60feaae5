"""The network a command builds: its shared options, its config, and the network itself.

Every command that builds a plan's network (``run``, ``compare``, ``collective`` with every
algorithm, ``verify``, ``shell``, ``place --run``, ``alloc --measure``) gets it the same way:

1. `add_network_arguments` gives it ``--machines HOST,...``, ``--run-dir DIR`` and
   ``--wait SECONDS``;
2. ``--machines`` is checked as it is parsed (`machines_argument`: IP addresses or host
   names, `contract.names`, never an ssh option), the rest by `network_flags` before any work
   (one line naming the flag, exit 2), root included;
3. `network_config` turns the scenario's ``[emulation]`` and those flags (and the command's
   own changes: ``link_mbps``, ``reference_gbps``...) into the `contract.emulation.EmulationConfig` of
   this run; `refuse_machines` is how a command that needs one machine says so, in one
   line, before anything is built;
4. `open_network` builds it: without ``[emulation] machines`` (or ``--machines``)
   `emulator.EmulatedNetwork` on this machine; with them, the servers are partitioned over
   the machines (`planner.topology.partition.partition_network`: fewest crossing cables, balanced
   load; docs/cluster.md section 1) and the network is built there by
   `emulator.cluster.ClusterNetwork` (Mininet Cluster Edition, VXLAN tunnels between
   machines; docs/cluster.md section 2), reached over ssh with the config's user, key and
   known_hosts, multiplexed through a control directory of its own that is removed afterwards.
   Either way the command gets an `emulator.interface.RunningNetwork`.

What a multi-machine network does not do yet is refused by `open_network` up front, in one
line naming the key: a per-destination allocation (planes) and ``netem = "on"`` (no link
latency across machines).
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from contract.emulation import DEFAULT_RUN_DIR, EmulationConfig
from contract.errors import UsageError
from contract.names import SshInputError, check_machines, machines_from_text
from contract.plan import Plan

from .options import MAX_WAIT_S, bounded_float, check_output_dir, require_root

if TYPE_CHECKING:
    from emulator.interface import RunningNetwork
    from planner import Scenario


def add_network_arguments(parser: argparse.ArgumentParser, when: str = "") -> None:
    """``--machines``, ``--run-dir`` and ``--wait``, the options of every command that builds a
    network. ``when`` starts their help where the network is optional ("with --run: ")."""
    parser.add_argument(
        "--machines",
        type=machines_argument,
        metavar="HOST,...",
        help=f"{when}emulate over these machines (ssh addresses; Mininet Cluster Edition; "
        "overrides [emulation] machines, docs/cluster.md)",
    )
    parser.add_argument(
        "--run-dir",
        default=None,
        metavar="DIR",
        help=f"{when}where the run lock and state files live (default: {DEFAULT_RUN_DIR}; "
        "`topolab clean` must be given the same)",
    )
    parser.add_argument(
        "--wait",
        type=bounded_float(0.0, MAX_WAIT_S, low_inclusive=True),
        default=0.0,
        metavar="SECONDS",
        help=f"{when}wait up to SECONDS for another topolab network to finish (default: fail at once)",
    )


@dataclass(frozen=True)
class NetworkFlags:
    """The shared options as given: None keeps the scenario's machines, the default run dir."""

    machines: tuple[str, ...] | None = None  # --machines
    run_dir: str | None = None  # --run-dir
    wait_s: float = 0.0  # --wait

    @property
    def machines_source(self) -> str:
        """What put the network over machines, for messages: the flag or the scenario key."""
        return "--machines" if self.machines is not None else "emulation.machines"


def network_flags(args: argparse.Namespace, command: str) -> NetworkFlags:
    """The shared options of ``args``, checked before any work: ``--machines`` (parsed by
    `machines_argument`; checked again, one line naming it), root (``topolab <command> needs
    root``), then ``--run-dir`` writable."""
    machines = None if args.machines is None else check_machines(args.machines, "--machines")
    require_root(command)  # before --run-dir: /run is root's
    if args.run_dir is not None:
        check_output_dir(args.run_dir, "--run-dir")
    return NetworkFlags(machines, args.run_dir, args.wait)


Checked = TypeVar("Checked")


def checked_argument(check: Callable[[str, str], Checked], flag: str) -> Callable[[str], Checked]:
    """argparse type of ``flag`` from a `contract.names` check (``check(text, key)``): its
    refusal becomes argparse's one line, ``argument <flag>: <problem>`` (exit 2)."""

    def parse(text: str) -> Checked:
        try:
            return check(text, flag)
        except SshInputError as err:
            raise argparse.ArgumentTypeError(err.problem) from None

    return parse


machines_argument = checked_argument(machines_from_text, "--machines")
"""argparse type of ``--machines A,B,C``: the tuple of machine addresses
(`contract.names.machines_from_text`: IP addresses or host names, distinct, no loopback)."""


def check_ssh_files(files: Mapping[str, str | None]) -> None:
    """Each ssh file given (``{key or flag: path}``; None: not given) is a regular file (ssh
    reads keys and known_hosts from it); else one line naming the key and the path."""
    for key, path in files.items():
        if path is None:
            continue
        try:
            mode = os.stat(path).st_mode
        except OSError as err:
            problem = "no such file" if err.errno == errno.ENOENT else f"cannot be read: {err.strerror}"
            raise UsageError(f"{key} = {path!r}: {problem}") from None
        if not stat.S_ISREG(mode):
            raise UsageError(f"{key} = {path!r}: not a regular file")


def network_config(
    emulation: EmulationConfig | None, flags: NetworkFlags | None = None, **changes: Any
) -> EmulationConfig:
    """The `contract.emulation.EmulationConfig` of this command: the scenario's ``[emulation]``
    (None: the defaults), then ``flags`` (``--machines`` and ``--run-dir`` where given,
    ``--wait``), then the command's own ``changes`` (fields of the config: ``link_mbps``,
    ``reference_gbps``, ...). A bad value raises the config's one-line error naming the key."""
    config = EmulationConfig() if emulation is None else emulation
    if flags is not None:
        config = replace(config, lock_wait_s=flags.wait_s)
        if flags.machines is not None:
            config = replace(config, machines=flags.machines)
        if flags.run_dir is not None:
            config = replace(config, run_dir=flags.run_dir)
    return replace(config, **changes)


def refuse_machines(config: EmulationConfig, flags: NetworkFlags | None, why: str) -> None:
    """One line naming ``--machines`` or ``emulation.machines`` (exit 2), before anything is
    built, when ``config`` spreads the network over machines and ``why`` says what of this
    command needs this machine alone."""
    if config.machines:
        raise UsageError(f"{(flags or NetworkFlags()).machines_source}: {why}")


def open_network(
    plan: Plan, config: EmulationConfig, log: Callable[[str], None]
) -> AbstractContextManager[RunningNetwork]:
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
    check_ssh_files({f"emulation.{key}": getattr(config, key) for key in ("ssh_identity", "ssh_known_hosts")})


@contextmanager
def _cluster_network(plan: Plan, config: EmulationConfig, log: Callable[[str], None]) -> Iterator[RunningNetwork]:
    from emulator.cluster import ClusterNetwork
    from emulator.cluster.ssh import Machine, SshOptions
    from planner.topology.partition import partition_network

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


def plan_and_config(
    args: argparse.Namespace, command: str, **changes: Any
) -> tuple[Scenario, Plan, EmulationConfig, NetworkFlags]:
    """Scenario, plan and emulation config of a network command (``--link-mbps`` and the
    command's ``changes`` applied); checks its inputs and root first."""
    from planner import build_plan, load_scenario

    flags = network_flags(args, command)
    scenario = load_scenario(args.scenario)
    if args.link_mbps is not None:
        changes["link_mbps"] = args.link_mbps
    config = network_config(scenario.emulation, flags, **changes)
    return scenario, build_plan(scenario), config, flags
