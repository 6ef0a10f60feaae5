"""`topolab trace-route SCENARIO SRC DST`: follow packets hop by hop with scapy (root).

Builds the scenario's network as `topolab run` does, then sends probes that carry the
5-tuple of the workers' data connection from server SRC to server DST (TCP from the address
the sending worker binds to, its identity, or for a multipath plan each plane's source
address, to DST's identity, with two of the ephemeral ports the workers' sockets get) with
scapy inside SRC's host, while scapy's sniffers capture on every interface of every host of
the planned routes (`emulator.packets`). Prints, beside each plane's planned route, the hops
each probe crossed: host, interface in and out, TTL in and out (it drops by one at each relay)
and the time after sending. Exits 0 when every probe took its plane's route, 1 otherwise
(naming the first hop that differs), 2 for bad input (a SRC or DST that is no server).

Everything is bounded in time; the sniffers and the sender run in the hosts and end with the
network, by PID; the probes stay inside the emulated namespaces (198.18.0.0/15).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from contract.errors import RunError, UsageError

from ..common.network import add_network_arguments, open_network, plan_and_config, refuse_machines
from ..common.options import add_link_mbps_argument, bounded_int, check_output_dir, make_output_dir

MAX_PROBES = 10  # per plane; one shows the route, a few show it is stable
PORT_RANGE = (1, 65535)


def add_trace_route_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML file")
    parser.add_argument("src", metavar="SRC", help="the sending server: its number (0) or host name (h0)")
    parser.add_argument("dst", metavar="DST", help="the receiving server: its number (4) or host name (h4)")
    parser.add_argument(
        "--probes",
        type=bounded_int(1, MAX_PROBES),
        default=1,
        metavar="N",
        help=f"probes per plane, 1..{MAX_PROBES} (default 1)",
    )
    parser.add_argument(
        "--ports",
        type=_ports,
        default=None,
        metavar="SPORT:DPORT",
        help="the probes' TCP ports (default: two of the ephemeral ports, 32768-60999, the workers' sockets get)",
    )
    parser.add_argument("--pcap", metavar="DIR", help="keep the captures: one pcap file per interface, in DIR")
    parser.add_argument("--json", action="store_true", help="print the traces as JSON instead of a table")
    add_link_mbps_argument(parser)
    add_network_arguments(parser)


def _ports(text: str) -> tuple[int, int]:
    sport, sep, dport = text.partition(":")
    low, high = PORT_RANGE
    if not (sep and sport.isdigit() and dport.isdigit() and low <= int(sport) <= high and low <= int(dport) <= high):
        raise argparse.ArgumentTypeError(f"expected SPORT:DPORT, two ports in {low}..{high}, got {text!r}")
    return int(sport), int(dport)


def server_argument(text: str, what: str, servers: int) -> int:
    """Server ``text`` ("4" or "h4") of a network of ``servers``; else one line naming ``what``."""
    number = text[1:] if text.startswith("h") else text
    if not number.isdigit() or int(number) >= servers:
        raise UsageError(f"{what} {text!r}: no such server (0..{servers - 1}, or h0..h{servers - 1})")
    return int(number)


def run_trace_route(args: argparse.Namespace) -> int:
    from emulator.packets import DEFAULT_PROBE_PORTS, probe_tuple, trace

    _scenario, plan, config, flags = plan_and_config(args, "trace-route")
    servers = plan.servers
    src = server_argument(args.src, "SRC", servers)
    dst = server_argument(args.dst, "DST", servers)
    if src == dst:
        raise UsageError(f"DST {args.dst!r}: the same server as SRC; give two different servers")
    refuse_machines(config, flags, "trace-route captures in the hosts of this machine; emulate on one machine")
    if args.pcap is not None:
        check_output_dir(args.pcap, "--pcap")
    if importlib.util.find_spec("scapy") is None:
        raise RunError(
            "scapy is not installed in this Python: run scripts/setup.sh (it installs the project's dependencies)"
        )
    network = plan.network
    allocation = network.allocation_of(src, dst)
    planes = [0] + list(range(1, len(allocation.paths) + 1)) if allocation else [0]

    def progress(msg: str) -> None:
        print(f"trace-route: {msg}", file=sys.stderr, flush=True)

    with open_network(plan, config, log=progress) as net:
        ports = args.ports or DEFAULT_PROBE_PORTS
        probes = [probe_tuple(net, src, dst, plane, ports) for plane in planes]
        expected = [network.plane_path(src, dst, plane) for plane in planes]
        if args.pcap is not None:
            folder = make_output_dir(args.pcap, "--pcap")
            traces = trace(net, probes, expected, folder, repeats=args.probes)
        else:
            with tempfile.TemporaryDirectory(prefix="topolab-trace-") as folder:
                traces = trace(net, probes, expected, folder, repeats=args.probes)
        names = [net.host_name(i) for i in range(net.nodes)]
    ok = all(t.ok for t in traces)
    if args.json:
        print(json.dumps(_report(args, traces, names, ok), indent=2))
    else:
        _print_table(args, plan, traces, names, ok)
    return 0 if ok else 1


def _report(args: argparse.Namespace, traces, names: list[str], ok: bool) -> dict:
    return {
        "scenario": args.scenario,
        "ok": ok,
        "traces": [
            {
                "plane": t.probe.plane,
                "probe": t.repeat + 1,
                "tuple": asdict(t.probe),
                "expected": t.expected,
                "observed": t.observed,
                "ok": t.ok,
                "difference": t.first_difference(names),
                "sent_at": t.sent_at,
                "hops": [asdict(hop) for hop in t.hops],
            }
            for t in traces
        ],
    }


def _print_table(args: argparse.Namespace, plan, traces, names: list[str], ok: bool) -> None:
    def route(nodes) -> str:
        return " -> ".join(names[v] for v in nodes)

    def us(t: float | None, sent: float) -> str:
        return "-" if t is None else f"{(t - sent) * 1e6:.0f}"

    first = traces[0].probe
    captured = sorted({v for t in traces for v in t.expected})
    print(
        f"topolab trace-route {args.scenario} {names[first.src]} {names[first.dst]}: {plan.topology}, "
        f"{plan.servers} servers, {len(plan.links)} cables"
    )
    print(
        f"  probes: the workers' data connection {names[first.src]} -> {names[first.dst]}, sent with scapy "
        f"from {names[first.src]}; captured with scapy on {', '.join(names[v] for v in captured)}"
    )
    for t in traces:
        mark = "ok  " if t.ok else "FAIL"
        print(f"plane {t.probe.plane}, probe {t.repeat + 1}: {t.probe}")
        print(f"  plan     {route(t.expected)}")
        print(
            f"  observed {route(t.observed)}{'' if all(h.seen for h in t.hops) else ' (last host: no capture there)'}"
        )
        # times from the kernel's stamp as it left SRC (one clock for every host; the sender's
        # own reading before its first send adds the start-up of its socket)
        zero = t.hops[0].time_out if t.hops and t.hops[0].time_out is not None else t.sent_at
        since = f"us since it left {names[t.probe.src]}" if zero != t.sent_at else "us since sending"
        print(f"  {'hop':>3}  {'host':<5} {'in':<10} {'out':<10} {'TTL in':>6} {'out':>4}  {since} (in / out)")
        for i, hop in enumerate(t.hops):
            ttl_in = "-" if hop.ttl_in is None else str(hop.ttl_in)
            ttl_out = "-" if hop.ttl_out is None else str(hop.ttl_out)
            print(
                f"  {i:>3}  {names[hop.node]:<5} {hop.in_ifname or '-':<10} {hop.out_ifname or '-':<10} "
                f"{ttl_in:>6} {ttl_out:>4}  {us(hop.time_in, zero)} / {us(hop.time_out, zero)}"
            )
        verdict_line = "the plan's route" if t.ok else t.first_difference(names)
        print(f"{mark} {verdict_line}")
    equal = sum(t.ok for t in traces)
    verdict = "ok  " if ok else "FAIL"
    print(f"{verdict} {equal}/{len(traces)} probes took their plane's planned route")
    if args.pcap:
        print(f"  captures: {Path(args.pcap)}/<interface>.pcap (Wireshark reads them)")
