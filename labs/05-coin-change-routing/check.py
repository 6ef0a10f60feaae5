"""Checker of exercise 5: the student's first-stride table must route every ordered pair
along a shortest path of the circulant (BFS on the graph, as networkx computes it), and
agree in hop count with planner.topology.routing.coin_change_first_strides (docs/algorithms.md section 4).

``--emulate`` (root) adds the packet exercise (`relay_capture`): on the emulated topoopt-12,
the data-parallel groups of three (servers 0, 4, 8; 1, 5, 9; ...: every fourth server) run
one AllReduce (`planner.collectives.rings.subgroup_allreduce`); their ring steps join servers
no cable joins, so the hosts relay them. scapy captures every interface of h11, the relay of
the route 0 -> 11 -> 4, while it runs (`emulator.packets.Capture`); the checker reads one
relayed gradient chunk off the wire (reassembling the 0 -> 4 TCP stream, ZeroMQ's frames, the
workers' 16-byte header), and counts the forwarding tax: the gradient bytes h11 forwards for
others beside the ones it sends of its own. Every forwarded gradient byte must be a byte the
schedule sends between a pair whose planned route crosses h11, exactly."""

import struct
from dataclasses import dataclass, field, replace
from pathlib import Path

import networkx as nx

from planner.topology.routing import circulant_hop_counts, coin_change_first_strides
from planner.topology.totient import circulant_cables

TITLE = "Coin-change routing: one first stride per offset"
STUDENT_FILE = "routing.py"
FUNCTIONS = ("first_strides(n, strides)",)
HINT = (
    "hint: strides go both ways (use -p too) and the first coin must start a SHORTEST sequence: "
    "breadth-first search over offsets from 0"
)
CASES = [(12, [1, 5]), (16, [1, 3, 5, 9]), (32, [1, 7]), (128, [1, 5, 13, 39]), (101, [1, 10, 31])]
EMULATED_SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "topoopt-12.toml"
RELAYED_PAIR = (0, 4)  # the route of step 4 and of `topolab trace-route`: 0 -> 11 -> 4
GROUP_SIZE = 3  # the data-parallel groups: 12 / 3 = 4 apart, offsets no stride covers
GRADIENT_BYTES = 3 << 20  # per server; each group's two rings carry half
WORKERS_TIMEOUT_S = 30.0


def check(student, emulate: bool) -> list[str]:
    problems = []
    for n, strides in CASES:
        first = [int(c) for c in student.first_strides(n, list(strides))]
        if len(first) != n:
            problems.append(f"n={n}: table has {len(first)} entries, expected one per offset 0..{n - 1}")
            continue
        coins = {c % n for p in strides for c in (p, -p)}
        graph = nx.Graph(circulant_cables(n, list(strides)))
        shortest = nx.single_source_shortest_path_length(graph, 0)  # circulant: same from every server
        planner_hops = circulant_hop_counts(coin_change_first_strides(n, list(strides)))
        for target in range(1, n):
            node, hops = 0, 0
            while node != target and hops <= n:
                step = first[(target - node) % n]
                if step % n not in coins:
                    problems.append(
                        f"n={n}, strides {strides}: offset {(target - node) % n} starts with {step}, "
                        "not a stride or its negative (there is no such cable)"
                    )
                    break
                node, hops = (node + step) % n, hops + 1
            else:
                if node != target:
                    problems.append(f"n={n}, strides {strides}: the route 0 -> {target} loops")
                elif hops != shortest[target] or hops != planner_hops[0][target]:
                    problems.append(
                        f"n={n}, strides {strides}: 0 -> {target} takes {hops} hops, BFS gives {shortest[target]}"
                    )
                continue
            break  # a broken table: one message is enough for this case
    if emulate and not problems:
        found = relay_capture(student)
        found.show()
        problems += found.problems
    return problems


@dataclass
class RelayCapture:
    """What the capture on the relay showed: gradient bytes per (source, destination) of the
    TCP streams leaving the relay, forwarded (neither end is the relay) or its own, beside
    the schedule's; one relayed chunk; and what went wrong."""

    relay: int
    student_relay: int
    forwarded: dict = field(default_factory=dict)  # (src, dst) -> gradient bytes seen leaving the relay
    own: dict = field(default_factory=dict)
    expected_forwarded: dict = field(default_factory=dict)  # (src, dst) -> bytes the schedule sends
    expected_own: dict = field(default_factory=dict)
    forwarded_ip_bytes: int = 0  # every IP byte the relay forwarded: data, ACKs, headers
    own_ip_bytes: int = 0
    chunk: dict = field(default_factory=dict)
    drops: int = 0
    problems: list = field(default_factory=list)

    @property
    def tax(self) -> float:
        """Gradient bytes forwarded for others per gradient byte of the relay's own."""
        own = sum(self.own.values())
        return sum(self.forwarded.values()) / own if own else float("inf")

    def show(self) -> None:
        def pairs(d):
            return ", ".join(f"{s} -> {t} {b / 2**20:.2f} MiB" for (s, t), b in sorted(d.items())) or "none"

        print(f"  packets on h{self.relay} (your table sends 0 -> 4 by h{self.student_relay} first):")
        print(f"    forwarded for others: {pairs(self.forwarded)}")
        print(f"    sent of its own:      {pairs(self.own)}")
        print(
            f"    forwarding tax: {self.tax:.2f} gradient bytes forwarded per byte of its own "
            f"({self.forwarded_ip_bytes / 2**20:.2f} MiB forwarded vs {self.own_ip_bytes / 2**20:.2f} MiB sent "
            "on the wire, headers and ACKs included)"
        )
        c = self.chunk
        if c:
            print(
                f"    one relayed chunk: {c['nbytes']} bytes of rank {c['src']}'s gradient (iteration "
                f"{c['iteration']}, tag {c['tag']}) in {c['segments']} TCP segment(s), in on {c['in']} at TTL "
                f"{c['ttl_in']}, out on {c['out']} at TTL {c['ttl_out']}; its first segment spent "
                f"{c['first_inside_us']:.0f} us inside h{self.relay}, the whole chunk {c['through_ms']:.1f} ms "
                "from its first byte in to its last byte out"
            )


def relay_capture(student, run_dir: str | None = None) -> RelayCapture:
    """Run the groups' AllReduce on the emulated topoopt-12 while scapy captures on the relay
    of `RELAYED_PAIR`; what it saw (`RelayCapture`). ``run_dir``: the emulator's run folder."""
    import subprocess
    import tempfile

    from emulator import EmulatedNetwork
    from emulator.packets import Capture, own_addresses
    from planner import build_plan, load_scenario
    from planner.collectives.rings import subgroup_allreduce
    from workers.coordinator import Coordinator

    scenario = load_scenario(str(EMULATED_SCENARIO))
    plan = build_plan(scenario)
    n = plan.servers
    src, dst = RELAYED_PAIR
    relay = plan.path(src, dst)[1]
    first = [int(c) for c in student.first_strides(n, list(plan.strides))]
    found = RelayCapture(relay=relay, student_relay=(src + first[(dst - src) % n]) % n)
    schedule = subgroup_allreduce(n, GRADIENT_BYTES, GROUP_SIZE)
    for edge in schedule.edge_bytes():
        pair = (edge["src"], edge["dst"])
        route = plan.path(*pair)
        if relay in route[1:-1]:
            found.expected_forwarded[pair] = found.expected_forwarded.get(pair, 0) + edge["bytes"]
        elif pair[0] == relay:
            found.expected_own[pair] = found.expected_own.get(pair, 0) + edge["bytes"]
    emulation = scenario.emulation if run_dir is None else replace(scenario.emulation, run_dir=run_dir)
    with EmulatedNetwork(plan, emulation) as net, tempfile.TemporaryDirectory(prefix="topolab-lab5-") as folder:
        hosts = [net.host_address(i) for i in range(n)]

        def spawn(rank, argv):
            return net.popen(rank, argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

        with Capture(net, [relay], folder) as capture:
            with Coordinator(schedule.to_dict(), hosts, spawn=spawn, timeout_s=WORKERS_TIMEOUT_S) as coord:
                result = coord.run_iteration(0)
        if not result.ok:
            found.problems.append(f"emulated AllReduce: wrong sums {result.mismatches[:2]}")
        frames = capture.frames(relay)
        found.drops = capture.drops
        mine = own_addresses(net, relay)
        node_of = {net.host_address(i): i for i in range(net.nodes)}
    _count(found, frames, mine, node_of)
    _one_chunk(found, frames, node_of)
    if found.drops:
        found.problems.append(f"the capture lost {found.drops} packet(s) on a busy machine: run it again")
    if found.forwarded != found.expected_forwarded:
        found.problems.append(
            f"h{relay} forwarded gradient bytes {found.forwarded}, the schedule's routes through it carry "
            f"{found.expected_forwarded}"
        )
    if found.own != found.expected_own:
        found.problems.append(
            f"h{relay} sent gradient bytes {found.own} of its own, the schedule's are {found.expected_own}"
        )
    return found


def _gradient_bytes(stream: bytes) -> list:
    """The workers' messages in one TCP stream: (header, chunk offset, chunk) per message,
    header = (iteration, src, tag, nbytes) as the workers' data plane writes it."""
    from emulator.packets import zmtp_messages
    from workers import engine

    header_bytes = engine.constant("HEADER_BYTES")
    out = []
    for message in zmtp_messages(stream):
        if len(message.frames) == 2 and len(message.frames[0][1]) == header_bytes:
            header = struct.unpack("<4I", message.frames[0][1])
            out.append((header, message.frames[1][0], message.frames[1][1]))
    return out


def _flows(frames) -> dict:
    flows = {}
    for f in frames:
        if f.proto == 6:
            flows.setdefault(f.flow, []).append(f)
    return flows


def _count(found: RelayCapture, frames, mine: set, node_of: dict) -> None:
    """Gradient bytes of every TCP stream leaving the relay, by pair; IP bytes forwarded and own."""
    from emulator.packets import tcp_stream

    leaving = [f for f in frames if f.outgoing]
    found.forwarded_ip_bytes = sum(f.ip_bytes for f in leaving if f.src not in mine and f.dst not in mine)
    found.own_ip_bytes = sum(f.ip_bytes for f in leaving if f.src in mine)
    for (s, _sport, d, _dport), flow in _flows(leaving).items():
        stream, _segments = tcp_stream(flow)
        nbytes = sum(len(chunk) for _header, _at, chunk in _gradient_bytes(stream))
        if not nbytes:
            continue  # ACKs, ZeroMQ's handshake
        pair = (node_of.get(s, -1), node_of.get(d, -1))
        where = found.own if s in mine else found.forwarded if d not in mine else None
        if where is not None:
            where[pair] = where.get(pair, 0) + nbytes


def _one_chunk(found: RelayCapture, frames, node_of: dict) -> None:
    """The first whole gradient chunk of `RELAYED_PAIR` arriving at the relay, and the TCP
    segments that carried it in and out (the same sequence numbers)."""
    from emulator.packets import tcp_stream

    address = {i: a for a, i in node_of.items()}
    src, dst = RELAYED_PAIR
    arriving = [f for f in frames if not f.outgoing and f.src == address[src] and f.dst == address[dst]]
    for flow in _flows(arriving).values():
        stream, segments = tcp_stream(flow)
        for header, at, chunk in _gradient_bytes(stream):
            carried = [f for offset, f in segments if offset < at + len(chunk) and offset + len(f.payload) > at]
            seqs = {f.seq for f in carried}
            leaving = [f for f in frames if f.outgoing and carried and f.flow == carried[0].flow and f.seq in seqs]
            if not leaving:
                continue
            iteration, sender, tag, nbytes = header
            found.chunk = {
                "iteration": iteration,
                "src": sender,
                "tag": tag,
                "nbytes": nbytes,
                "segments": len(carried),
                "in": carried[0].ifname,
                "out": leaving[0].ifname,
                "ttl_in": carried[0].ttl,
                "ttl_out": leaving[0].ttl,
                "first_inside_us": (leaving[0].time - carried[0].time) * 1e6,
                "through_ms": (leaving[-1].time - carried[0].time) * 1e3,
            }
            if nbytes != len(chunk) or sender != src:
                found.problems.append(f"the relayed chunk's header {header} does not describe its {len(chunk)} bytes")
            if {f.ttl for f in carried} != {f.ttl + 1 for f in leaving}:
                found.problems.append("the relayed chunk's segments did not leave with their TTL one lower")
            return
    found.problems.append(f"no whole gradient chunk of {src} -> {dst} was captured on h{found.relay}")
