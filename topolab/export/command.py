"""`topolab export SCENARIO --to DIR [--formats ...]`: the plan taken out of the emulator, as
the files a real cluster, its GPUs' collective library or another simulator reads (no root).

Formats (``--formats``, comma-separated; all by default), each file said in DIR/README.md
(what it is for, how to apply it) and in docs/export.md (its source, its limits):

- ``cabling``: ``cabling.csv``, every cable as ``server_a,port_a,server_b,port_b,gbps``
  (`planner.topology.cabling_file.cabling_csv`: ports numbered as the emulator numbers the
  interfaces, the format ``[topology] kind = "file"`` reads back), and ``cabling.svg``, the
  topology drawn (`cabling_svg`: networkx's circular layout, cables coloured by rate, their
  width the bytes they relay for other servers in one iteration, as `topolab predict`'s
  model replays it: `topolab.common.prediction.prepare`);
- ``plan``: ``plan.json``, the plan as `topolab plan --json` writes it (`Plan.to_json`);
- ``msccl``: ``msccl/<collective>.xml``, the plan's AllReduce (and its allgather,
  reduce-scatter halves and alltoall where the plan has them) in the MSCCL XML
  msccl-executor runs (`planner.collectives.msccl_export`);
- ``nccl``: ``nccl/graph.xml`` (NCCL_GRAPH_FILE) and ``nccl/rank-order.txt``, where NCCL's
  ring algorithm can state the plan's AllReduce (`nccl_graph`); else a line in the README
  saying why not;
- ``astra-sim``: ``astra-sim/network.yml``, the network configuration of ASTRA-sim's
  analytical backend, where its per-dimension building blocks state the topology
  (`astra_network`); else a line saying why not.

- ``hosts``: ``hosts/<server>.sh``, each server's Linux configuration for the plan (addresses,
  forwarding, routes, per-plane rules and tables, static neighbours, the HTB classes):
  `emulator.hostscripts.host_scripts`, the functions the emulator configures its own hosts
  with, at the plan's own rates (``--link-mbps``: at the emulator's dilated rates instead).

A new format is a writer in `WRITERS` and its name in `FORMATS`.

Bad input (a format not listed, ``--to`` a file or a folder root may not write into, a
scenario that does not load) is one line, exit 2. One module of about 500 lines: the NCCL
graph and the ASTRA-sim configuration are a page each and exist only to be exported here.
"""

from __future__ import annotations

import argparse
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.errors import UsageError
from contract.files import write_file

from ..common.options import add_link_mbps_argument, check_output_dir, make_output_dir

if TYPE_CHECKING:
    from planner import Plan, Scenario

FORMATS = ("cabling", "hosts", "plan", "msccl", "nccl", "astra-sim")
NCCL_CHANNELS = 2  # channels of the exported ring graph (NCCL duplicates a NIC's ring onto two)
NCCL_GRAPH_VERSION = 1  # NCCL_GRAPH_XML_VERSION (src/graph/xml.h)
NCCL_RING_GRAPH = 0  # the ring graph's id (src/init.cc: ringGraph->id = 0)
NCCL_PATTERN_RING = 4  # NCCL_TOPO_PATTERN_RING (src/include/graph.h)
GIB = float(1 << 30)  # ASTRA-sim's GB (bw_GBps_to_Bpns: 1 GB = 2^30 B)


@dataclass(frozen=True)
class Written:
    """A file the export wrote: its path inside DIR and what the README says of it."""

    path: str
    what: str


@dataclass
class Exported:
    """What one format wrote, and the lines the README gives it (why a file is missing,
    how to apply the files)."""

    format: str
    files: list[Written] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


@dataclass
class Context:
    """The scenario, its plan and the folder, shared by the writers."""

    scenario: Scenario
    plan: Plan
    out: Path
    scenario_path: str
    link_mbps: float | None = None  # hosts: shape at the emulator's rate (Mbit/s a plan link); None: the plan's
    link_bytes: dict[tuple[int, int], float] = field(default_factory=dict)  # directed link -> bytes per iteration
    relayed_bytes: dict[tuple[int, int], float] = field(default_factory=dict)  # of those, relayed for others

    def write(self, relative: str, data: str | bytes) -> None:
        target = self.out / relative
        if target.parent != self.out:
            make_output_dir(target.parent, "--to")
        write_file(target, data)


# ---- command line --------------------------------------------------------------------------
def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML file")
    parser.add_argument("--to", required=True, metavar="DIR", help="folder to write into (made if missing)")
    parser.add_argument(
        "--formats",
        metavar="LIST",
        help=f"comma-separated among {', '.join(FORMATS)} (default: all); DIR/README.md says what each file is for",
    )
    parser.add_argument("--force", action="store_true", help="write into DIR even when it is not empty")
    add_link_mbps_argument(parser)


def parse_formats(text: str | None) -> tuple[str, ...]:
    """The formats ``--formats`` names, in `FORMATS` order; one line naming a bad one."""
    if text is None:
        return FORMATS
    names = [name.strip() for name in text.split(",")]
    for name in names:
        if name not in FORMATS:
            shown = name or "(empty)"
            raise UsageError(f"--formats {text!r}: {shown!r} is not one of {', '.join(FORMATS)}")
    return tuple(f for f in FORMATS if f in names)


def run_export(args: argparse.Namespace) -> int:
    from planner import build_plan, load_scenario

    formats = parse_formats(args.formats)
    out = check_output_dir(args.to, "--to")
    if out.exists() and any(out.iterdir()) and not args.force:
        raise UsageError(f"--to {args.to!r}: exists and is not empty; use --force to write into it")
    scenario = load_scenario(args.scenario)
    if "cabling" in formats:  # the bytes each cable carries, from the predicted iteration
        from ..common.prediction import prepare

        prepared = prepare(scenario, payload_scale=1.0)
        plan, predicted = prepared.plan, prepared.predicted
        link_bytes = {(r["src"], r["dst"]): float(r["bytes"]) for r in predicted["link_bytes"]}
        relayed = {(r["src"], r["dst"]): float(r["bytes"]) for r in predicted["relayed_link_bytes"]}
    else:
        plan, link_bytes, relayed = build_plan(scenario), {}, {}
    make_output_dir(out, "--to")
    ctx = Context(scenario, plan, out, str(args.scenario), args.link_mbps, link_bytes, relayed)
    results = [WRITERS[name](ctx) for name in formats]
    ctx.write("README.md", readme(ctx, results))
    for result in results:
        for f in result.files:
            print(f"{f.path:<28} {(out / f.path).stat().st_size:>10,} bytes  {f.what}")
        if not result.files:
            print(
                f"{'(' + result.format + ')':<28} {'':>10}        not written: {result.lines[0] if result.lines else ''}"
            )
    print(
        f"{'README.md':<28} {(out / 'README.md').stat().st_size:>10,} bytes  what each file is for and how to apply it"
    )
    print(f"exported to {out}")
    return 0


# ---- cabling -------------------------------------------------------------------------------
def write_cabling(ctx: Context) -> Exported:
    from planner.topology.cabling_file import cabling_csv

    plan = ctx.plan
    result = Exported("cabling")
    ctx.write("cabling.csv", cabling_csv(plan.links))
    result.files.append(Written("cabling.csv", f"{len(plan.links)} cables, server_a,port_a,server_b,port_b,gbps"))
    ctx.write("cabling.svg", cabling_svg(plan, ctx.relayed_bytes))
    result.files.append(
        Written("cabling.svg", "the topology: colour = cable rate, width = bytes relayed per iteration")
    )
    result.lines += [
        "`cabling.csv` is the patch-panel map: one cable a line, `server_a,port_a,server_b,port_b,gbps`. "
        "Port `p` of server `s` is the emulator's interface `h<s>-eth<p>` (the p-th cable of `s` in the plan's "
        "order) and `ETH<p>` of a host script; wire port `p` to the NIC you choose for it, the same on every server. "
        '`[topology] kind = "file"` with `cabling = "cabling.csv"` reads it back (docs/topologies.md).',
    ]
    if plan.switches:
        result.lines.append(
            f"Nodes {plan.servers} and up are switches (the plan's switch nodes); a cabling file read back "
            "takes every node for a server."
        )
    result.lines.append(
        "`cabling.svg` draws the cables (servers on a circle, switches inside): the colour is the cable's rate, "
        "the width the bytes it relays for other servers in one training iteration, both directions, as the "
        "model predicts it (`topolab predict`)."
    )
    return result


def cabling_svg(plan: Plan, relayed_bytes: dict[tuple[int, int], float]) -> bytes:
    """The plan's cables drawn as SVG (module docstring); the same bytes for the same plan."""
    import io

    import networkx as nx

    from ..results.run_report import pyplot, wrapped

    plt = pyplot()
    n, nodes = int(plan.servers), int(plan.nodes)
    graph = nx.MultiGraph()
    graph.add_nodes_from(range(nodes))
    graph.add_edges_from((link.a, link.b) for link in plan.links)
    pos = nx.circular_layout(range(n))
    if plan.switches:
        pos = nx.spring_layout(graph, pos={**pos, **{s: (0.0, 0.0) for s in range(n, nodes)}}, fixed=range(n), seed=0)
        pos = {v: tuple(pos[v]) for v in range(nodes)}
    relayed: Counter[tuple[int, int]] = Counter()
    for (a, b), v in relayed_bytes.items():
        relayed[(min(a, b), max(a, b))] += v
    top = max(relayed.values(), default=0.0)
    rates = sorted({link.gbps for link in plan.links})
    cmap = plt.get_cmap("viridis")
    colour = {r: cmap(0.15 + 0.7 * (i / max(1, len(rates) - 1))) for i, r in enumerate(rates)}
    plt.rcParams["svg.hashsalt"] = "topolab-export"  # stable ids: the same plan, the same file
    fig, ax = plt.subplots(figsize=(7.0, 7.0))
    seen: Counter[tuple[int, int]] = Counter()
    for link in plan.links:
        key = (min(link.a, link.b), max(link.a, link.b))
        (x0, y0), (x1, y1) = pos[key[0]], pos[key[1]]
        bend = 0.03 * seen[key]  # parallel cables side by side
        seen[key] += 1
        width = 1.0 + (6.0 * relayed[key] / top if top else 0.0)
        ax.plot([x0 + bend, x1 + bend], [y0 + bend, y1 + bend], color=colour[link.gbps], lw=width, alpha=0.85, zorder=1)
    for v in range(nodes):
        x, y = pos[v]
        switch = v >= n
        ax.scatter([x], [y], s=420 if not switch else 700, c="#ffe0b3" if switch else "#d9ecff",
                   edgecolors="black", marker="s" if switch else "o", zorder=2)  # fmt: skip
        ax.text(x, y, "sw" if switch else str(v), ha="center", va="center", fontsize=8, zorder=3)
    handles = [plt.Line2D([], [], color=colour[r], lw=3, label=f"{r:.4g} Gbit/s") for r in rates]
    ax.legend(handles=handles, title="cable rate", loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    most = f"widest: {top / 1e6:.3g} MB relayed per iteration" if top else "no cable relays traffic for others"
    ax.set_title(wrapped(f"{plan.topology}: {n} servers, {len(plan.links)} cables\nwidth = bytes relayed ({most})"))
    ax.set_aspect("equal")
    ax.axis("off")
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    finally:
        plt.close(fig)
    return buffer.getvalue()


# ---- plan.json -----------------------------------------------------------------------------
def write_plan(ctx: Context) -> Exported:
    ctx.write("plan.json", ctx.plan.to_json())
    return Exported(
        "plan",
        [Written("plan.json", "the plan (topolab plan --json): cables, routes, rings, traffic")],
        ["`plan.json` is the plan as `topolab plan --json` writes it; `contract.plan.Plan.from_json` reads it."],
    )


# ---- MSCCL ---------------------------------------------------------------------------------
def write_msccl(ctx: Context) -> Exported:
    from planner.collectives.msccl_export import plan_msccl_exports

    result = Exported("msccl")
    for coll, export in plan_msccl_exports(ctx.plan).items():
        if isinstance(export, str):
            result.lines.append(f"No `msccl/{coll}.xml`: {export}.")
            continue
        path = f"msccl/{coll}.xml"
        ctx.write(path, export.xml)
        result.files.append(Written(path, export.algorithm))
        facts = (
            f"{export.nchannels} channel{'s' if export.nchannels > 1 else ''}, {export.nchunksperloop} chunks per loop, "
            f"at most {export.threadblocks} threadblocks per GPU and {export.steps} steps per threadblock"
        )
        notes = "".join(f" {note}." for note in export.notes)
        result.lines.append(f"`{path}`: {export.algorithm}; {facts}.{notes}")
    result.lines.append(
        "msccl-executor-nccl loads every file of a folder: `MSCCL_ALGO_DIR=msccl` (keep only these XMLs in it); "
        "the older microsoft/msccl reads `MSCCL_XML_FILES=msccl/allreduce.xml` (files separated by `:`) with "
        "`NCCL_ALGO=MSCCL,RING`. One GPU per server, rank r on server r. The executor runs an XML for a call "
        "whose element count (for allgather, reduce-scatter and alltoall: times the GPUs) is a multiple of its "
        "`nchunksperloop`; each XML serves in-place and out-of-place calls. `topolab collective SCENARIO "
        "--algorithm msccl:msccl/allreduce.xml` runs one back on the emulated network (docs/msccl.md)."
    )
    return result


# ---- NCCL's ring graph ---------------------------------------------------------------------
@dataclass(frozen=True)
class NcclRing:
    """A plan's AllReduce as NCCL's ring: the rank order (``order[r]`` is rank r's server) and
    per server the ports (NICs) its channels enter and leave by."""

    order: tuple[int, ...]
    nic_in: dict[int, int]
    nic_out: dict[int, int]
    gbps: float


def nccl_ring(plan: Plan) -> NcclRing | str:
    """The plan's AllReduce as NCCL's ring algorithm runs it, or why NCCL cannot: NCCL runs
    every channel of its ring algorithm over one order of the nodes, the rank order, in one
    direction (src/graph/connect.cc, ``connectRings``: node n's ring sends to node n + 1's),
    so it states a plan whose AllReduce is one ring, and no other."""
    from planner.collectives.from_plan import choose_allreduce
    from planner.collectives.msccl_export import CHOICE_BYTES
    from planner.topology.cabling_file import interface_ports

    choice = choose_allreduce(plan, CHOICE_BYTES)
    if choice.shape != "rings":
        return (
            f"the plan's AllReduce is the {choice.algorithm} ({choice.shape}), and NCCL's graph file states rings "
            "over one rank order only; `msccl/allreduce.xml` runs it"
        )
    rings = choice.rings[0]
    if len(rings) > 1:
        return (
            f"the plan's AllReduce runs {len(rings)} rings at once (the plan's rings in both directions), and NCCL "
            "runs every channel of its ring algorithm over one rank order in one direction (src/graph/connect.cc), "
            f"so it would use the cables of one of them; `msccl/allreduce.xml` runs "
            + ("both" if len(rings) == 2 else f"all {len(rings)}")
        )
    order = tuple(int(s) for s in rings[0])
    ports = interface_ports(plan.links)
    port_to: dict[tuple[int, int], int] = {}  # (server, neighbour) -> the server's first port to it
    for link, (pa, pb) in zip(plan.links, ports):
        port_to.setdefault((link.a, link.b), pa)
        port_to.setdefault((link.b, link.a), pb)
    nic_in, nic_out, rates = {}, {}, set()
    k = len(order)
    for r, s in enumerate(order):
        out_path = plan.path(s, order[(r + 1) % k])
        in_path = plan.path(order[r - 1], s)
        nic_out[s] = port_to[(s, out_path[1])]
        nic_in[s] = port_to[(s, in_path[-2])]
        rates |= {link.gbps for link in plan.links if s in (link.a, link.b)}
    return NcclRing(order, nic_in, nic_out, min(rates))


def nccl_graph_xml(ring: NcclRing, server: int) -> str:
    """NCCL's ring graph file (NCCL_GRAPH_FILE, read by ``ncclTopoGetGraphFromXml`` in
    src/graph/search.cc) for ``server``: `NCCL_CHANNELS` channels, each entering by the
    server's in-port and leaving by its out-port (net ``dev``, hexadecimal as NCCL reads it),
    through its one GPU (dev 0)."""
    nic_in, nic_out = ring.nic_in[server], ring.nic_out[server]
    per_channel = ring.gbps / 8 / NCCL_CHANNELS  # GB/s per channel, as NCCL's bwInter
    lines = [
        f'<graphs version="{NCCL_GRAPH_VERSION}">',
        f'  <graph id="{NCCL_RING_GRAPH}" pattern="{NCCL_PATTERN_RING}" crossnic="{int(nic_in != nic_out)}" '
        f'nchannels="{NCCL_CHANNELS}" speedintra="{per_channel:g}" speedinter="{per_channel:g}" latencyinter="0" '
        'typeintra="LOC" typeinter="PHB" samechannels="1">',
    ]
    for _ in range(NCCL_CHANNELS):
        lines += [
            "    <channel>",
            f'      <net dev="{nic_in:#x}"/>',
            '      <gpu dev="0"/>',
            f'      <net dev="{nic_out:#x}"/>',
            "    </channel>",
        ]
    lines += ["  </graph>", "</graphs>"]
    return "\n".join(lines) + "\n"


def write_nccl(ctx: Context) -> Exported:
    result = Exported("nccl")
    ring = nccl_ring(ctx.plan)
    if isinstance(ring, str):
        result.lines.append(f"No `nccl/graph.xml`: {ring}.")
        return result
    same = len({(ring.nic_in[s], ring.nic_out[s]) for s in ring.order}) == 1
    servers = [ring.order[0]] if same else sorted(ring.order)
    for s in servers:
        path = "nccl/graph.xml" if same else f"nccl/graph-{s}.xml"
        ctx.write(path, nccl_graph_xml(ring, s))
        result.files.append(Written(path, f"NCCL's ring graph ({'every server' if same else f'server {s}'})"))
    order = "".join(f"{s}\n" for s in ring.order)
    ctx.write(
        "nccl/rank-order.txt",
        "# one server a line, in rank order: the first runs rank 0, the next rank 1, ...\n" + order,
    )
    result.files.append(Written("nccl/rank-order.txt", "the rank order to launch with: the ring's server order"))
    result.lines.append(
        f"`nccl/graph{'' if same else '-<server>'}.xml` is NCCL's ring graph (`NCCL_GRAPH_FILE=...` on "
        f"{'every server' if same else 'each server, its own file'}): {NCCL_CHANNELS} channels, each entering by the "
        "plan's in-port of the ring and leaving by its out-port. A `net dev` is the port number of `cabling.csv`: "
        "NCCL numbers NICs in its own order (`NCCL_DEBUG=INFO` lists them as `[0]mlx5_0 ...`), so renumber to it. "
        "Launch rank r on the r-th server `nccl/rank-order.txt` lists (from 0): NCCL's ring visits the nodes in "
        "rank order. "
        "`typeinter` (PHB) is the GPU-to-NIC path NCCL assumes; set it to your servers' "
        "(`NCCL_GRAPH_DUMP_FILE` shows NCCL's own)."
    )
    return result


# ---- ASTRA-sim -----------------------------------------------------------------------------
@dataclass(frozen=True)
class AstraNetwork:
    """A network in ASTRA-sim's analytical input format: per dimension a building block, its
    NPUs and each link's rate (Gbit/s here; GB/s in the file); NPU i is server ``servers[i]``."""

    topology: tuple[str, ...]
    npus: tuple[int, ...]
    gbps: tuple[float, ...]
    latency_ns: float
    servers: tuple[int, ...]


def astra_cables(net: AstraNetwork) -> tuple[Counter[tuple[int, int]], int]:
    """The server-to-server capacity (Gbit/s per unordered pair of servers) the configuration
    builds (astra-network-analytical's Ring connects i and i+1 both ways, so a ring of 2
    connects them twice; FullyConnected every pair once), and the switch ports."""
    total, switch_ports, stride = Counter(), 0, 1
    n = math.prod(net.npus)
    for block, p, gbps in zip(net.topology, net.npus, net.gbps):
        for base in range(n):
            if (base // stride) % p:
                continue
            members = [base + j * stride for j in range(p)]
            if block == "Switch":
                switch_ports += p
                continue
            pairs = (
                [(j, (j + 1) % p) for j in range(p)]
                if block == "Ring"
                else [(a, b) for a in range(p) for b in range(a + 1, p)]
            )
            for a, b in pairs:
                u, v = net.servers[members[a]], net.servers[members[b]]
                total[(min(u, v), max(u, v))] += gbps
        stride *= p
    return total, switch_ports


def astra_network(plan: Plan) -> AstraNetwork | str:
    """The plan's network as ASTRA-sim's analytical backend states one (a Ring, FullyConnected
    or Switch per dimension: astra-network-analytical's NetworkParser), checked by building
    its cables back (`astra_cables`); or why it cannot be stated."""
    from planner.topology.hierarchical import cable_gbps

    n, latency = int(plan.servers), plan.latency_us * 1e3
    direct: Counter[tuple[int, int]] = Counter()
    switch_ports = 0
    for link in plan.links:
        if link.a < n and link.b < n:
            direct[(min(link.a, link.b), max(link.a, link.b))] += link.gbps
        else:
            switch_ports += 1
    identity = tuple(range(n))
    candidate: AstraNetwork | None = None
    if plan.topology == "hierarchical":
        dims, blocks, dim_gbps = plan.extra["dims"], plan.extra["blocks"], plan.extra["dim_gbps"]
        kinds = tuple("Switch" if b == "switch" else "FullyConnected" if b == "fc" or p == 2 else "Ring"
                      for b, p in zip(blocks, dims))  # fmt: skip
        rates = tuple(cable_gbps(b, p, g) for b, p, g in zip(blocks, dims, dim_gbps))
        candidate = AstraNetwork(kinds, tuple(dims), rates, latency, identity)
    elif plan.switches == 1 and not direct and switch_ports == n and len({link.gbps for link in plan.links}) == 1:
        candidate = AstraNetwork(("Switch",), (n,), (plan.links[0].gbps,), latency, identity)
    elif plan.topology == "torus" and "shape" in plan.extra:
        a, b = plan.extra["shape"]  # server (i, j) is i b + j: j varies fastest
        rate = plan.links[0].gbps
        candidate = AstraNetwork(("Ring", "Ring"), (b, a), (rate, rate), latency, identity)
    elif not plan.switches and len(set(direct.values())) == 1:
        rate = next(iter(direct.values()))
        degree = Counter(v for pair in direct for v in pair)
        if len(direct) == n * (n - 1) // 2:
            candidate = AstraNetwork(("FullyConnected",), (n,), (rate,), latency, identity)
        elif n >= 3 and set(degree.values()) == {2} and len(degree) == n:
            order = _cycle(direct, n)
            if order is not None:
                candidate = AstraNetwork(("Ring",), (n,), (rate,), latency, order)
    why = (
        f"ASTRA-sim's analytical network states a topology as one building block per dimension (Ring, "
        f"FullyConnected, Switch; astra-network-analytical's NetworkParser), and this {plan.topology} network of "
        f"{n} servers and {len(plan.links)} cables is none of them nor a product of them"
    )
    if candidate is None:
        return why
    built, ports = astra_cables(candidate)
    same = set(built) == set(direct) and all(math.isclose(built[k], direct[k], rel_tol=1e-9) for k in direct)
    if not same or ports != switch_ports:
        return why
    return candidate


def _cycle(pairs: Counter[tuple[int, int]], n: int) -> tuple[int, ...] | None:
    """The servers in the order of the one cycle ``pairs`` form (each server in two), or
    None when they form several."""
    neighbours: dict[int, list[int]] = {v: [] for v in range(n)}
    for a, b in pairs:
        neighbours[a].append(b)
        neighbours[b].append(a)
    order, prev = [0], -1
    while len(order) < n:
        nxt = next(v for v in neighbours[order[-1]] if v != prev)
        if nxt == order[0]:
            return None
        prev = order[-1]
        order.append(nxt)
    return tuple(order)


def astra_yaml(net: AstraNetwork, scenario: str) -> str:
    """The network configuration file, in the shape of astra-network-analytical's
    input/*.yml (bandwidth in GB/s of 2^30 bytes, latency in ns)."""

    def listed(values: Sequence[Any]) -> str:
        return "[ " + ", ".join(str(v) for v in values) + " ]"

    gbs = [round(g * 1e9 / 8 / GIB, 6) for g in net.gbps]
    lines = [
        f"# ASTRA-sim network configuration (analytical backend), from {scenario} by topolab export.",
        f"# Per link: {', '.join(f'{g:g}' for g in net.gbps)} Gbit/s = the GB/s (2^30 B/s) below.",
    ]
    if net.servers != tuple(range(len(net.servers))):
        lines.append(f"# NPU i is server {list(net.servers)}[i] (the ring's order).")
    else:
        lines.append("# NPU i is server i (dimension 0 varies fastest, as the plan numbers servers).")
    lines += [
        f"topology: {listed(net.topology)}",
        f"npus_count: {listed(net.npus)}",
        f"bandwidth: {listed(gbs)}  # GB/s",
        f"latency: {listed([round(net.latency_ns, 3)] * len(net.npus))}  # ns",
    ]
    return "\n".join(lines) + "\n"


def write_astra(ctx: Context) -> Exported:
    result = Exported("astra-sim")
    net = astra_network(ctx.plan)
    if isinstance(net, str):
        result.lines.append(f"No `astra-sim/network.yml`: {net}.")
        return result
    ctx.write("astra-sim/network.yml", astra_yaml(net, ctx.scenario_path))
    dims = " x ".join(f"{t}({p})" for t, p in zip(net.topology, net.npus))
    result.files.append(Written("astra-sim/network.yml", f"ASTRA-sim's analytical network: {dims}"))
    backend = (
        "congestion-aware or congestion-unaware"
        if len(net.npus) == 1
        else "congestion-unaware (more than one dimension)"
    )
    result.lines.append(
        f"`astra-sim/network.yml` is the plan's network for ASTRA-sim's analytical backend ({backend}): "
        "`--network-configuration=astra-sim/network.yml`. Bandwidth is per link in GB/s of 2^30 bytes, "
        "latency per hop in ns; its comments say which server each NPU is."
    )
    return result


# ---- hosts ---------------------------------------------------------------------------------
PLAN_RATE_MBPS_PER_GBPS = 1000.0  # hosts at the plan's own rates: 1 Gbit/s planned is 1000 Mbit/s


def write_hosts(ctx: Context) -> Exported:
    from contract.emulation import EmulationConfig
    from emulator.hostscripts import host_scripts

    plan = ctx.plan
    if ctx.link_mbps is None:  # a cable of 1 Gbit/s shaped at 1000 Mbit/s: every cable at its planned rate
        config = EmulationConfig(link_mbps=PLAN_RATE_MBPS_PER_GBPS, reference_gbps=1.0)
        rates = "the plan's own rates"
    else:
        config = EmulationConfig(link_mbps=ctx.link_mbps, mtu=ctx.scenario.emulation.mtu)
        rates = f"the emulator's rates ({ctx.link_mbps:g} Mbit/s a {plan.link_gbps:g} Gbit/s cable)"
    result = Exported("hosts")
    for name, text in host_scripts(plan.network, config, plan_name=ctx.scenario.name).items():
        ctx.write(f"hosts/{name}", text)
        result.files.append(Written(f"hosts/{name}", f"server {name[:-3]}'s configuration, at {rates}"))
    result.lines += [
        "`hosts/<server>.sh` configures one server for the plan, as root, idempotently (`ip -batch` and "
        "`tc -batch` text): addresses of each port, forwarding on, the routes (multi-hop next hops; per-plane "
        "rules and tables for multipath plans), static neighbours, and the HTB classes of the cables. The "
        "interface names are variables at the top: `ETH0=enp1s0f0 ETH1=enp1s0f1 ... sh hosts/h0.sh` maps "
        "port p to your NIC (`cabling.csv` says which port goes where); `STATIC_NEIGHBOURS=no` keeps the "
        "NICs' own MAC addresses and lets ARP find the peers.",
        f"The shaping is at {rates}. A script does not undo what an earlier, different plan added.",
    ]
    return result


WRITERS: dict[str, Callable[[Context], Exported]] = {
    "cabling": write_cabling,
    "hosts": write_hosts,
    "plan": write_plan,
    "msccl": write_msccl,
    "nccl": write_nccl,
    "astra-sim": write_astra,
}


# ---- README --------------------------------------------------------------------------------
def readme(ctx: Context, results: Sequence[Exported]) -> str:
    plan = ctx.plan
    lines = [
        f"# {Path(ctx.scenario_path).stem}: the plan, exported",
        "",
        f"`topolab export {ctx.scenario_path}` wrote these files for the {plan.topology} plan of {plan.servers} "
        f"servers and {len(plan.links)} cables ({plan.model or 'no job'}, strategy {plan.strategy or '-'}). "
        "docs/export.md says where each format comes from and what it cannot state.",
        "",
        "| file | what |",
        "|---|---|",
    ]
    for result in results:
        for f in result.files:
            lines.append(f"| `{f.path}` | {f.what} |")
    lines.append("| `README.md` | this file |")
    for result in results:
        lines += ["", f"## {result.format}", ""]
        lines += [f"- {line}" for line in result.lines]
    return "\n".join(lines) + "\n"
