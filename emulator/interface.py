"""`RunningNetwork`: what a command may use of a network that is up, on one machine
(`emulator.EmulatedNetwork`) or over several (`emulator.cluster.ClusterNetwork`).

Both classes offer these names with the same meaning, so a command (``topolab run``,
``collective``, ``verify``, ``place --run``, ``alloc --measure``) takes either without asking
which it got. What only one machine offers (``live`` cable changes, ``mininet`` for Mininet's
CLI, ``plane_address`` of a per-destination allocation) is not part of it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from contract.emulation import EmulatedRates
from contract.network import Network, cable_capacities
from contract.physics import tcp_goodput_fraction

from .addressing import Port


@runtime_checkable
class RunningNetwork(Protocol):
    """A built network: its plan, its rates and MTU, and how to run processes in its hosts.
    Everything is read-only to a command; node numbers are positional."""

    @property
    def network(self) -> Network:
        """The `contract.network.Network` it builds."""
        ...

    @property
    def facts(self) -> dict[str, Any]:
        """What was built and how long it took (``time_scale``, ``mtu``, ``rates_mbps``,
        ``build_s``, ``teardown_s`` once torn down, ...); recorded in results as they are."""
        ...

    @property
    def netem(self) -> bool:
        """Whether the links carry the plan's latency (netem); False: none at all."""
        ...

    @property
    def delay_us(self) -> float:
        """The dilated latency each link adds (0 without netem)."""
        ...

    @property
    def link_mbps(self) -> float:
        """The emulated rate of a link of the reference rate."""
        ...

    @property
    def ports(self) -> Sequence[Sequence[Port]]:
        """Per node, its cable ends (interface names and addresses)."""
        ...

    @property
    def hosts(self) -> Sequence[Any]:
        """Per node, its Mininet host (``cmd`` runs a shell command in it)."""
        ...

    @property
    def servers(self) -> int: ...

    @property
    def nodes(self) -> int: ...

    @property
    def mtu(self) -> int:
        """The MTU every cable has (on several machines, the tunnels' 1450)."""
        ...

    @property
    def time_scale(self) -> float:
        """Emulated seconds per planned second (docs/emulation.md section 2)."""
        ...

    @property
    def link_rate_bps(self) -> Sequence[float]:
        """The shaped rate of every cable, in the order of ``network.links``."""
        ...

    @property
    def reference_gbps(self) -> float:
        """The real rate ``link_mbps`` stands for."""
        ...

    @property
    def rates(self) -> EmulatedRates:
        """The rates and MTU it was built at (`contract.emulation.emulated_rates`), what every
        prediction of a measured run takes."""
        ...

    @property
    def capacities(self) -> dict[tuple[int, int], float]:
        """Directed goodput of its cables, bytes/s, parallel cables summed
        (`contract.network.cable_capacities` at its rates and MTU)."""
        ...

    def host_address(self, i: int, /) -> str:
        """Identity address of node ``i``, reachable from every host."""
        ...

    def host_name(self, i: int, /) -> str: ...

    def popen(self, i: int, argv: list[str], **kw: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` in node ``i``'s network namespace, on its machine."""
        ...

    def plane_addresses(self, i: int, /) -> dict[int, str]:
        """``{plane: source address}`` of every allocation plane node ``i`` sends on."""
        ...

    def relay_control(self, i: int, path: str, /) -> str | None:
        """Where node ``i``'s workers reach the Unix socket ``path`` of this process (None:
        at ``path`` itself, the host shares this machine's files)."""
        ...

    def cable_tx_bytes(self) -> dict[tuple[int, int], int]:
        """``{(node, peer): bytes sent}`` over every cable so far."""
        ...


class BuiltRates:
    """The rate facts of a built network, read from its ``rates`` (the one decision,
    `contract.emulation.emulated_rates`) and its cables' current ``link_rate_bps`` (live changes
    update them); both network classes take them from here."""

    rates: EmulatedRates
    link_rate_bps: list[int]
    network: Network

    @property
    def time_scale(self) -> float:
        """Emulated seconds per planned second (docs/emulation.md section 2)."""
        return self.rates.time_scale

    @property
    def link_mbps(self) -> float:
        """The emulated rate of a link of the reference rate."""
        return self.rates.link_mbps

    @property
    def reference_gbps(self) -> float:
        """The real rate ``link_mbps`` stands for."""
        return self.rates.reference_gbps

    @property
    def mtu(self) -> int:
        """The MTU of every cable (on several machines, the tunnels')."""
        return self.rates.mtu

    @property
    def capacities(self) -> dict[tuple[int, int], float]:
        """Directed goodput (bytes/s) of the cables at their shaped rates and MTU, parallel
        cables summed (`contract.network.cable_capacities`)."""
        return cable_capacities(self.network.links, self.mtu, self.link_rate_bps)

    def rate_facts(self) -> dict[str, Any]:
        """The facts every built network records (results.json's ``emulation``): its shape,
        rates, time scale and MTU; each network class adds its own (latency, machines)."""
        return {
            "servers": self.network.servers,
            "switch_nodes": self.network.nodes - self.network.servers,
            "cables": len(self.network.links),
            "link_mbps": self.link_mbps,
            "reference_gbps": self.reference_gbps,
            "time_scale": self.time_scale,
            "mtu": self.mtu,
            "rates_mbps": sorted({r / 1e6 for r in self.link_rate_bps}),
            "tcp_max_fraction": tcp_goodput_fraction(self.mtu),
            "plan_latency_us": float(self.network.latency_us),
        }
