"""One emulated network over several machines, on Mininet Cluster Edition.

The engine is Mininet's Cluster Edition (``mininet.examples.cluster``, shipped as a module by
Debian 12's mininet 2.3.0): every node is a `ClusterHost`, the Cluster Edition's
``RemoteHost`` whose shell runs on its machine over ssh (``mnexec`` in a new namespace there;
``cmd`` and ``popen`` go through that machine; ``rcmd`` runs in the machine's root namespace),
and every cable a `ClusterLink`, the Cluster Edition's ``RemoteLink``. What we add, and why:

- **ssh**: the Cluster Edition's ``sudo -E -u user ssh`` is replaced by our multiplexed,
  time-bounded ssh (`emulator.cluster.ssh`), one master connection per machine.
- **VXLAN, not GRE**: a cable whose ends are on different machines is a VXLAN tunnel (the
  Cluster Edition's ``RemoteGRELink`` needs gretap, which this kernel lacks). One VNI per cable
  (``VNI_BASE + k`` for plan cable ``k``), UDP port 4789, unicast to the peer machine; the
  device is created in the machine's root namespace (where its UDP socket lives, on the
  underlay) *directly into* the host's namespace, with ``nolearning``: its one forwarding
  entry is the static default ``remote`` gives it (all-zero MAC to the peer machine), so a
  frame from elsewhere never becomes a route back. VXLAN adds 50 bytes (outer Ethernet 14, IP
  20, UDP 8, VXLAN 8), so on a 1500-byte underlay every cable, tunnelled or not, gets MTU
  1450: one MTU for the whole network, so no path has a smaller MTU than its first hop.
- **The underlay admits only the listed machines**: a tunnel's socket takes any datagram to
  UDP 4789 carrying one of its VNIs (1, 2, ...: easy to guess), so each machine gets, with its
  tunnels, an nftables table of the run (`state.filter_table`, ``inet topolab_<run id>``)
  whose input chain accepts UDP 4789 only from the other machines' underlay addresses and
  drops, and counts (`state.DROP_COUNTER`), every other; it matches nothing else (ssh and
  the control sockets forwarded over it pass untouched). Teardown and ``topolab clean
  --machines`` remove it. It does not stop a spoofed source address or anyone on a listed
  machine, and VXLAN is neither encrypted nor authenticated: the underlay must be a network
  you trust (docs/cluster.md section 7).
- **Batches, one round trip per machine**: the cables of a machine (veth pairs inside it,
  its ends of the tunnels, each end at its `addressing.cable_mac`), then every host's
  sysctls, addresses, permanent neighbours (no ARP, as on one machine) and routes (``ip -batch``:
  the lines `emulator.hostscripts` writes for a real server, from `emulator.hostconfig`'s
  sysctls and routes, one multipath route over parallel cables),
  HTB shaping (``tc -batch``, the cable's class as on one machine, `emulator.shaping`, but no
  class per destination: one FIFO queue per cable end, docs/emulation.md section 3) and
  the read-back are one shell script per machine (``nsenter -t <host pid> -n ...`` per host)
  sent over the machine's ssh; machines are configured in parallel. ``ClusterLink`` then only
  records the interfaces (Mininet's ``fast`` path): nothing is created twice.
- **cubic on every route, the cables' own included**: as on one machine (`emulator.hostconfig`),
  every route carries ``congctl cubic`` and a locked ``rto_min`` (`emulator.nlbatch.RTO_MIN_MS`),
  and each cable's connected /31 route is replaced by one that does: a namespace may only make
  default what the root namespace allows (often not cubic), so without it a connection bound to a cable's addresses (``topolab verify``'s
  iperf3) ran the inherited default, bbr here, which carried 82-94 of the 95.5 Mbit/s TCP
  maximum both ways at once (docs/cluster.md section 6). The sysctls the emulator needs fail the script if refused;
  only those `emulator.hostconfig` marks optional may be.

- **The workers' control channel, forwarded**: workers started on another machine reach the
  coordinator's ipc:// control socket through a Unix socket there that the machine's sshd
  forwards over our master connection (`ClusterNetwork.relay_control`, ``ssh -O forward -R``),
  and get their spec on stdin (`workers.coordinator`): no file is shared between machines;
  only the checkout and its venv must sit at the same path on each (docs/cluster.md).

Each machine's script first records the run's host shells there, with the driver's host
(`emulator.cluster.state`), so that ``topolab clean --machines`` can end what a killed run
left. Teardown ends, on every machine, every process in each of our hosts' namespaces (by
namespace: only our processes live there; the shells are matched by PID and start time),
then removes the run's filter table and that record; the kernel frees each
namespace with its last process and deletes its veth and VXLAN ends with it. Nothing is ever
cleaned by a broad name, and Mininet's ``cleanup`` (``mn -c`` on every machine) is never used.

``ClusterNetwork`` also offers what callers read from an `EmulatedNetwork` (``facts``,
``nodes``, ``netem``, ``plane_addresses``...: `emulator.interface.RunningNetwork`), so the commands take either; building,
reading back and tearing down over machines belong together, which takes the module past
300 lines.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
import socket
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from mininet.examples.cluster import RemoteHost, RemoteLink
from mininet.node import Node

from contract.emulation import EmulatedRates, EmulationConfig, emulated_rates
from contract.errors import RunError
from contract.limits import limit_s
from contract.network import Network
from contract.physics import ETHERNET_MTU, tunnel_mtu

from .. import shaping
from ..addressing import Port, identity, node_name, ports_of
from ..hostconfig import host_routes
from ..hostscripts import address_lines, neighbour_lines, route_line, sysctl_assignments
from ..interface import BuiltRates
from ..nsutil import process_id
from ..planes import NodePlanes
from ..state import RunLock, run_dir_path
from .ssh import Machine, SshOptions, check_machines
from .state import (
    DROP_COUNTER,
    control_socket,
    driver_host,
    filter_table,
    kill_script,
    record_script,
    state_file,
)

VXLAN_PORT = 4789  # IANA's VXLAN port
VNI_BASE = 1  # VNI 0 is legal but reads as "unset" in tools; cable k gets VNI_BASE + k
CONFIG_TIMEOUT_S = limit_s(20.0)  # one machine's whole configuration script (a 12-host machine: ~1 s)
TEARDOWN_TIMEOUT_S = limit_s(10.0)
STARTS_PER_MACHINE = 8  # host shells started at once on each machine: one ssh session each on its master
RESOLVE_TIMEOUT_S = 5.0  # a machine's name to its underlay address (the resolver's own retries)


class ClusterHost(RemoteHost):
    """The Cluster Edition's remote host, reached through `SshOptions` instead of sudo + ssh."""

    def __init__(self, name: str, machine: Machine, ssh: SshOptions, **params) -> None:
        self.machine, self.ssh = machine, ssh
        super().__init__(name, server=machine.name, user=ssh.user, serverIP=machine.address, **params)

    def _popen(self, cmd, sudo=True, tt=True, **params):
        if isinstance(cmd, str):
            cmd = cmd.split()
        remote = self.ssh.command(self.machine, tty=tt) + [shlex.join(cmd)]
        params.update(preexec_fn=os.setpgrp)  # a Ctrl-C here must not reach the ssh sessions
        return Node._popen(self, remote, **params)


class ClusterLink(RemoteLink):
    """The Cluster Edition's link whose interfaces the machine's batch has already made (a veth
    pair, or the two ends of a VXLAN tunnel): it only records them."""

    def __init__(self, node1: ClusterHost, node2: ClusterHost, vni: int | None, **kwargs) -> None:
        self.vni = vni
        super().__init__(node1, node2, fast=True, **kwargs)

    def makeIntfPair(self, *args, **kwargs) -> None:
        return None

    def stop(self) -> None:  # the interfaces go with their namespaces
        return None


@dataclass
class ClusterNetwork(BuiltRates):
    """``network`` built over ``machines``: node ``u`` runs on ``machines[assignment[u]]``,
    at the rates of ``config`` (its ``link_mbps`` and ``reference_gbps``; every cable gets the
    tunnels' MTU, whatever ``config.mtu`` says). ``rates``, ``time_scale``, ``link_mbps``,
    ``reference_gbps``, ``mtu``, ``link_rate_bps`` and ``capacities`` mean what they mean on an
    `emulator.net.EmulatedNetwork`."""

    network: Network
    assignment: Sequence[int]
    machines: list[Machine]
    ssh: SshOptions
    config: EmulationConfig = field(default_factory=EmulationConfig)
    underlay_mtu: int = ETHERNET_MTU
    hosts: list[ClusterHost] = field(default_factory=list)
    links: list[ClusterLink] = field(default_factory=list)
    run_id: str = field(default_factory=process_id)  # the driver: <pid>-<start time>
    driver: str = field(default_factory=driver_host)  # the driver's machine, in each state file
    ports: list[list[Port]] = field(default_factory=list, init=False)  # per node, as addressing.ports_of
    rates: EmulatedRates = field(init=False)  # the one rate decision (contract.emulation.emulated_rates)
    link_rate_bps: list[int] = field(default_factory=list, init=False)  # shaped bit/s per cable
    underlay: list[str] = field(default_factory=list, init=False)  # per machine: its tunnels' IPv4 address
    # what `EmulatedNetwork.facts` says, for the same readers (topolab verify, run)
    facts: dict = field(default_factory=dict, init=False)
    _relays: dict[tuple[int, str], str] = field(default_factory=dict, init=False)  # (machine, path): remote
    _lock: RunLock | None = field(default=None, init=False)  # this machine's run lock, as one machine's network
    _configured: bool = field(default=False, init=False)  # configuration scripts sent: every machine has a record
    netem = False  # no link latency: netem is not applied across machines (docs/cluster.md)
    delay_us = 0.0

    def __post_init__(self) -> None:
        # one MTU for the whole network, tunnelled or not (module docstring)
        self.rates = emulated_rates(self.network, self.config, mtu=tunnel_mtu(self.underlay_mtu))
        self.link_rate_bps = self.rates.link_rate_bps(self.network.links)

    @property
    def nodes(self) -> int:
        return self.network.nodes

    @property
    def servers(self) -> int:
        return self.network.servers

    def __enter__(self) -> ClusterNetwork:
        t0 = time.perf_counter()
        # the driver's run lock, as a one-machine network takes it (--run-dir, --wait): two
        # drivers on this machine never build at once
        self._lock = RunLock(run_dir_path(self.config.run_dir))
        self._lock.acquire(self.config.lock_wait_s)
        try:
            self.build()
        except BaseException:
            self.stop()
            raise
        self.facts.update(
            self.rate_facts()
            | {
                "machines": [m.name for m in self.machines],
                "tunnels": sum(self.crosses(k) for k in range(len(self.network.links))),
                "netem": self.netem,
                "delay_us": self.delay_us,
                "latency_note": "netem is not applied across machines: links add no latency",
                "build_s": time.perf_counter() - t0,
            }
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- building -------------------------------------------------------------------------
    def build(self) -> None:
        net = self.network
        if len(self.assignment) != net.nodes or not set(self.assignment) <= set(range(len(self.machines))):
            raise ValueError(f"assignment must name one of {len(self.machines)} machines for each of {net.nodes} nodes")
        check_machines(self.machines, self.ssh)
        self.underlay = [underlay_address(m) for m in self.machines]
        names = [node_name(u, net.servers) for u in range(net.nodes)]

        def start(u: int) -> ClusterHost:
            return ClusterHost(names[u], self.machines[self.assignment[u]], self.ssh)

        # submitted round robin over the machines, so each has STARTS_PER_MACHINE in flight
        turn, seen = [0] * net.nodes, [0] * len(self.machines)
        for u, m in enumerate(self.assignment):
            turn[u], seen[m] = seen[m], seen[m] + 1
        order = sorted(range(net.nodes), key=lambda u: (turn[u], u))
        with ThreadPoolExecutor(STARTS_PER_MACHINE * len(self.machines)) as pool:
            submitted = {u: pool.submit(start, u) for u in order}
        futures = [submitted[u] for u in range(net.nodes)]
        failed = []
        for u, future in enumerate(futures):
            try:
                self.hosts.append(future.result())
            except Exception as e:  # Mininet raises plain Exception; keep the others to end them
                failed.append(f"{names[u]} on {self.machines[self.assignment[u]].name}: {e}")
        if failed:
            raise RunError(f"{len(failed)} host shell(s) did not start: {failed[0]}")
        self.ports = ports_of(net.links, net.nodes, net.servers)
        self._configured = True
        self._on_machines(self._config_script, CONFIG_TIMEOUT_S, "configuration")
        for k, link in enumerate(net.links):
            a, b = self._port(link.a, k), self._port(link.b, k)
            vni = VNI_BASE + k if self.crosses(k) else None
            self.links.append(
                ClusterLink(self.hosts[link.a], self.hosts[link.b], vni, intfName1=a.ifname, intfName2=b.ifname)
            )
        self.check_shaping()

    def crosses(self, k: int) -> bool:
        link = self.network.links[k]
        return self.assignment[link.a] != self.assignment[link.b]

    def _port(self, node: int, k: int) -> Port:
        return next(p for p in self.ports[node] if p.link == k)

    def _on_machines(self, script_of, timeout_s: float, what: str) -> list[str]:
        def run(m: int) -> str:
            return self.ssh.run(self.machines[m], script_of(m), timeout_s, what)

        with ThreadPoolExecutor(max(1, len(self.machines))) as pool:
            return list(pool.map(run, range(len(self.machines))))

    def _config_script(self, m: int) -> str:
        """Everything machine ``m`` must do, as one shell script (docstring above)."""
        net = self.network
        mine = {u for u in range(net.nodes) if self.assignment[u] == m}
        links = []
        for k, link in enumerate(net.links):
            a, b = self._port(link.a, k), self._port(link.b, k)
            pa, pb = self.hosts[link.a].pid, self.hosts[link.b].pid
            if link.a in mine and link.b in mine:
                links.append(
                    f"link add name {a.ifname} netns {pa} mtu {self.mtu} address {a.mac} type veth "
                    f"peer name {b.ifname} netns {pb} mtu {self.mtu} address {b.mac}"
                )
            for end, peer, pid in ((a, link.b, pa), (b, link.a, pb)):
                if end.node in mine and peer not in mine:
                    here, there = self.underlay[m], self.underlay[self.assignment[peer]]
                    links.append(
                        f"link add name {end.ifname} netns {pid} mtu {self.mtu} address {end.mac} "
                        f"type vxlan id {VNI_BASE + k} "
                        f"local {here} remote {there} dstport {VXLAN_PORT} ttl 64 nolearning"
                    )
        lines = ["set -e", record_script(self.run_id, [self.hosts[u].pid for u in sorted(mine)], self.driver)]
        peers = [a for i, a in enumerate(self.underlay) if i != m and a != self.underlay[m]]
        lines.append(
            'command -v nft >/dev/null || { echo "nft not found: install nftables (scripts/setup.sh)" >&2; exit 1; }'
        )
        lines.append(_heredoc("nft -f -", underlay_filter(self.run_id, peers)))  # before any tunnel exists
        lines.append(_heredoc("ip -batch -", links))
        for u in sorted(mine):
            host, ports = self.hosts[u], self.ports[u]
            ns = f"nsenter -t {host.pid} -n"
            required, optional = sysctl_assignments([p.ifname for p in ports])
            lines.append(f"{ns} sysctl -q -w {shlex.join(required)} >/dev/null")  # a failure ends the script
            lines.append(f"{ns} sysctl -q -e -w {shlex.join(optional)} >/dev/null 2>&1 || true")
            # the lines `emulator.hostscripts` writes for a real server, each interface by its own name
            dev = {p.ifname: p.ifname for p in ports}
            routes = host_routes(u, ports, net.next_hop, self.host_name)
            ip = address_lines(u, ports, NodePlanes(), self.mtu, dev) + neighbour_lines(ports, dev)
            ip += [route_line(r, identity(u), dev) for r in routes]
            lines.append(_heredoc(f"{ns} ip -batch -", ip))
            tc = shaping.tc_batch(
                [shaping.Shaping(p.ifname, self.link_rate_bps[p.link]) for p in ports], use_netem=False
            )
            lines.append(_heredoc(f"{ns} tc -batch -", tc.splitlines()))
        return "\n".join(lines) + "\n"

    def check_shaping(self) -> None:
        """Read every cable end's HTB class 1:1 back from its machine (``tc class show dev``
        per cable end: this tc prints HTB classes as text only, `shaping.htb_rates_from_text`);
        a cable end without it or at another rate fails the build, one line for all."""

        def script(m: int) -> str:
            return "".join(
                f"echo '#{u} {p.ifname}'; nsenter -t {self.hosts[u].pid} -n tc class show dev {p.ifname}\n"
                for u in range(self.network.nodes)
                if self.assignment[u] == m
                for p in self.ports[u]
            )

        shown: dict[tuple[int, str], str] = {}
        for out in self._on_machines(script, CONFIG_TIMEOUT_S, "shaping read-back"):
            key = None
            for line in out.splitlines():
                if line.startswith("#"):
                    node, ifname = line[1:].split()
                    key = (int(node), ifname)
                    shown[key] = ""
                elif key is not None:
                    shown[key] += line + "\n"
        problems = []
        for u in range(self.network.nodes):
            for p in self.ports[u]:
                want = self.link_rate_bps[p.link]
                got = shaping.htb_rates_from_text(shown.get((u, p.ifname), "")).get(shaping.CABLE_CLASS)
                if got is None or abs(got - want) > want * 0.001:
                    problems.append(f"{p.ifname}: htb rate {got} bit/s, wanted {want} bit/s")
        if problems:
            raise RunError(f"shaping not as planned on {len(problems)} cable end(s): {'; '.join(problems[:3])}")

    # ---- using ----------------------------------------------------------------------------
    def relay_control(self, node: int, path: str) -> str:
        """The path, on ``node``'s machine, of a socket leading to the Unix socket ``path``
        here (the workers' control socket): the machine's sshd listens there and carries each
        connection over our master connection (`SshOptions.forward_socket`). One per machine
        and socket; they go with the masters at teardown, and their files with the run's state.
        """
        m = self.assignment[node]
        if (m, path) not in self._relays:
            remote = control_socket(self.run_id, len(self._relays))
            self.ssh.forward_socket(self.machines[m], remote, path)
            self._relays[(m, path)] = remote
        return self._relays[(m, path)]

    def popen(self, i: int, argv: list[str], **kw) -> subprocess.Popen:
        """Start ``argv`` in node ``i``'s namespace on its machine (the host's ``popen``), its
        exit status coming back through ssh: ``mnexec -a`` without Mininet's ``-d``, which
        forks when it leads its process group (as it does under sshd) and exits 0 at once."""
        kw.setdefault("mncmd", ["mnexec", "-a", str(self.hosts[i].pid)])
        return self.hosts[i].popen(argv, **kw)

    def host_address(self, node: int) -> str:
        return identity(node)

    def host_name(self, node: int) -> str:
        return node_name(node, self.network.servers)

    def plane_addresses(self, node: int) -> dict[int, str]:
        """No planes: a per-destination allocation is not built across machines."""
        return {}

    def cable_tx_bytes(self) -> dict[tuple[int, int], int]:
        """``{(node, peer): bytes sent}`` over every cable, read on each machine in one round
        trip (what `emulator.counters.cable_tx_bytes` reads locally on one machine)."""

        def script(m: int) -> str:
            return "".join(
                f"echo '#{u}'; nsenter -t {self.hosts[u].pid} -n ip -s -j link show\n"
                for u in range(self.network.nodes)
                if self.assignment[u] == m
            )

        out: dict[tuple[int, int], int] = {}
        for text in self._on_machines(script, CONFIG_TIMEOUT_S, "cable counters"):
            node = -1
            for line in text.splitlines():
                if line.startswith("#"):
                    node = int(line[1:])
                    continue
                sent = {i["ifname"]: i["stats64"]["tx"]["bytes"] for i in json.loads(line or "[]") if "stats64" in i}
                for p in self.ports[node]:
                    if p.ifname in sent:
                        out[(node, p.peer)] = out.get((node, p.peer), 0) + int(sent[p.ifname])
        return out

    # ---- teardown -------------------------------------------------------------------------
    def stop(self) -> None:
        """End every process in our hosts' namespaces on every machine, then the shells."""
        t0 = time.perf_counter()
        try:
            self._stop()
        finally:
            self.facts["teardown_s"] = time.perf_counter() - t0
            if self._lock is not None:
                self._lock.release()
                self._lock = None

    def _stop(self) -> None:
        started = [h for h in self.hosts if h.pid]
        failures = []
        # every machine with a host shell, and, once configuration began, every machine (one
        # without hosts still has the run's record and filter table)
        touched = [m for m in self.machines if self._configured or any(h.machine == m for h in started)]
        for machine in touched:
            # a machine whose configuration never ran has no state file: record its shells now
            pids = [h.pid for h in started if h.machine == machine]
            record = record_script(self.run_id, pids, self.driver)
            script = f"if [ ! -f {shlex.quote(state_file(self.run_id))} ]; then\n{record}fi\n"
            try:
                self.ssh.run(machine, script + kill_script(self.run_id, self.driver), TEARDOWN_TIMEOUT_S, "teardown")
            except RunError as e:
                failures.append(str(e))
        for h in started:
            if h.shell is not None and h.shell.poll() is None:
                h.shell.kill()
                h.shell.wait(TEARDOWN_TIMEOUT_S)
        for machine in self.machines:
            self.ssh.exit_master(machine)
        self.hosts, self.links, self._relays, self._configured = [], [], {}, False
        if failures:
            raise RunError("; ".join(failures))


def underlay_address(machine: Machine) -> str:
    """The IPv4 address ``machine``'s tunnels use: its address, resolved here if it is a name
    (``ip link add ... type vxlan`` takes addresses only). A loopback address is refused:
    the other machines cannot send to it."""
    pool = ThreadPoolExecutor(1)  # getaddrinfo has no timeout of its own: bound the wait here
    future = pool.submit(socket.getaddrinfo, machine.address, None, socket.AF_INET, socket.SOCK_DGRAM)
    try:
        address = future.result(timeout=RESOLVE_TIMEOUT_S)[0][4][0]
    except (OSError, IndexError, TimeoutError) as e:
        raise RunError(f"machine {machine.name} ({machine.address}): no IPv4 address: {e or 'timed out'}") from None
    finally:
        pool.shutdown(wait=False)
    if ipaddress.ip_address(address).is_loopback:
        raise RunError(
            f"machine {machine.name} ({machine.address}) resolves to loopback {address}; "
            "give the address the other machines reach it at"
        )
    return address


def underlay_filter(run_id: str, peers: Sequence[str]) -> list[str]:
    """``nft -f`` lines of the run's table on one machine (module docstring): its input chain
    accepts UDP ``VXLAN_PORT`` from the IPv4 addresses ``peers`` (the other machines' underlay
    addresses) and drops every other datagram to that port, IPv6 included, counting them in
    the table's counter `state.DROP_COUNTER`; it matches nothing else."""
    addresses = sorted({str(ipaddress.IPv4Address(a)) for a in peers}, key=ipaddress.IPv4Address)
    elements = [f"    elements = {{ {', '.join(addresses)} }}"] if addresses else []
    return [
        f"table inet {filter_table(run_id)} {{",
        "  set machines {",
        "    type ipv4_addr",
        *elements,
        "  }",
        f"  counter {DROP_COUNTER} {{",
        "  }",
        "  chain input {",
        "    type filter hook input priority filter; policy accept;",
        f"    udp dport {VXLAN_PORT} ip saddr @machines accept",
        f"    udp dport {VXLAN_PORT} counter name {DROP_COUNTER} drop",
        "  }",
        "}",
    ]


def _heredoc(command: str, lines: Sequence[str]) -> str:
    body = "\n".join(lines)
    return f"{command} <<'TOPOLAB_EOF'\n{body}\nTOPOLAB_EOF"
