"""`topolab shell SCENARIO`: Mininet's CLI on the scenario's emulated network (course lab).

Hosts are ``h0..h<n-1>`` (and ``s0`` for the switch baseline's forwarding node); a host
name on the command line stands for its identity address, so ``h0 ping h6``,
``h0 traceroute -n h4`` and ``h3 ip route`` work as in any Mininet lab. Mininet's habits
work as there: ``net``, ``links``, ``nodes``, ``dump``, ``pingall``, ``link hA hB down|up``
(the cable really goes down and up, both ends, with the emulator's live-change API that
faults use: `emulator.live`), ``iperf hA hB`` (iperf3, bounded in time: Mininet's own iperf
can hang), ``hX <command>``, ``help``, ``exit``; and ``route hX``, ``tc hX``, ``plan``.

Piped input (scripts, graders) works like a terminal: commands are read one per line, a
host command never swallows the lines after it, and each host command is bounded by
`PIPED_COMMAND_TIMEOUT_S`. The network is torn down when the CLI ends (``exit``, end of
input or Ctrl-D, SIGTERM, an error); Ctrl-C interrupts the running command, as in Mininet.

This machine only: Mininet's CLI and the live cable changes work on the hosts here, so
``--machines`` (or ``[emulation] machines``) is refused in one line (exit 2) before anything
is built (`topolab.common.network.refuse_machines`).
"""

from __future__ import annotations

import argparse
import json
import select
import subprocess
import sys
import time

from mininet.cli import CLI

from ..common.network import add_network_arguments, plan_and_config, refuse_machines
from ..common.options import add_link_mbps_argument

IPERF_SECONDS = 2
"""Length of an ``iperf`` measurement: long enough for HTB's rate to dominate slow start."""
IPERF_TIMEOUT_S = IPERF_SECONDS + 8
"""The longest an ``iperf`` may take in all (server start, connect, test, report)."""
IPERF_SERVER_WAIT_S = 3.0
"""How long the iperf3 server may take to listen."""
PIPED_COMMAND_TIMEOUT_S = 60.0
"""The longest a host command may run when input is piped (nobody is there to press Ctrl-C)."""
_POLL_MS = 100


def add_shell_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML file")
    add_link_mbps_argument(parser)
    add_network_arguments(parser)


class TopolabCLI(CLI):
    """Mininet's CLI with commands that know the plan and the emulator's cables."""

    prompt = "topolab> "

    def __init__(self, net, plan, stdin=sys.stdin):
        from mininet.log import lg

        self.net, self.plan = net, plan
        # Mininet prints its commands' output (nodes, pingall, ...) through its logger on
        # stderr; one transcript on stdout is what a script or a grader reads
        streams = [(h, h.setStream(sys.stdout)) for h in lg.handlers if hasattr(h, "setStream")]
        try:
            super().__init__(net.mininet, stdin=stdin)
        finally:
            for handler, old in streams:
                if old is not None:  # None: it already wrote to stdout
                    handler.setStream(old)

    # ---- helpers ---------------------------------------------------------------------
    def _node(self, name: str) -> int | None:
        for i in range(self.net.nodes):
            if self.net.host_name(i) == name:
                return i
        print(f"*** no node {name!r} (nodes: h0..h{self.net.servers - 1})")
        return None

    def _run(self, node: int, argv: list[str], timeout_s: float) -> tuple[int | None, str]:
        proc = self.net.popen(node, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            out = proc.communicate(timeout=timeout_s)[0]
            return proc.returncode, out
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return None, f"{argv[0]} did not finish within {timeout_s:g} s"

    def _cable_line(self, k: int) -> str:
        live, link = self.net.live, self.net.network.links[k]
        (_a, pa), (_b, pb) = live.ends(k)
        state = "DOWN" if k in live.dead else "OK"
        rate = self.net.link_rate_bps[k] / 1e6
        return f"{pa.ifname}<->{pb.ifname} ({state} {state}) {rate:g} Mbit/s  [{link.gbps:g} Gbit/s planned]"

    # ---- Mininet's habits ------------------------------------------------------------
    def do_net(self, _line: str) -> None:
        "List every node with its cables (interface:peer interface)."
        for u in range(self.net.nodes):
            ends = []
            for p in self.net.ports[u]:
                peer = next(q for q in self.net.ports[p.peer] if q.link == p.link)
                ends.append(f"{p.ifname}:{peer.ifname}")
            print(f"{self.net.host_name(u)} lo:  {' '.join(ends)}")

    def do_links(self, _line: str) -> None:
        "List every cable, its state and its emulated rate."
        for k in range(len(self.net.network.links)):
            print(self._cable_line(k))

    def do_link(self, line: str) -> None:
        """Take the cable between two nodes down or up (both ends).
        Usage: link hA hB down|up"""
        args = line.split()
        if len(args) != 3 or args[2] not in ("up", "down"):
            print("*** usage: link hA hB down|up")
            return
        a, b = self._node(args[0]), self._node(args[1])
        if a is None or b is None:
            return
        try:
            k = self.net.live.cable_between(a, b)
            (self.net.live.cable_up if args[2] == "up" else self.net.live.cable_down)(k)
        except Exception as err:  # one line, the CLI goes on
            print(f"*** link {args[0]} {args[1]} {args[2]}: {err}")
            return
        print(f"cable {self.net.live.cable_name(k)} {args[2]}")

    def do_iperf(self, line: str) -> None:
        """TCP throughput from hA to hB with iperf3 (bounded in time).
        Usage: iperf hA hB"""
        args = line.split()
        if len(args) != 2:
            print("*** usage: iperf hA hB")
            return
        a, b = self._node(args[0]), self._node(args[1])
        if a is None or b is None or a == b:
            return
        server = self.net.popen(b, ["iperf3", "-s", "-1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self._wait_listening(b)
            code, out = self._run(
                a,
                ["iperf3", "-c", self.net.host_address(b), "-t", str(IPERF_SECONDS), "-J", "--connect-timeout", "2000"],
                IPERF_TIMEOUT_S,
            )
        finally:
            if server.poll() is None:
                server.kill()
            server.wait(timeout=IPERF_TIMEOUT_S)
        try:
            bps = json.loads(out)["end"]["sum_received"]["bits_per_second"]
        except (ValueError, KeyError, TypeError):
            print(f"*** iperf {args[0]} {args[1]}: {(out.strip().splitlines() or ['no output'])[-1]}")
            return
        print(f"*** Results: {args[0]} -> {args[1]}: {bps / 1e6:.1f} Mbits/sec over {IPERF_SECONDS} s", end="")
        direct = int(self.net.live.next_hop[a, b]) == b
        if direct:  # one cable: compare with its emulated rate
            k = self.net.live.cable_between(a, b)
            rate = self.net.link_rate_bps[k]
            print(f" ({100 * bps / rate:.1f}% of cable {self.net.live.cable_name(k)}'s {rate / 1e6:g} Mbit/s)")
        else:
            print()

    def _wait_listening(self, node: int) -> None:
        deadline = time.monotonic() + IPERF_SERVER_WAIT_S
        while time.monotonic() < deadline:
            _code, out = self._run(node, ["ss", "-Hltn", "sport", "= :5201"], IPERF_SERVER_WAIT_S)
            if out.strip():
                return
            time.sleep(0.05)

    # ---- topolab's own ---------------------------------------------------------------
    def do_route(self, line: str) -> None:
        """A host's routing table. Usage: route hX"""
        u = self._node(line.strip())
        if u is not None:
            print(self._run(u, ["ip", "route"], IPERF_TIMEOUT_S)[1], end="")

    def do_tc(self, line: str) -> None:
        """A host's shaping (HTB class of every cable end). Usage: tc hX"""
        u = self._node(line.strip())
        if u is None:
            return
        for p in self.net.ports[u]:
            out = self._run(u, ["tc", "-s", "class", "show", "dev", p.ifname], IPERF_TIMEOUT_S)[1]
            print(f"{p.ifname} (to {self.net.host_name(p.peer)}): {out}", end="")

    def do_plan(self, _line: str) -> None:
        "The plan this network emulates: topology, cables, rings, time scale."
        p = self.plan
        print(
            f"{p.topology} for {p.model or 'a job'} on {p.servers} servers, degree {p.degree}, "
            f"{len(p.links)} cables of {p.link_gbps:g} Gbit/s emulated at {self.net.link_mbps:g} Mbit/s "
            f"(time scale {self.net.time_scale:g}x); diameter {p.summary.diameter}, mean hops {p.summary.mean_hops:.2f}"
        )
        for r in p.rings:
            print(f"ring: {' '.join(f'h{x}' for x in r)}")
        if self.net.live.dead:
            print("cables down: " + ", ".join(self.net.live.cable_name(k) for k in sorted(self.net.live.dead)))

    def do_exit(self, _line: str) -> bool:
        "Tear the network down and leave."
        return True

    do_quit = do_exit

    def do_EOF(self, _line: str) -> bool:
        print()
        return True

    # ---- piped input: a host command must not read the script -----------------------
    def precmd(self, line: str) -> str:
        if not self.isatty() and line != "EOF":  # a transcript shows each command after its prompt
            print(line.rstrip("\n"))
        return super().precmd(line)

    def waitForNode(self, node) -> None:
        if self.isatty():
            super().waitForNode(node)
            return
        poller = select.poll()
        poller.register(node.stdout, select.POLLIN)
        deadline = time.monotonic() + PIPED_COMMAND_TIMEOUT_S
        while node.waiting:
            try:
                if poller.poll(_POLL_MS):
                    sys.stdout.write(node.monitor())
                    sys.stdout.flush()
                if time.monotonic() > deadline:
                    print(f"*** {node.name}: command still running after {PIPED_COMMAND_TIMEOUT_S:g} s: interrupted")
                    node.sendInt()
                    deadline = float("inf")
            except KeyboardInterrupt:
                node.sendInt()


def run_shell(args) -> int:
    from emulator import EmulatedNetwork

    scenario, plan, config, flags = plan_and_config(args, "shell")
    refuse_machines(
        config,
        flags,
        "topolab shell runs on this machine only: Mininet's CLI and its live cable changes are not built "
        "across machines",
    )
    with EmulatedNetwork(plan, config) as net:
        f = net.facts
        print(
            f"topolab shell: {plan.topology}, {net.nodes} hosts, {len(plan.links)} cables at "
            f"{', '.join(f'{r:g}' for r in f['rates_mbps'])} Mbit/s (time scale {net.time_scale:g}x), "
            f"MTU {net.mtu}, netem {'on' if net.netem else 'absent'}; up in {f['build_s']:.2f} s"
        )
        names = ", ".join(f"{net.host_name(i)}={net.host_address(i)}" for i in range(min(net.nodes, 6)))
        print(f"hosts by identity address: {names}{', ...' if net.nodes > 6 else ''}")
        last = plan.servers - 1
        print(
            f"try: net  links  plan  h0 ping -c3 h{min(6, last)}  link h0 h1 down  iperf h0 h{min(6, last)}  "
            "route h0  tc h1  help  (exit or Ctrl-D tears the network down)"
        )
        sys.stdout.flush()
        TopolabCLI(net, plan)
    print(f"topolab shell: network torn down in {net.facts.get('teardown_s', 0):.2f} s")
    return 0
