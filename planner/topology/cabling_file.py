"""Cabling files: a topology from the cables of a real cluster, a simulator or a paper.

A cabling file lists every cable of a cluster of servers, in one of three formats (told
apart by content: a file whose first non-blank character is ``{`` is JSON, ``<`` is
GraphML, anything else is CSV):

- **CSV**, one cable a line, the shape of a patch-panel map::

      # a comment; blank lines are skipped, and so is anything after '#'
      server_a,port_a,server_b,port_b,gbps
      0,0,1,0,25
      0,1,2,0

  The header line is optional (when present it is the first line and names these columns,
  ``gbps`` optional). Servers are the integers ``0 .. n-1`` (``h3`` is written ``3``); ports
  are the integers ``0 .. MAX_PORT_NUMBER`` of each server's interfaces; the rate ``gbps``
  (Gbit/s per direction) is optional and an empty or missing one takes the default rate
  (the scenario's ``cluster.link_gbps``).
- **node-link JSON**, as ``networkx.node_link_data`` writes it (``{"nodes": [{"id": 0},
  ...], "edges": [{"source": 0, "target": 1, "gbps": 25, "port_a": 0, "port_b": 0}, ...]}``;
  ``"links"``, the name networkx used before 3.4, is read too), read with
  ``networkx.node_link_graph``. Node ids are integers or digit strings.
- **GraphML**, read with ``networkx.parse_graphml``: node ids are digit strings, the edge
  attribute ``gbps`` is the rate (a ``<key>`` default applies to edges without one).

In JSON and GraphML ``port_a`` is the port at the edge's ``source``, ``port_b`` at its
``target``; an end without one takes the lowest port of its server no other cable uses, in
the order the edges are written (a file with no ports at all gets the numbering the emulator
gives interfaces, `interface_ports`). Cables keep the order and orientation they are written
in (that order numbers the plan's links, so the emulator's interfaces follow it). Parallel
cables between two servers are allowed; a port is used by one cable only.

A bad file is one `CablingFileError` line, ``"{path}: line {k}: {problem}"`` (``edge {i}``
or ``node {i}``, counted from 0 in the file's order, for JSON and GraphML), or
``"{path}: {problem}"`` for what belongs to no line (a gap in the servers' numbers, a
disconnected graph, an empty file). Files are read with `contract.files.read_capped_text`.

**Routes** (`read_routes`): shortest paths by default (`default_routes`: the table every
table-routed topology kind uses, `planner.topology.routing.next_hop_table`, one path per
pair, no ECMP), or a JSON routes file in one of two shapes:

- ``{"next_hop": [[-1, 1, 2, ...], ...]}``: row ``u``, column ``v`` is the server ``u``
  forwards to on the way to ``v`` (``-1`` on the diagonal), ``n`` rows of ``n``;
- ``{"paths": {"0-5": [0, 1, 5], "5-0": [5, 1, 0], ...}}``: the path of every ordered pair
  ``"a-b"``, both ends included. Routes are destination based (the kernel forwards by
  destination), so a path through ``x`` to ``b`` must continue as the path ``"x-b"``.

Every hop must be a cable, every route must end at its destination without a loop, and
every ordered pair of servers must have one; otherwise one line names the file, the pair
and the hop.

`cabling_csv` writes a plan's cables in the CSV format (ports numbered as the emulator
numbers interfaces, `interface_ports`), `hamiltonian_ring` finds a ring order over the
cables when one exists (rings where a Hamiltonian ring exists, forest packing otherwise),
and `circulant_strides` recognises a TopoOpt circulant, so a TopoOpt plan written out and
read back can be routed and ringed as TopoOpt did it.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from contract.files import FileInputError, read_capped_text
from contract.network import Link

from .baseline_graphs import ring_order
from .routing import next_hop_table

MAX_CABLING_BYTES = 16 << 20
"""Largest cabling file read: 4096 servers x 64 ports in CSV is about 3 MB, GraphML 4x that."""
MAX_ROUTES_BYTES = 64 << 20
"""Largest routes file read: a next-hop table of 2048 servers is about 20 MB of JSON."""
MAX_CABLING_SERVERS = 4096
"""The most servers a cabling file may name (the scenario's ``cluster.servers`` maximum)."""
MAX_CABLES_PER_SERVER = 64
"""The most cables at one server (the scenario's ``cluster.degree`` maximum)."""
MAX_PORT_NUMBER = 1023
"""The highest port number of a server (ports need not be contiguous, but stay small)."""
MIN_CABLE_GBPS = 0.001
"""The slowest cable (the scenario's ``cluster.link_gbps`` minimum: 1 Mbit/s)."""
MAX_CABLE_GBPS = 1600.0
"""The fastest cable (the scenario's ``cluster.link_gbps`` maximum: beyond any shipping NIC)."""
RING_SEARCH_STEPS = 200_000
"""Steps of `hamiltonian_ring`'s bounded depth-first search (well under a second)."""

CSV_COLUMNS = ("server_a", "port_a", "server_b", "port_b", "gbps")
CABLING_FORMATS = "CSV server_a,port_a,server_b,port_b[,gbps], node-link JSON or GraphML"

_INTEGER = re.compile(r"[0-9]{1,9}")
_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,4})?")
_PAIR = re.compile(r"([0-9]{1,9})-([0-9]{1,9})")


class CablingFileError(FileInputError):
    """A cabling or routes file that cannot be used: ``path``, ``where`` in it (``line 7``,
    ``edge 3``, ``pair 2-5``; empty for the whole file) and the ``problem``, as one line."""

    def __init__(self, path: str | os.PathLike[str], where: str, problem: str):
        self.where = where
        super().__init__(path, f"{where}: {problem}" if where else problem)


class Cable(NamedTuple):
    """One cable: server ``a``'s port ``port_a`` to server ``b``'s port ``port_b``, ``gbps``
    per direction, as the file writes it (``a`` may be the larger)."""

    a: int
    port_a: int
    b: int
    port_b: int
    gbps: float


@dataclass(frozen=True)
class Cabling:
    """The cables of ``servers`` servers (numbered ``0 .. servers-1``), in file order."""

    servers: int
    cables: tuple[Cable, ...]

    def cable_pairs(self) -> list[tuple[int, int]]:
        """``(a, b)`` of every cable, in order (parallel cables repeated)."""
        return [(c.a, c.b) for c in self.cables]

    @property
    def gbps(self) -> tuple[float, ...]:
        """Each cable's rate, in order."""
        return tuple(c.gbps for c in self.cables)

    def ports(self) -> tuple[tuple[int, int], ...]:
        """``(port_a, port_b)`` of every cable, in order (what `cabling_csv` takes back)."""
        return tuple((c.port_a, c.port_b) for c in self.cables)

    def links(self) -> tuple[Link, ...]:
        """The cables as a plan's links, in order."""
        return tuple(Link(c.a, c.b, c.gbps) for c in self.cables)

    def cables_per_server(self) -> list[int]:
        """How many cables (ports in use) each server has."""
        count = [0] * self.servers
        for c in self.cables:
            count[c.a] += 1
            count[c.b] += 1
        return count

    def degree(self) -> int:
        """The most ports any server uses (the scenario's ``cluster.degree``)."""
        return max(self.cables_per_server(), default=0)


@dataclass(frozen=True)
class _Limits:
    max_servers: int
    max_cables_per_server: int
    min_gbps: float
    max_gbps: float


@dataclass
class _Entry:
    """One cable as a file states it, before the whole-file checks (ports may be missing)."""

    where: str
    a: int
    port_a: int | None
    b: int
    port_b: int | None
    gbps: float


# ---- reading cabling files -------------------------------------------------------------


def read_cabling(
    path: str | os.PathLike[str],
    default_gbps: float,
    *,
    max_servers: int = MAX_CABLING_SERVERS,
    max_cables_per_server: int = MAX_CABLES_PER_SERVER,
    min_gbps: float = MIN_CABLE_GBPS,
    max_gbps: float = MAX_CABLE_GBPS,
) -> Cabling:
    """The cabling in the file ``path`` (CSV, node-link JSON or GraphML, see the module's
    docstring); a cable without a rate runs at ``default_gbps``. A file that cannot be used is
    one `CablingFileError` line naming the file, the line (or edge, or node) and the problem."""
    text = read_capped_text(path, MAX_CABLING_BYTES, "cabling file")
    return parse_cabling(
        text,
        path,
        default_gbps,
        max_servers=max_servers,
        max_cables_per_server=max_cables_per_server,
        min_gbps=min_gbps,
        max_gbps=max_gbps,
    )


def parse_cabling(
    text: str,
    path: str | os.PathLike[str],
    default_gbps: float,
    *,
    max_servers: int = MAX_CABLING_SERVERS,
    max_cables_per_server: int = MAX_CABLES_PER_SERVER,
    min_gbps: float = MIN_CABLE_GBPS,
    max_gbps: float = MAX_CABLE_GBPS,
) -> Cabling:
    """`read_cabling` of a file's ``text`` already read (``path`` names it in messages)."""
    if not (math.isfinite(default_gbps) and default_gbps > 0):
        raise ValueError(f"default rate {default_gbps!r} Gbps is not a positive number")
    default_gbps = float(default_gbps)
    limits = _Limits(max_servers, max_cables_per_server, min_gbps, max_gbps)
    start = text.lstrip()[:1]
    if start == "{" or start == "[":
        entries, listed = _json_entries(text, path, default_gbps, limits)
    elif start == "<":
        entries, listed = _graphml_entries(text, path, default_gbps, limits)
    else:
        entries, listed = _csv_entries(text, path, default_gbps, limits), set()
    return _assemble(entries, listed, path, limits)


def _csv_entries(text: str, path: str | os.PathLike[str], default_gbps: float, limits: _Limits) -> list[_Entry]:
    entries: list[_Entry] = []
    first_content = True
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"line {number}"
        fields = [f.strip().strip('"').strip() for f in line.split(",")]
        if first_content:
            first_content = False
            if fields and fields[0].lower() == CSV_COLUMNS[0]:
                names = tuple(f.lower() for f in fields)
                if names not in (CSV_COLUMNS[:4], CSV_COLUMNS):
                    raise CablingFileError(
                        path, where, f"header {_shown(line)}: expected {','.join(CSV_COLUMNS[:4])}[,gbps]"
                    )
                continue
            if len(fields) not in (4, 5) and not _INTEGER.fullmatch(fields[0]):
                raise CablingFileError(
                    path, where, f"{_shown(line)} is not a cable: not a cabling file ({CABLING_FORMATS})"
                )
        if len(fields) not in (4, 5):
            raise CablingFileError(
                path,
                where,
                f"{len(fields)} field(s) in {_shown(line)}: a cable is server_a,port_a,server_b,port_b[,gbps]",
            )
        a = _server(fields[0], path, where, limits)
        port_a = _port(fields[1], path, where)
        b = _server(fields[2], path, where, limits)
        port_b = _port(fields[3], path, where)
        gbps = _rate(fields[4], path, where, limits) if len(fields) == 5 and fields[4] else default_gbps
        entries.append(_Entry(where, a, port_a, b, port_b, gbps))
    return entries


def _json_entries(
    text: str, path: str | os.PathLike[str], default_gbps: float, limits: _Limits
) -> tuple[list[_Entry], set[int]]:
    import networkx as nx  # here, not at the top: 0.3 s to import, needed only for these files

    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise CablingFileError(path, f"line {err.lineno}", f"not JSON ({err.msg})") from None
    except RecursionError:
        raise CablingFileError(path, "", "JSON nested too deeply: not node-link JSON") from None
    if not isinstance(data, dict):
        raise CablingFileError(path, "", "JSON but not an object with 'nodes' and 'edges': not node-link JSON")
    edges_key = "edges" if "edges" in data else "links" if "links" in data else None
    if edges_key is None or not isinstance(data.get("nodes"), list) or not isinstance(data[edges_key], list):
        raise CablingFileError(path, "", "JSON without the lists 'nodes' and 'edges': not node-link JSON")
    if data.get("directed", False):
        raise CablingFileError(path, "", 'a directed graph: cables are full duplex, write "directed": false')
    listed: set[int] = set()
    for i, node in enumerate(data["nodes"]):
        where = f"node {i}"
        if not isinstance(node, dict) or "id" not in node:
            raise CablingFileError(path, where, "not an object with an 'id'")
        server = _server_id(node["id"], path, where, limits)
        if server in listed:
            raise CablingFileError(path, where, f"server {server} is listed twice")
        listed.add(server)
    ends: list[tuple[Any, Any]] = []
    for i, edge in enumerate(data[edges_key]):
        where = f"edge {i}"
        if not isinstance(edge, dict) or "source" not in edge or "target" not in edge:
            raise CablingFileError(path, where, "not an object with a 'source' and a 'target'")
        for end in ("source", "target"):
            _server_id(edge[end], path, where, limits)
        if isinstance(edge.get("key"), (dict, list)):
            raise CablingFileError(path, where, "its 'key' is not a number or a string")
        ends.append((edge["source"], edge["target"]))
    document = dict(data, multigraph=True)  # every edge written is a cable, parallel ones too
    try:
        graph = nx.node_link_graph(document, directed=False, multigraph=True, edges=edges_key)
    except (nx.NetworkXError, TypeError, ValueError, KeyError, AttributeError, IndexError) as err:
        raise CablingFileError(path, "", f"not node-link JSON ({err})") from None
    return _graph_entries(graph, ends, path, default_gbps, limits, {}), listed


def _graphml_entries(
    text: str, path: str | os.PathLike[str], default_gbps: float, limits: _Limits
) -> tuple[list[_Entry], set[int]]:
    import xml.etree.ElementTree as ET

    import networkx as nx  # here, not at the top: 0.3 s to import, needed only for these files

    if "<!ENTITY" in text:
        raise CablingFileError(path, "", "XML that declares entities: not accepted in a cabling file")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise CablingFileError(path, f"line {err.position[0]}", f"not XML ({_xml_problem(err)})") from None
    namespace = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    if root.tag != f"{namespace}graphml":
        raise CablingFileError(path, "", f"XML whose root is <{root.tag}>, not <graphml>: not GraphML")
    graph_xml = root.find(f"{namespace}graph")
    if graph_xml is None:
        raise CablingFileError(path, "", "GraphML without a <graph>")
    if graph_xml.find(f".//{namespace}graph") is not None:
        raise CablingFileError(path, "", "GraphML with nested graphs: write every server and cable in one <graph>")
    if graph_xml.get("edgedefault") == "directed":
        raise CablingFileError(path, "", 'a directed graph: cables are full duplex, write edgedefault="undirected"')
    listed: set[int] = set()
    for i, node in enumerate(graph_xml.findall(f"{namespace}node")):
        where = f"node {i}"
        server = _server_id(node.get("id"), path, where, limits)
        if server in listed:
            raise CablingFileError(path, where, f"server {server} is listed twice")
        listed.add(server)
    ends: list[tuple[Any, Any]] = []
    for i, edge in enumerate(graph_xml.findall(f"{namespace}edge")):
        where = f"edge {i}"
        if edge.get("directed") == "true":
            raise CablingFileError(path, where, "a directed edge: cables are full duplex")
        for end in ("source", "target"):
            _server_id(edge.get(end), path, where, limits)
        ends.append((edge.get("source"), edge.get("target")))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # GraphML <port> tags: not what a cable's port is
            graph = nx.parse_graphml(text, force_multigraph=True)
    except (ET.ParseError, nx.NetworkXError, TypeError, ValueError, KeyError, AttributeError, IndexError) as err:
        raise CablingFileError(path, "", f"not GraphML ({err})") from None
    defaults = graph.graph.get("edge_default", {})
    return _graph_entries(graph, ends, path, default_gbps, limits, defaults), listed


def _graph_entries(
    graph: Any,
    ends: list[tuple[Any, Any]],
    path: str | os.PathLike[str],
    default_gbps: float,
    limits: _Limits,
    defaults: dict[str, Any],
) -> list[_Entry]:
    """The cables of networkx's multigraph ``graph`` in the file's order: ``ends`` are the
    edges' (source, target) as written; the edges between two nodes keep their file order
    among themselves in networkx's multigraph, so the i-th edge written between u and v is
    the i-th key of ``graph[u][v]``."""
    keys: dict[frozenset[Any], Iterator[Any]] = {}
    entries = []
    for i, (source, target) in enumerate(ends):
        where = f"edge {i}"
        pair = frozenset((source, target))
        if pair not in keys:
            keys[pair] = iter(list(graph[source][target]))
        key = next(keys[pair], None)
        if key is None:
            raise CablingFileError(
                path,
                where,
                "repeats the key (or id) of an earlier edge between the same servers: give each cable its own",
            )
        data = {**defaults, **graph[source][target][key]}
        a = _server_id(source, path, where, limits)
        b = _server_id(target, path, where, limits)
        gbps = _rate(data["gbps"], path, where, limits) if data.get("gbps") not in (None, "") else default_gbps
        port_a = _port(data["port_a"], path, where) if data.get("port_a") not in (None, "") else None
        port_b = _port(data["port_b"], path, where) if data.get("port_b") not in (None, "") else None
        entries.append(_Entry(where, a, port_a, b, port_b, gbps))
    return entries


def _xml_problem(err: Exception) -> str:
    return str(err).split(":", 1)[0]


def _assemble(entries: list[_Entry], listed: set[int], path: str | os.PathLike[str], limits: _Limits) -> Cabling:
    """The whole-file checks: no self-loop, each port used once, at most the ports a server
    may have, servers numbered without gaps, every server reachable; missing ports assigned."""
    if not entries:
        raise CablingFileError(path, "", "no cables: an empty cabling file")
    used: dict[tuple[int, int], str] = {}
    cables_at: dict[int, int] = {}
    for e in entries:
        if e.a == e.b:
            raise CablingFileError(path, e.where, f"server {e.a} is cabled to itself")
        for server, port in ((e.a, e.port_a), (e.b, e.port_b)):
            cables_at[server] = cables_at.get(server, 0) + 1
            if cables_at[server] > limits.max_cables_per_server:
                raise CablingFileError(
                    path, e.where, f"server {server} has more than {limits.max_cables_per_server} cables"
                )
            if port is None:
                continue
            if (server, port) in used:
                raise CablingFileError(
                    path, e.where, f"port {port} of server {server} is used twice (first by {used[server, port]})"
                )
            used[server, port] = e.where
    next_free: dict[int, int] = {}
    cables = []
    for e in entries:
        ports = []
        for server, port in ((e.a, e.port_a), (e.b, e.port_b)):
            if port is None:
                port = next_free.get(server, 0)
                while (server, port) in used:
                    port += 1
                used[server, port] = e.where
                next_free[server] = port + 1
            ports.append(port)
        cables.append(Cable(e.a, ports[0], e.b, ports[1], e.gbps))
    named = listed | set(cables_at)
    servers = max(named) + 1
    missing = sorted(set(range(servers)) - named)
    if missing:
        raise CablingFileError(
            path,
            "",
            f"no server {missing[0]}: servers are numbered 0..{servers - 1} without gaps "
            f"({len(missing)} number(s) missing below the highest, {servers - 1})",
        )
    unreached = _unreached_from_zero(servers, [(c.a, c.b) for c in cables])
    if unreached:
        listed_text = ", ".join(map(str, unreached[:5])) + (", ..." if len(unreached) > 5 else "")
        raise CablingFileError(
            path,
            "",
            f"disconnected: {len(unreached)} of {servers} servers ({listed_text}) have no path of cables to server 0",
        )
    return Cabling(servers, tuple(cables))


def _unreached_from_zero(servers: int, pairs: list[tuple[int, int]]) -> list[int]:
    adjacent: list[list[int]] = [[] for _ in range(servers)]
    for a, b in pairs:
        adjacent[a].append(b)
        adjacent[b].append(a)
    seen = [False] * servers
    seen[0] = True
    stack = [0]
    while stack:
        for nxt in adjacent[stack.pop()]:
            if not seen[nxt]:
                seen[nxt] = True
                stack.append(nxt)
    return [s for s in range(servers) if not seen[s]]


def _shown(text: str, width: int = 40) -> str:
    return repr(text if len(text) <= width else text[:width] + "...")


def _server(text: str, path: str | os.PathLike[str], where: str, limits: _Limits, what: str = "server") -> int:
    if not _INTEGER.fullmatch(text):
        hint = f" (write {text[1:]})" if re.fullmatch(r"[hHnN][0-9]+", text) else ""
        raise CablingFileError(path, where, f"{what} {_shown(text)} is not a server number 0..n-1{hint}")
    server = int(text)
    if server >= limits.max_servers:
        raise CablingFileError(
            path, where, f"server {server}: at most {limits.max_servers} servers (0..{limits.max_servers - 1})"
        )
    return server


def _server_id(value: Any, path: str | os.PathLike[str], where: str, limits: _Limits) -> int:
    """A JSON or GraphML node id: an integer or a digit string."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise CablingFileError(path, where, f"node id {value!r} is not a server number 0..n-1")
    if isinstance(value, int):
        if value < 0:
            raise CablingFileError(path, where, f"server {value} is negative: servers are numbered 0..n-1")
        value = str(value)
    return _server(value.strip(), path, where, limits, "node id")


def _port(value: Any, path: str | os.PathLike[str], where: str) -> int:
    text = str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else None
    if text is None or not _INTEGER.fullmatch(text) or int(text) > MAX_PORT_NUMBER:
        raise CablingFileError(path, where, f"port {value!r} is not a port number 0..{MAX_PORT_NUMBER}")
    return int(text)


def _rate(value: Any, path: str | os.PathLike[str], where: str, limits: _Limits) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise CablingFileError(path, where, f"rate {value!r} is not a number of Gbit/s")
    if isinstance(value, str):
        text = value.strip()
        if text.lower().lstrip("+-") in ("nan", "inf", "infinity"):
            raise CablingFileError(path, where, f"rate {text!r} is not finite")
        if not _NUMBER.fullmatch(text):
            raise CablingFileError(path, where, f"rate {_shown(text)} is not a number of Gbit/s")
        value = float(text)
    gbps = float(value) if not isinstance(value, int) else float(max(-(2**60), min(value, 2**60)))
    if not math.isfinite(gbps):
        raise CablingFileError(path, where, f"rate {value!r} is not finite")
    if gbps <= 0:
        raise CablingFileError(path, where, f"rate {gbps:g} Gbps: a cable's rate must be > 0")
    if not limits.min_gbps <= gbps <= limits.max_gbps:
        raise CablingFileError(
            path, where, f"rate {gbps:g} Gbps is outside {limits.min_gbps:g}..{limits.max_gbps:g} Gbps"
        )
    return gbps


# ---- routes ----------------------------------------------------------------------------


def default_routes(cabling: Cabling) -> np.ndarray:
    """Shortest-path next hops over the cabling (``servers x servers`` int32, -1 on the
    diagonal): `planner.topology.routing.next_hop_table`, the table of every table-routed
    topology kind. One path per pair (no ECMP), the same on every call: each destination's
    shortest-path tree as scipy's Dijkstra grows it."""
    return next_hop_table(cabling.servers, cabling.cable_pairs())


def read_routes(path: str | os.PathLike[str], cabling: Cabling) -> np.ndarray:
    """The next-hop table (``servers x servers`` int32, -1 on the diagonal) of the routes
    file ``path`` (``{"next_hop": [...]}`` or ``{"paths": {...}}``, see the module's
    docstring), checked against ``cabling``: every hop a cable, every route ending at its
    destination without a loop, every ordered pair routed. A bad file is one
    `CablingFileError` line naming the file, the pair and the hop."""
    text = read_capped_text(path, MAX_ROUTES_BYTES, "routes file")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise CablingFileError(path, f"line {err.lineno}", f"not JSON ({err.msg}): not a routes file") from None
    except RecursionError:
        raise CablingFileError(path, "", "JSON nested too deeply: not a routes file") from None
    shapes = ("next_hop", "paths")
    if not isinstance(doc, dict) or len(doc) != 1 or next(iter(doc)) not in shapes:
        found = sorted(doc) if isinstance(doc, dict) else type(doc).__name__
        raise CablingFileError(
            path, "", f"a routes file is an object with one key, 'next_hop' or 'paths' (found {found})"
        )
    n = cabling.servers
    if "next_hop" in doc:
        table = _next_hop_rows(doc["next_hop"], n, path)
        check_next_hop(table, cabling, path)
        return table
    return _paths_table(doc["paths"], cabling, path)


def _next_hop_rows(rows: Any, n: int, path: str | os.PathLike[str]) -> np.ndarray:
    if not isinstance(rows, list) or len(rows) != n:
        got = f"{len(rows)} rows" if isinstance(rows, list) else type(rows).__name__
        raise CablingFileError(path, "next_hop", f"must be {n} rows of {n} servers (one per server), got {got}")
    for u, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != n:
            got = f"{len(row)} entries" if isinstance(row, list) else type(row).__name__
            raise CablingFileError(path, f"next_hop[{u}]", f"must be {n} servers, got {got}")
        if not all(type(hop) is int and -1 <= hop < n for hop in row):  # bool and float are no server
            v = next(v for v, hop in enumerate(row) if type(hop) is not int or not -1 <= hop < n)
            raise CablingFileError(path, f"next_hop[{u}][{v}]", f"{row[v]!r} is not a server 0..{n - 1}")
    table = np.asarray(rows, dtype=np.int64) if n else np.zeros((0, 0), dtype=np.int64)
    diagonal = np.eye(n, dtype=bool)
    bad = np.argwhere((diagonal & (table != -1)) | (~diagonal & (table < 0)))
    if len(bad):
        u, v = (int(x) for x in bad[0])
        if u == v:
            raise CablingFileError(
                path, f"next_hop[{u}][{v}]", f"must be -1 (a server's route to itself), got {rows[u][v]}"
            )
        raise CablingFileError(path, f"pair {u}-{v}", f"next hop {rows[u][v]} is not a server 0..{n - 1}")
    return table.astype(np.int32)


def _paths_table(paths: Any, cabling: Cabling, path: str | os.PathLike[str]) -> np.ndarray:
    n = cabling.servers
    if not isinstance(paths, dict):
        raise CablingFileError(path, "paths", 'must map "a-b" to the path [a, ..., b] of every ordered pair')
    adjacent = _adjacency(cabling)
    table = np.full((n, n), -1, dtype=np.int32)
    given: dict[tuple[int, int], list[int]] = {}
    for key, route in paths.items():
        match = _PAIR.fullmatch(key)
        if not match:
            raise CablingFileError(path, f"pair {key!r}", 'not "a-b" with servers a and b')
        a, b = int(match[1]), int(match[2])
        where = f"pair {a}-{b}"
        if not (a < n and b < n) or a == b:
            raise CablingFileError(path, where, f"not a pair of two servers 0..{n - 1}")
        if (a, b) in given:
            raise CablingFileError(path, where, "given twice")
        if (
            not isinstance(route, list)
            or len(route) < 2
            or len(route) > n
            or any(isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < n for x in route)
        ):
            raise CablingFileError(
                path, where, f"the path must be 2..{n} servers [{a}, ..., {b}], got {_shown(str(route))}"
            )
        if route[0] != a or route[-1] != b:
            raise CablingFileError(path, where, f"the path {route} does not go from {a} to {b}")
        for x, y in zip(route, route[1:]):
            if not adjacent[x, y]:
                raise CablingFileError(path, where, f"hop {x}->{y} is not a cable")
        if len(set(route)) != len(route):
            twice = next(x for i, x in enumerate(route) if x in route[:i])
            raise CablingFileError(path, where, f"the path {route} visits server {twice} twice (a loop)")
        given[a, b] = route
        table[a, b] = route[1]
    for a in range(n):
        for b in range(n):
            if a != b and (a, b) not in given:
                raise CablingFileError(path, f"pair {a}-{b}", "has no path: a routes file routes every ordered pair")
    for (a, b), route in sorted(given.items()):
        for x, y in zip(route[1:-1], route[2:]):
            if table[x, b] != y:
                raise CablingFileError(
                    path,
                    f"pair {a}-{b}",
                    f"hop {x}->{y} differs from pair {x}-{b}'s first hop {x}->{table[x, b]}: routes are destination "
                    f"based, so a path through {x} to {b} continues as the path {x}-{b}",
                )
    check_next_hop(table, cabling, path)
    return table


def _adjacency(cabling: Cabling) -> np.ndarray:
    n = cabling.servers
    adjacent = np.zeros((n, n), dtype=bool)
    for a, b in cabling.cable_pairs():
        adjacent[a, b] = adjacent[b, a] = True
    return adjacent


def check_next_hop(table: np.ndarray, cabling: Cabling, path: str | os.PathLike[str]) -> None:
    """Refuse (one `CablingFileError` line naming ``path``, the pair and the hop) a next-hop
    table over ``cabling`` with a hop that is no cable or a route that does not arrive."""
    n = cabling.servers
    if table.shape != (n, n):
        raise CablingFileError(path, "", f"the routes are {table.shape}, not {n} x {n}")
    adjacent = _adjacency(cabling)
    off_diagonal = ~np.eye(n, dtype=bool)
    valid = (table >= 0) & (table < n)
    hop_ok = np.zeros((n, n), dtype=bool)
    rows, cols = np.nonzero(valid)
    hop_ok[rows, cols] = adjacent[rows, table[rows, cols]]
    bad = np.argwhere(off_diagonal & ~hop_ok)
    if len(bad):
        u, v = (int(x) for x in bad[0])
        hop = int(table[u, v])
        problem = f"hop {u}->{hop} is not a cable" if 0 <= hop < n else f"next hop {hop} is not a server"
        raise CablingFileError(path, f"pair {u}-{v}", problem)
    current = np.tile(np.arange(n, dtype=np.int32)[:, None], (1, n))  # current[u][v]: where u's packet to v is
    target = np.arange(n, dtype=np.int32)[None, :]  # broadcast over the rows
    for _ in range(n):
        moving = current != target
        if not moving.any():
            return
        current = np.where(moving, table[current, target], current)
    u, v = (int(x) for x in np.argwhere(current != target)[0])
    walk = [u]
    while len(walk) <= n and walk[-1] != v and walk.count(walk[-1]) == 1:
        walk.append(int(table[walk[-1], v]))
    raise CablingFileError(
        path, f"pair {u}-{v}", f"the route loops ({'->'.join(map(str, walk))}) and never reaches server {v}"
    )


# ---- writing ---------------------------------------------------------------------------


def interface_ports(links: Iterable[Link]) -> list[tuple[int, int]]:
    """``(port_a, port_b)`` of every link as the emulator numbers interfaces
    (``emulator.addressing.ports_of``): the j-th link, in plan order, that touches node ``u``
    is ``u``'s port ``j`` (interface ``h<u>-eth<j>``)."""
    count: dict[int, int] = {}
    ports = []
    for link in links:
        port_a = count.get(link.a, 0)
        count[link.a] = port_a + 1
        port_b = count.get(link.b, 0)
        count[link.b] = port_b + 1
        ports.append((port_a, port_b))
    return ports


def cabling_csv(links: Sequence[Link], ports: Sequence[tuple[int, int]] | None = None) -> str:
    """The cables ``links`` as a cabling CSV (header line, one cable a line, in order, the
    format `read_cabling` reads): ``ports[k]`` is ``(port_a, port_b)`` of link ``k``, by
    default the emulator's interface numbers (`interface_ports`). Rates are written exactly,
    so ``read_cabling`` gives back the same links, ports and rates."""
    ports = interface_ports(links) if ports is None else ports
    if len(ports) != len(links):
        raise ValueError(f"{len(ports)} port pairs for {len(links)} cables")
    lines = [",".join(CSV_COLUMNS)]
    for link, (port_a, port_b) in zip(links, ports):
        lines.append(f"{link.a},{port_a},{link.b},{port_b},{_gbps_text(link.gbps)}")
    return "\n".join(lines) + "\n"


def _gbps_text(gbps: float) -> str:
    """``25`` for 25.0, else the shortest text that reads back as the same float."""
    return str(int(gbps)) if float(gbps).is_integer() and abs(gbps) < 2**53 else repr(float(gbps))


# ---- rings -----------------------------------------------------------------------------


def hamiltonian_ring(cabling: Cabling, max_steps: int = RING_SEARCH_STEPS) -> tuple[int, ...] | None:
    """A ring order over every server in which consecutive servers (and the last and the
    first) are cabled, or None when none is found: a server with fewer than two neighbours
    has none; otherwise the obvious candidates are tried (the identity order, every stride
    order ``i * s mod n``, the Gray code ``i ^ (i >> 1)`` when n is a power of two), then a
    depth-first search bounded by ``max_steps`` (`baseline_graphs.ring_order`, Warnsdorff's
    rule). None therefore means "none exists" for small graphs the search exhausts, and "none
    found" for large ones. The order starts at server 0."""
    n = cabling.servers
    neighbours: list[set[int]] = [set() for _ in range(n)]
    for a, b in cabling.cable_pairs():
        neighbours[a].add(b)
        neighbours[b].add(a)
    if n == 2:
        return (0, 1)  # connected: cabled
    if any(len(s) < 2 for s in neighbours):
        return None

    def is_ring(order: Sequence[int]) -> bool:
        return all(order[i - 1] in neighbours[order[i]] for i in range(n))

    for stride in range(1, n):
        if stride in neighbours[0] and math.gcd(stride, n) == 1:
            order = [(i * stride) % n for i in range(n)]
            if is_ring(order):
                return tuple(order)
    if n & (n - 1) == 0:
        gray = [i ^ (i >> 1) for i in range(n)]
        if is_ring(gray):
            return tuple(gray)
    order = ring_order(n, cabling.cable_pairs(), budget=max_steps)
    return tuple(order) if len(order) == n and is_ring(order) else None


def circulant_strides(cabling: Cabling) -> tuple[int, ...] | None:
    """The strides ``p`` (ascending, ``1 <= p <= n/2``, repeated for parallel copies) whose
    circulant C_n(strides) is exactly this cabling, as TopoOpt wires it (cable ``i -- i+p
    mod n`` for every server ``i`` and stride ``p``, `totient.circulant_cables`), or None
    when it is no circulant. A circulant read from a file can then be routed and ringed as
    the TopoOpt kind does (coin change over the strides, a ring per stride) instead of by
    `default_routes`, whose shortest paths break ties differently."""
    from collections import Counter

    n = cabling.servers
    pairs = Counter(frozenset(pair) for pair in cabling.cable_pairs())
    per_stride = Counter(min((b - a) % n, (a - b) % n) for a, b in cabling.cable_pairs())
    strides: list[int] = []
    for stride, count in sorted(per_stride.items()):
        if count % n:
            return None
        strides += [stride] * (count // n)
    wired = Counter(frozenset((i, (i + p) % n)) for p in strides for i in range(n))
    return tuple(strides) if wired == pairs else None
