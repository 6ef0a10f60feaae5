"""The emulator's configuration of each node as a shell script a user runs on a real server.

`host_scripts` (network, config) gives ``{"h0.sh": text, ...}``: for every node of the
network, what the emulator configures in that node's namespace (`emulator.hostconfig`,
`emulator.planes`, `emulator.shaping`), as ``ip -batch`` and ``tc -batch`` here-documents a
user runs as root on the server the node stands for (``sh h0.sh``). The decisions are the
emulator's own functions, not a second copy: the sysctls (`hostconfig.host_sysctls`), the
loopback addresses (`hostconfig.loopback_addresses`), the routes with their next hops, tables
and multipath sets (`hostconfig.host_routes`, which the emulator sends over netlink), their
metrics (`nlbatch.route_metrics_text`: ``congctl cubic``, ``rto_min`` locked), the plane rules
(`planes.node_planes`), the cable ends' addresses, names and Ethernet addresses
(`addressing.ports_of`), the MTU and rates (`contract.emulation.emulated_rates`) and the HTB
classes (`cable_end_shaping`: `cable.cable_shaping` with the allocation's
`planes.destination_rates` and the shares of `cable.routed_destinations`, rendered by
`shaping.tc_batch`).

Each script:
- names the node's cable ends as shell variables at the top, ``ETH0=${ETH0:-h0-eth0}`` (its
  j-th cable end is ``ETH<j>``, the emulator's ``<node>-eth<j>``), so a user maps them to the
  server's NICs by setting the variables (``ETH0=enp65s0f0 ETH1=... sh h0.sh``); it checks
  each is a plain interface name that exists here, and that no two are the same, before it
  changes anything;
- sets the emulator's sysctls (forwarding on, reverse-path filtering off, no ICMP rate limit,
  no tail loss probes); those the emulator lets fail (`hostconfig.OPTIONAL_SYSCTLS`) may fail
  here too;
- gives each cable end its MTU and, unless ``STATIC_NEIGHBOURS=no``, its Ethernet address
  (`addressing.cable_mac`) and a permanent neighbour entry for the other end (no ARP, as in
  the emulator; ``no`` keeps the NICs' own Ethernet addresses and lets ARP find the peers);
- adds the identity (and plane) addresses on ``lo``, each cable end's /31 and connected
  route with the emulator's metrics, the plane rules, and every route;
- shapes every cable end with HTB as the emulator does, without netem (a real cable has a
  latency of its own).

Idempotent: running a script again leaves the same state. Addresses, routes and neighbours
are set with ``replace``; each plane rule is deleted (where present) before it is added; each
cable end's root qdisc is deleted (where present) and built again, so its classes are exactly
the plan's (that cable end is unshaped for that moment). A script adds and replaces what the
plan has; it does not remove what an earlier, different plan added.

Every word in the commands is a generated name, an address from `emulator.addressing`, a
number or one of the interface variables; `check_text` refuses any other character, so
nothing a plan or a user supplies reaches the shell but the variables, which the script checks.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace

from contract.emulation import EmulatedRates, emulated_rates
from contract.network import Network

from . import nlbatch, shaping
from .addressing import Port, identity, node_name, ports_of
from .cable import cable_shaping, shared_classes
from .config import EmulationConfig
from .errors import EmulationError
from .hostconfig import CUBIC, OPTIONAL_SYSCTLS, HostRoute, host_routes, host_sysctls, loopback_addresses, subnet31
from .planes import RULE_PRIORITY, NodePlanes, destination_rates, node_planes
from .validate import validate

NEIGHBOURS_VARIABLE = "STATIC_NEIGHBOURS"
"""The variable that, set to ``no``, leaves the NICs' Ethernet addresses and ARP as they are."""
IFNAME_MAX = 15
"""The longest interface name Linux takes (``IFNAMSIZ`` - 1)."""
_SAFE_LINE = re.compile(r"(?:[A-Za-z0-9 ./:_=-]|\$\{ETH[0-9]+\})*")
_UNSAFE_LABEL = re.compile(r"[^A-Za-z0-9._/+-]")


def port_variable(j: int) -> str:
    """The shell variable naming a node's ``j``-th cable end (its emulated ``<node>-eth<j>``)."""
    return f"ETH{j}"


def cable_end_shaping(network: Network, config: EmulationConfig) -> list[list[shaping.Shaping]]:
    """Per node, what each of its cable ends carries, as `emulator.net.EmulatedNetwork`
    shapes it without netem (its ``shaping_of(u, 0.0)``): the cable's class at its emulated
    rate, a class per destination at the allocation's planned rate where
    ``config.destination_classes``, and equal shares of the rest where ``config.fair_queues``
    (a class per destination, or per connection with ``config.packets = "frames"``)."""
    rates = emulated_rates(network, config)
    servers = int(network.servers)
    ports = ports_of(network.links, network.nodes, servers)
    link_rate_bps = rates.link_rate_bps(network.links)
    planned = destination_rates(network, ports, rates.bps_per_gbps) if config.destination_classes else {}
    shared = shared_classes(network.next_hop, ports, servers, config)
    return [
        cable_shaping(
            ports[u],
            link_rate_bps,
            0.0,
            {ifname: r for (w, ifname), r in planned.items() if w == u},
            *shared.of(u),
            shared.borrow,
            config.frame_bytes(rates.mtu),
        )
        for u in range(network.nodes)
    ]


def host_scripts(network: Network, config: EmulationConfig | None = None, plan_name: str = "") -> dict[str, str]:
    """``{"<node>.sh": script}`` for every node of ``network`` (servers ``h<i>``, switch
    nodes ``s<j>``: the forwarding node the emulator puts where the plan has a switch), at
    the rates and MTU of ``config`` (`contract.emulation.emulated_rates`: the emulator's
    dilated rates; a config whose ``link_mbps`` is the plan's ``link_gbps`` in Mbit/s gives
    the plan's own). ``plan_name`` only labels the headers (characters other than letters,
    digits and ``._/+-`` become ``_``). Raises `EmulationInputError` on a network the
    emulator refuses (`emulator.validate`)."""
    config = EmulationConfig() if config is None else config
    validate(network, config, available_mib=math.inf)  # nothing is built here: no memory check
    servers = int(network.servers)
    ports = ports_of(network.links, network.nodes, servers)
    planes = node_planes(network)
    rates = emulated_rates(network, config)
    shaped = cable_end_shaping(network, config)
    label = _UNSAFE_LABEL.sub("_", plan_name)[:200]
    # the variable of every cable end at its own node, for the headers' "to h5's ETH2"
    variable_of = {(p.link, p.node): port_variable(j) for node_ports in ports for j, p in enumerate(node_ports)}

    def name_of(v: int) -> str:
        return node_name(v, servers)

    scripts = {}
    for u in range(network.nodes):
        dev = {p.ifname: "${" + port_variable(j) + "}" for j, p in enumerate(ports[u])}
        routes = host_routes(u, ports[u], network.next_hop, name_of, planes[u])
        cables = [
            f"{port_variable(j)}: {p.address}/31, cable {p.link} to {name_of(p.peer)}'s "
            f"{variable_of[p.link, p.peer]} ({p.peer_address}), {network.links[p.link].gbps:g} Gbit/s planned, "
            f"shaped at {rates.rate_bps(network.links[p.link].gbps) / 1e6:g} Mbit/s"
            for j, p in enumerate(ports[u])
        ]
        header = _header(u, name_of(u), u < servers, label, rates, cables, len(routes), planes[u])
        tc = shaping.tc_batch([replace(s, ifname=dev[s.ifname]) for s in shaped[u]], use_netem=False)
        scripts[f"{name_of(u)}.sh"] = _script(
            f"{name_of(u)}.sh",
            header,
            ports[u],
            dev,
            address_lines(u, ports[u], planes[u], rates.mtu, dev, config.frames)
            + [route_line(r, identity(u), dev) for r in routes],
            rule_lines(planes[u]),
            tc.splitlines(),
        )
    return scripts


def address_lines(
    u: int, ports: Sequence[Port], planes: NodePlanes, mtu: int, dev: Mapping[str, str], frames: bool = False
) -> list[str]:
    """``ip -batch`` lines of node ``u``'s addresses: ``lo`` up with its identity and plane
    addresses, each cable end (``dev[ifname]``: how the script names it) at ``mtu`` (with
    ``frames``, TCP's packets too: ``gso_max_size``, as `emulator.cable.make_cables`), up, with
    its /31 and its connected route again with the emulator's metrics (`emulator.hostconfig`)."""
    metrics = nlbatch.route_metrics_text(CUBIC)
    lines = ["link set dev lo up"] + [f"addr replace {a}/32 dev lo" for a in loopback_addresses(u, planes)]
    for p in ports:
        d = dev[p.ifname]
        lines += [
            f"link set dev {d} mtu {mtu}{f' gso_max_size {mtu}' if frames else ''} up",
            f"addr replace {p.address}/31 dev {d}",
            f"route replace {subnet31(p.address)}/31 dev {d} proto kernel scope link src {p.address} {metrics}",
        ]
    return lines


def route_line(route: HostRoute, src: str, dev: Mapping[str, str]) -> str:
    """The ``ip -batch`` line of one `hostconfig.HostRoute` from preferred source ``src``,
    ``proto static`` and the emulator's metrics as its netlink route; over parallel cables one
    multipath route (``ip`` takes the next hops last)."""
    metrics = nlbatch.route_metrics_text(CUBIC)
    table = "" if route.table == nlbatch.MAIN_TABLE else f" table {route.table}"
    to = f"route replace {route.dst}/{route.dst_len}"
    if len(route.cables) == 1:
        c = route.cables[0]
        return f"{to} via {c.peer_address} dev {dev[c.ifname]}{table} proto static src {src} {metrics}"
    hops = "".join(f" nexthop via {c.peer_address} dev {dev[c.ifname]}" for c in route.cables)
    return f"{to}{table} proto static src {src} {metrics}{hops}"


def sysctl_assignments(ifnames: Sequence[str]) -> tuple[list[str], list[str]]:
    """The ``key=value`` words of ``sysctl -w`` for a node whose cable ends are ``ifnames``
    (`hostconfig.host_sysctls`, keys as ``/proc/sys`` paths, which sysctl takes): those that
    must be set, and those the emulator goes on without (`hostconfig.OPTIONAL_SYSCTLS`)."""
    sysctls = host_sysctls(ifnames)
    required = [f"{k}={v}" for k, v in sysctls.items() if k not in OPTIONAL_SYSCTLS]
    optional = [f"{k}={v}" for k, v in sysctls.items() if k in OPTIONAL_SYSCTLS]
    return required, optional


def rule_lines(planes: NodePlanes) -> list[str]:
    """The selector and action of each plane rule of a node (after ``rule add`` or ``rule del``)."""
    return [f"from {address}/32 lookup {table} priority {RULE_PRIORITY}" for address, table in planes.rules]


def neighbour_lines(ports: Sequence[Port], dev: Mapping[str, str]) -> list[str]:
    """``ip -batch`` lines of the permanent neighbour entry of each cable end's other end."""
    return [f"neigh replace {p.peer_address} lladdr {p.peer_mac} dev {dev[p.ifname]} nud permanent" for p in ports]


def check_text(lines: Sequence[str]) -> None:
    """Raise `EmulationError` on a command line that holds anything but letters, digits,
    spaces, ``./:_=-`` and the interface variables ``${ETH<j>}`` (a fault of this module: every
    word is generated)."""
    for line in lines:
        if not _SAFE_LINE.fullmatch(line):
            raise EmulationError(f"host script: refusing to write the command {line!r}")


def _header(
    u: int,
    name: str,
    server: bool,
    label: str,
    rates: EmulatedRates,
    cables: list[str],
    routes: int,
    planes: NodePlanes,
) -> list[str]:
    kind = "server" if server else "forwarding node (where the plan has a switch)"
    plan = f" of plan {label}" if label else ""
    variables = " ".join(f"{port_variable(j)}=<nic>" for j in range(len(cables)))
    with_planes = f" and {len(planes.planes)} plane addresses" if planes.planes else ""
    return [
        "#!/bin/sh",
        f"# {name}.sh: the Linux configuration of {kind} {name} (node {u}){plan}:",
        "# the emulator's own configuration of that node (emulator/hostscripts.py).",
        "#",
        "# Run as root on that machine, each ETH<j> set to the NIC cabled as listed below:",
        f"#   {variables} sh {name}.sh",
        f"# {NEIGHBOURS_VARIABLE}=no keeps the NICs' own Ethernet addresses and lets ARP find the peers.",
        "#",
        f"# Cables (MTU {rates.mtu}; {rates.link_mbps:g} Mbit/s shaped per {rates.reference_gbps:g} Gbit/s planned):",
        *(f"#   {c}" for c in cables),
        "#",
        f"# Sets: forwarding and the emulator's other sysctls; its identity {identity(u)}/32{with_planes} on lo;",
        f"# each cable end's MTU, /31 and permanent neighbour; {routes} routes; {len(planes.rules)} plane rules;",
        "# HTB on each cable end, with a class per destination.",
        "# Idempotent: running it again leaves the same state (replace for addresses, routes and",
        "# neighbours; plane rules and root qdiscs deleted where present, then added).",
    ]


def _script(
    name: str,
    header: list[str],
    ports: Sequence[Port],
    dev: Mapping[str, str],
    ip: list[str],
    rules: list[str],
    tc: list[str],
) -> str:
    """One node's script: the header, the variables and their checks, then the commands in
    the order the emulator gives them (sysctls; Ethernet addresses; addresses and routes;
    rules; neighbours; shaping)."""
    required, optional = sysctl_assignments(list(dev.values()))
    neighbours = neighbour_lines(ports, dev)
    check_text([*ip, *rules, *neighbours, *required, *optional, *tc, *(p.mac for p in ports)])
    out = [*header, "set -eu", "", *_variables(name, ports, dev)]
    out += ["", "# forwarding on, and the other sysctls the emulator sets in every host"]
    out += _continued("sysctl -q -w", [f'"{s}"' for s in required])
    out += ["# these the emulator goes on without, too"]
    out += _continued("sysctl -q -e -w", [f'"{s}"' for s in optional], " >/dev/null 2>&1 || true")
    if ports:
        out += ["", f'if [ "${NEIGHBOURS_VARIABLE}" = yes ]; then']
        out.append("    # each cable end at the Ethernet address its peer's permanent neighbour entry names")
        for p in ports:
            d = f'"{dev[p.ifname]}"'
            out.append(
                f'    ip -o link show dev {d} | grep -q " link/ether {p.mac} " || ip link set dev {d} address {p.mac}'
            )
        out.append("fi")
    out += ["", "# addresses, cable ends up, connected routes, then every route"]
    out += _heredoc("ip -batch -", ip)
    if rules:
        out += ["", f"# plane rules (priority {RULE_PRIORITY}): deleted where present, then added once"]
        out += _heredoc("ip -force -batch - >/dev/null 2>&1", [f"rule del {r}" for r in rules], " || true")
        out += _heredoc("ip -batch -", [f"rule add {r}" for r in rules])
    if ports:
        out += ["", f'if [ "${NEIGHBOURS_VARIABLE}" = yes ]; then']
        out += [*_heredoc("ip -batch -", neighbours), "fi"]
        out += ["", "# HTB on every cable end: the root qdisc deleted where present, then built as planned"]
        deletes = [f"qdisc del dev {dev[p.ifname]} root" for p in ports]
        out += _heredoc("tc -force -batch - >/dev/null 2>&1", deletes, " || true")
        out += _heredoc("tc -batch -", tc)
    return "\n".join(out) + "\n"


def _variables(name: str, ports: Sequence[Port], dev: Mapping[str, str]) -> list[str]:
    """The interface variables with their defaults, and the checks of what a user set."""
    lines = [f"{port_variable(j)}=${{{port_variable(j)}:-{p.ifname}}}" for j, p in enumerate(ports)]
    lines += [
        f"{NEIGHBOURS_VARIABLE}=${{{NEIGHBOURS_VARIABLE}:-yes}}",
        "",
        f"fail() {{ printf '{name}: %s\\n' \"$1\" >&2; exit 2; }}",
        f'case ${NEIGHBOURS_VARIABLE} in yes|no) ;; *) fail "{NEIGHBOURS_VARIABLE} must be yes or no" ;; esac',
    ]
    if not ports:
        return lines
    names = " ".join(f'"{d}"' for d in dev.values())
    return lines + [
        'seen=" "',
        f"for ifname in {names}; do",
        "    case $ifname in",
        "        ''|-*|.|..|*[!A-Za-z0-9_.-]*) fail \"interface name '$ifname' is not a plain name\" ;;",
        "    esac",
        f"    [ ${{#ifname}} -le {IFNAME_MAX} ] || fail \"interface name '$ifname' is longer than {IFNAME_MAX}\"",
        '    case $seen in *" $ifname "*) fail "interface $ifname is given twice" ;; esac',
        '    seen="$seen$ifname "',
        '    ip link show dev "$ifname" >/dev/null 2>&1 || fail "no interface $ifname here"',
        "done",
    ]


def _heredoc(command: str, lines: Sequence[str], after: str = "") -> list[str]:
    """``command <<EOF`` with ``lines`` as its input, the interface variables expanded by the shell."""
    return [f"{command} <<EOF{after}", *lines, "EOF"]


def _continued(command: str, words: Sequence[str], after: str = "") -> list[str]:
    """``command`` and one word per line, joined by backslash continuations."""
    return [f"{command} \\", *(f"    {w} \\" for w in words[:-1]), f"    {words[-1]}{after}"]
