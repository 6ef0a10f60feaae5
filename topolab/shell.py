"""`topolab shell SCENARIO`: Mininet's CLI on the scenario's emulated network (course lab).

Hosts are ``h0..h<n-1>`` (and ``s0`` for the switch baseline's forwarding node); a host
name on the command line stands for its identity address, so ``h0 ping h6``,
``h0 traceroute -n h4`` and ``h3 ip route`` work as in any Mininet lab. The network is torn
down when the CLI exits (``exit`` or Ctrl-D), on SIGTERM, or on an error.
"""

from __future__ import annotations

import argparse

from .options import MAX_LINK_MBPS, MIN_LINK_MBPS, bounded_float
from .verify import _plan_and_config, add_network_arguments


def add_shell_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML file")
    parser.add_argument(
        "--link-mbps",
        type=bounded_float(MIN_LINK_MBPS, MAX_LINK_MBPS, low_inclusive=True),
        default=None,
        help="override [emulation] link_mbps",
    )
    add_network_arguments(parser)


def run_shell(args) -> int:
    from mininet.cli import CLI

    from emulator import EmulatedNetwork

    args.links, args.reference_gbps = "all", None
    scenario, plan, config = _plan_and_config(args, "shell")
    with EmulatedNetwork(plan, config) as net:
        f = net.facts
        print(
            f"topolab shell: {plan.topology}, {net.nodes} hosts, {len(plan.links)} cables at "
            f"{', '.join(f'{r:g}' for r in f['rates_mbps'])} Mbit/s (time scale {net.time_scale:g}x), "
            f"MTU {net.mtu}, netem {'on' if net.netem else 'absent'}; up in {f['build_s']:.2f} s"
        )
        names = ", ".join(f"{net.host_name(i)}={net.host_address(i)}" for i in range(min(net.nodes, 6)))
        print(f"hosts by identity address: {names}{', ...' if net.nodes > 6 else ''}")
        print(
            f"try: h0 ping -c3 h{min(6, plan.servers - 1)}   h0 traceroute -n h{min(4, plan.servers - 1)}   "
            "h0 ip route   h1 tc -s class show dev h1-eth0   (exit or Ctrl-D tears the network down)"
        )
        CLI(net.mininet)
    print(f"topolab shell: network torn down in {net.facts.get('teardown_s', 0):.2f} s")
    return 0
