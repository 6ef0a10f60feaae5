"""`EmulationConfig`: the scenario's ``[emulation]`` table, with the defaults we measured.

Time dilation: a plan link of ``plan.link_gbps`` is emulated at ``link_mbps``; every link is
scaled by the same factor, so ``time_scale = plan.link_gbps * 1000 / link_mbps`` converts
each measured time back to the planned network (a 25 Gbps link emulated at 500 Mbit/s runs
50x slower).

Why ``link_mbps = 100`` by default (the rate every scenario uses): the emulated run must
be limited by the shaped links, not by the 2-core machine. At 100 Mbit/s per link the
workers' per-operation software cost stays small next to transfer times (the end-to-end
prediction error stays under 10%; at 400 Mbit/s it reached 70%), a 12-worker ring AllReduce
measured 1.007x its TCP-limited ideal, and even the switch baseline, whose 4x ports carry
400 Mbit/s each, moves under 10 Gbit/s of shaped traffic in total, far below the 45-55
Gbit/s at which both cores saturate. HTB itself holds its rate from 10 Mbit/s to 5 Gbit/s
(``docs/emulation.md`` section 3), so the default is chosen for the workers, not for tc.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, fields
from typing import Any

from .errors import EmulationInputError

NETEM_MODES = ("auto", "on", "off")
DEFAULT_LINK_MBPS = 100.0
"""Emulated rate of one plan link; see the module docstring for why 100."""
JUMBO_MTU = 9000
"""MTU of every cable by default: RDMA clusters run jumbo frames, and TCP goodput over a
shaped cable is then 99.2% of its rate instead of 95.6% at 1500."""
MTU_MIN, MTU_MAX = 576, 65535
"""The MTU range IPv4 hosts must accept (RFC 791 minimum) up to the largest veth MTU."""
HOST_MEMORY_MIB = 8.0
"""Measured cost of one emulated host (shell, namespace, link buffers), rounded up."""
DEFAULT_SSH_USER = "root"
"""The emulator creates namespaces and interfaces on every machine: it must be root there."""
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")
"""Names of this machine that the other machines cannot reach it at (see `check_machines`)."""


@dataclass(frozen=True)
class EmulationConfig:
    """How to emulate a plan. Field names match the scenario's ``[emulation]`` table."""

    link_mbps: float = DEFAULT_LINK_MBPS
    """Emulated rate of one plan link of ``plan.link_gbps`` (other links scale with it)."""
    mtu: int = JUMBO_MTU
    """MTU of every emulated cable (RDMA clusters run jumbo frames)."""
    netem: str = "auto"
    """``auto``: apply the plan latency with netem where the kernel has it; ``on``: require
    netem; ``off``: never use it."""
    reference_gbps: float | None = None
    """The real rate that ``link_mbps`` stands for; None means ``plan.link_gbps``. Set it to
    the scenario's ``cluster.link_gbps`` so that plans whose ``link_gbps`` differs (a switch
    plan of 100 Gbps ports) share one time scale with the TopoOpt plan they are compared to."""
    run_dir: str = "/run/topolab"
    """Where the run lock and the state files of running networks live (tmpfs: a reboot
    forgets them, as it forgets the namespaces)."""
    lock_wait_s: float = 0.0
    """How long to wait for another run to release the lock before giving up."""
    destination_classes: bool = True
    """Enforce a per-destination allocation's rates with HTB classes (docs/emulation.md
    section 6); False keeps its planes' paths but shares each cable in one class, which is
    how the ablation measures multipath routing without the rates."""
    host_memory_mib: float = HOST_MEMORY_MIB
    """Memory one emulated host costs (its shell, namespace and link buffers), for the
    up-front check that the plan fits in this machine's memory."""
    machines: tuple[str, ...] = ()
    """ssh addresses of the machines to emulate the network over (docs/cluster.md); empty:
    this machine alone. The same address carries the VXLAN tunnels, so it must be one the
    other machines reach: never ``localhost`` or a loopback address."""
    ssh_user: str = DEFAULT_SSH_USER
    """The user ssh logs in as on every machine (it must be root there)."""
    ssh_identity: str | None = None
    """Private key file for ssh (None: ssh's own defaults)."""
    ssh_known_hosts: str | None = None
    """known_hosts file holding the machines' host keys (None: ssh's own defaults)."""

    @classmethod
    def from_any(cls, obj: Any | None) -> EmulationConfig:
        """Accept an `EmulationConfig`, the scenario loader's dataclass, a dict or None."""
        if obj is None:
            return cls()
        if isinstance(obj, cls):
            config = obj
        else:
            kwargs = {}
            for f in fields(cls):
                if isinstance(obj, dict):
                    if f.name in obj:
                        kwargs[f.name] = obj[f.name]
                elif hasattr(obj, f.name):
                    kwargs[f.name] = getattr(obj, f.name)
            if kwargs.get("machines") is not None:
                kwargs["machines"] = tuple(kwargs["machines"])
            for key in ("ssh_identity", "ssh_known_hosts"):  # the scenario's "" means unset
                if kwargs.get(key) == "":
                    kwargs[key] = None
            config = cls(**kwargs)
        config.check()
        return config

    def check(self) -> None:
        """Raise `EmulationInputError` naming the first bad field."""
        try:
            rate = float(self.link_mbps)
        except (TypeError, ValueError):
            raise EmulationInputError(f"emulation.link_mbps = {self.link_mbps!r}: not a number") from None
        if not rate > 0 or rate != rate or rate == float("inf"):
            raise EmulationInputError(f"emulation.link_mbps = {self.link_mbps!r}: must be a positive rate in Mbit/s")
        if not isinstance(self.mtu, int) or isinstance(self.mtu, bool) or not MTU_MIN <= self.mtu <= MTU_MAX:
            raise EmulationInputError(f"emulation.mtu = {self.mtu!r}: must be an integer from {MTU_MIN} to {MTU_MAX}")
        if self.reference_gbps is not None and not float(self.reference_gbps) > 0:
            raise EmulationInputError(f"emulation.reference_gbps = {self.reference_gbps!r}: must be a positive rate")
        if self.netem not in NETEM_MODES:
            raise EmulationInputError(f"emulation.netem = {self.netem!r}: must be one of {', '.join(NETEM_MODES)}")
        check_machines(self.machines, "emulation.machines")
        if not isinstance(self.ssh_user, str) or not self.ssh_user or any(c in self.ssh_user for c in " @:\t"):
            raise EmulationInputError(f"emulation.ssh_user = {self.ssh_user!r}: must be a user name")
        for key in ("ssh_identity", "ssh_known_hosts"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not value):
                raise EmulationInputError(f"emulation.{key} = {value!r}: must be a file path")


def check_machines(machines: Any, key: str) -> None:
    """Raise `EmulationInputError` naming ``key`` unless ``machines`` are distinct, non-empty
    ssh addresses that other machines can reach (no loopback: the address carries tunnels)."""
    if not isinstance(machines, (tuple, list)) or not all(isinstance(m, str) for m in machines):
        raise EmulationInputError(f"{key} = {machines!r}: must be a list of machine addresses")
    for m in machines:
        if not m or m != m.strip() or any(c in m for c in " ,@\t"):
            raise EmulationInputError(f"{key}: {m!r} is not a machine address (a host name or IP address)")
        if m.lower() in LOOPBACK_NAMES or _is_loopback(m):
            raise EmulationInputError(
                f"{key}: {m!r} is this machine's loopback; give the address the other machines reach it at"
            )
    if len(set(machines)) != len(machines):
        raise EmulationInputError(f"{key}: a machine is listed twice in {list(machines)}")


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False  # a host name; resolved when the network is built
