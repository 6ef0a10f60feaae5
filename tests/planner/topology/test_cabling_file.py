"""Cabling files (planner.topology.cabling_file): the three formats agree, a plan's cables
round-trip through the CSV writer, routes files are checked against the cables, every bad
file is one line naming the file and the line, and ring orders are found where they exist."""

from __future__ import annotations

import json
import os
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from contract.errors import UsageError
from contract.network import Link, Routes, coin_change_first_strides, next_hop_array
from planner.topology.baseline_graphs import ring_cables, torus_cables
from planner.topology.cabling_file import (
    MAX_CABLING_BYTES,
    Cable,
    Cabling,
    CablingFileError,
    cabling_csv,
    circulant_strides,
    default_routes,
    hamiltonian_ring,
    interface_ports,
    read_cabling,
    read_routes,
)
from planner.topology.routing import next_hop_table

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "cabling"
HYPERCUBE_FILES = ["hypercube-16.csv", "hypercube-16.json", "hypercube-16.graphml"]


def _hypercube(default_gbps: float = 25.0) -> Cabling:
    return read_cabling(FIXTURES / "hypercube-16.csv", default_gbps)


def _written(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def topoopt12():
    from planner.build import build_plan
    from planner.scenario import load_scenario

    return build_plan(load_scenario(str(Path(__file__).resolve().parents[3] / "scenarios" / "topoopt-12.toml")))


# ---- the three formats -------------------------------------------------------------------


@pytest.mark.parametrize("default_gbps", [25.0, 10.0])
def test_hypercube_reads_the_same_from_csv_json_and_graphml(default_gbps):
    cablings = [read_cabling(FIXTURES / name, default_gbps) for name in HYPERCUBE_FILES]
    assert cablings[0] == cablings[1] == cablings[2]
    hypercube = cablings[0]
    assert hypercube.servers == 16 and len(hypercube.cables) == 32 and hypercube.degree() == 4
    assert hypercube.cables_per_server() == [4] * 16
    for cable in hypercube.cables:  # port k of server i goes across dimension k
        assert cable.b == cable.a ^ (1 << cable.port_a) and cable.port_a == cable.port_b
        assert cable.gbps == (25.0 if cable.port_a < 3 else default_gbps)  # dimension 3 gives no rate
    assert hypercube.cable_pairs()[:4] == [(0, 1), (0, 2), (0, 4), (0, 8)]
    assert hypercube.links()[3] == Link(0, 8, default_gbps)


def test_node_link_json_as_networkx_writes_it_reads_the_same(tmp_path):
    """``nx.node_link_data`` of a multigraph (``edges``, and ``links`` as networkx before 3.4
    wrote it): the rates and ports as edge attributes."""
    hypercube = _hypercube()
    graph = nx.MultiGraph()
    graph.add_nodes_from(range(16))
    for c in hypercube.cables:
        graph.add_edge(c.a, c.b, gbps=c.gbps, port_a=c.port_a, port_b=c.port_b)
    data = nx.node_link_data(graph, edges="edges")
    assert read_cabling(_written(tmp_path, "new.json", json.dumps(data)), 1.0) == hypercube
    old = nx.node_link_data(graph, edges="links")
    assert read_cabling(_written(tmp_path, "old.json", json.dumps(old)), 1.0) == hypercube


def test_graphml_as_networkx_writes_it_reads_the_same(tmp_path):
    hypercube = _hypercube()
    graph = nx.MultiGraph()
    graph.add_nodes_from(range(16))  # networkx writes edges node by node, in node order
    for c in hypercube.cables:
        graph.add_edge(c.a, c.b, gbps=c.gbps, port_a=c.port_a, port_b=c.port_b)
    path = tmp_path / "written.graphml"
    nx.write_graphml(graph, path)
    assert read_cabling(path, 1.0) == hypercube


def test_ports_left_out_are_assigned_in_order_and_parallel_cables_kept(tmp_path):
    """Without ports, each end takes its server's lowest free port in the order written:
    the emulator's interface numbering; ports given are kept; parallel cables stay two."""
    text = json.dumps(
        {
            "nodes": [{"id": "0"}, {"id": "1"}, {"id": "2"}],
            "edges": [
                {"source": 0, "target": 1},
                {"source": 0, "target": 1, "gbps": 40},
                {"source": 1, "target": 2, "port_a": 0},
                {"source": 2, "target": 0},
            ],
        }
    )
    cabling = read_cabling(_written(tmp_path, "g.json", text), 25)
    assert cabling.cables == (
        Cable(0, 0, 1, 1, 25.0),  # server 1's port 0 is taken by the third edge
        Cable(0, 1, 1, 2, 40.0),
        Cable(1, 0, 2, 0, 25.0),
        Cable(2, 1, 0, 2, 25.0),
    )
    plain = read_cabling(_written(tmp_path, "plain.graphml", _graphml([(0, 1), (1, 2), (2, 0), (0, 1)])), 25)
    assert list(plain.ports()) == interface_ports(plain.links())


def test_csv_header_comments_blank_lines_and_quotes_are_optional(tmp_path):
    text = '\n# patch panel, rack 4\n\n0,0,1,0   # first\n"1",1,2,0,12.5\n2,1,0,1,\n'
    cabling = read_cabling(_written(tmp_path, "c.txt", text), 25)
    assert cabling.cables == (Cable(0, 0, 1, 0, 25.0), Cable(1, 1, 2, 0, 12.5), Cable(2, 1, 0, 1, 25.0))
    with_header = "SERVER_A,port_a,server_b,port_b\n0,0,1,0\n1,1,2,0,12.5\n2,1,0,1\n"
    assert read_cabling(_written(tmp_path, "h.csv", with_header), 25) == cabling


# ---- the CSV writer's round trip ---------------------------------------------------------


def test_topoopt12_cables_round_trip_through_the_csv(tmp_path, topoopt12):
    text = cabling_csv(topoopt12.links)
    assert text.splitlines()[0] == "server_a,port_a,server_b,port_b,gbps"
    cabling = read_cabling(_written(tmp_path, "cabling.csv", text), 1.0)
    assert len(cabling.cables) == 24 and cabling.servers == 12 and cabling.degree() == 4
    assert cabling.links() == topoopt12.links  # same cables, order, orientation and rates
    assert list(cabling.ports()) == interface_ports(topoopt12.links)
    for server in range(12):  # every server's ports are 0..3, each once
        ports = sorted(
            [c.port_a for c in cabling.cables if c.a == server] + [c.port_b for c in cabling.cables if c.b == server]
        )
        assert ports == [0, 1, 2, 3]
    # a circulant read back routes as TopoOpt routed it (coin change over its strides)
    strides = circulant_strides(cabling)
    assert strides == topoopt12.strides == (1, 5)
    coin_change = next_hop_array(
        Routes("circulant", first_stride=tuple(coin_change_first_strides(12, list(strides)))), 12
    )
    assert (coin_change == topoopt12.next_hop).all()


def test_interface_ports_are_the_emulators_interface_numbers(topoopt12):
    from emulator.addressing import ports_of

    emulated = ports_of(topoopt12.links, topoopt12.nodes, topoopt12.servers)
    names = {(port.node, port.link): port.ifname for ports in emulated for port in ports}
    for k, (link, (port_a, port_b)) in enumerate(zip(topoopt12.links, interface_ports(topoopt12.links))):
        assert names[link.a, k] == f"h{link.a}-eth{port_a}"
        assert names[link.b, k] == f"h{link.b}-eth{port_b}"


def test_csv_keeps_exact_rates_and_given_ports(tmp_path):
    links = (Link(0, 1, 12.345678901234567), Link(1, 2, 100.0), Link(2, 0, 0.1 + 0.2))
    text = cabling_csv(links, ports=[(7, 3), (0, 5), (9, 8)])
    cabling = read_cabling(_written(tmp_path, "c.csv", text), 1.0)
    assert cabling.links() == links
    assert cabling.ports() == ((7, 3), (0, 5), (9, 8))
    assert "1,0,2,5,100\n" in text
    with pytest.raises(ValueError):
        cabling_csv(links, ports=[(0, 0)])


# ---- routes ------------------------------------------------------------------------------


def _walk(table: np.ndarray, a: int, b: int) -> list[int]:
    path = [a]
    while path[-1] != b:
        path.append(int(table[path[-1], b]))
    return path


def test_default_routes_are_next_hop_table_on_the_same_cables():
    hypercube = _hypercube()
    routes = default_routes(hypercube)
    assert (routes == next_hop_table(16, hypercube.cable_pairs())).all()
    assert (routes == default_routes(_hypercube())).all()  # the same on every call
    for a in range(16):
        for b in range(16):
            if a != b:  # shortest: one hop per differing bit
                assert len(_walk(routes, a, b)) - 1 == bin(a ^ b).count("1")


def test_routes_files_in_both_shapes_read_back_the_default(tmp_path):
    hypercube = _hypercube()
    routes = default_routes(hypercube)
    table_file = _written(tmp_path, "nh.json", json.dumps({"next_hop": routes.tolist()}))
    assert (read_routes(table_file, hypercube) == routes).all()
    paths = {f"{a}-{b}": _walk(routes, a, b) for a in range(16) for b in range(16) if a != b}
    paths_file = _written(tmp_path, "paths.json", json.dumps({"paths": paths}))
    assert (read_routes(paths_file, hypercube) == routes).all()


def _routes_error(tmp_path: Path, doc: object, cabling: Cabling) -> str:
    path = _written(tmp_path, "routes.json", json.dumps(doc))
    with pytest.raises(CablingFileError) as err:
        read_routes(path, cabling)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert err.value.exit_code == 2
    return message


def test_routes_over_a_missing_cable_are_refused(tmp_path):
    hypercube = _hypercube()
    routes = default_routes(hypercube)
    paths = {f"{a}-{b}": _walk(routes, a, b) for a in range(16) for b in range(16) if a != b}
    paths["0-3"] = [0, 3]  # 0 and 3 differ in two bits: no cable
    assert "pair 0-3: hop 0->3 is not a cable" in _routes_error(tmp_path, {"paths": paths}, hypercube)
    table = routes.copy()
    table[0, 3] = 3
    assert "pair 0-3: hop 0->3 is not a cable" in _routes_error(tmp_path, {"next_hop": table.tolist()}, hypercube)


def test_bad_routes_are_one_line_naming_the_pair(tmp_path):
    hypercube = _hypercube()
    routes = default_routes(hypercube)
    paths = {f"{a}-{b}": _walk(routes, a, b) for a in range(16) for b in range(16) if a != b}

    looping = routes.copy()
    looping[0, 3], looping[1, 3] = 1, 0  # 0 -> 1 -> 0 -> ... never reaching 3
    message = _routes_error(tmp_path, {"next_hop": looping.tolist()}, hypercube)
    assert "pair 0-3: the route loops (0->1->0)" in message

    missing = {k: v for k, v in paths.items() if k != "5-9"}
    assert "pair 5-9: has no path" in _routes_error(tmp_path, {"paths": missing}, hypercube)

    crossing = dict(paths, **{"0-7": [0, 1, 3, 7], "1-7": [1, 5, 7]})  # not destination based
    message = _routes_error(tmp_path, {"paths": crossing}, hypercube)
    assert "pair 0-7: hop 1->3 differs from pair 1-7's first hop 1->5" in message

    looped_path = dict(paths, **{"0-3": [0, 1, 0, 2, 3]})
    assert "pair 0-3: the path [0, 1, 0, 2, 3] visits server 0 twice" in _routes_error(
        tmp_path, {"paths": looped_path}, hypercube
    )
    wrong_end = dict(paths, **{"0-3": [0, 1, 5]})
    assert "pair 0-3: the path [0, 1, 5] does not go from 0 to 3" in _routes_error(
        tmp_path, {"paths": wrong_end}, hypercube
    )
    assert "pair 'a-b'" in _routes_error(tmp_path, {"paths": {"a-b": [0, 1]}}, hypercube)
    assert "next_hop: must be 16 rows" in _routes_error(tmp_path, {"next_hop": routes.tolist()[:3]}, hypercube)
    diagonal = routes.tolist()
    diagonal[4][4] = 4
    assert "next_hop[4][4]: must be -1" in _routes_error(tmp_path, {"next_hop": diagonal}, hypercube)
    for hop, problem in (
        (2.0, "next_hop[0][1]: 2.0 is not a server"),
        (10**30, "is not a server 0..15"),
        (-1, "pair 0-1: next hop -1"),
    ):
        table = routes.tolist()
        table[0][1] = hop
        assert problem in _routes_error(tmp_path, {"next_hop": table}, hypercube)
    assert "one key, 'next_hop' or 'paths'" in _routes_error(tmp_path, {"nexthop": []}, hypercube)


# ---- malformed cabling files -------------------------------------------------------------

MALFORMED_CSV = [
    # (name, text, where in the message, what the message says)
    ("unknown-server.csv", "0,0,1,0\n1,1,x,0\n", "line 2", "server 'x' is not a server number"),
    ("negative-server.csv", "0,0,1,0\n1,1,-2,0\n", "line 2", "server '-2' is not a server number"),
    ("host-name.csv", "h0,0,h1,0\n", "line 1", "(write 0)"),
    ("beyond-max.csv", "0,0,1,0\n1,1,5000,0\n", "line 2", "at most 4096 servers"),
    (
        "port-twice.csv",
        "0,0,1,0\n# spare\n0,0,2,0\n1,1,2,1\n",
        "line 3",
        "port 0 of server 0 is used twice (first by line 1)",
    ),
    ("bad-port.csv", "0,eth0,1,0\n", "line 1", "port 'eth0' is not a port number"),
    ("self-loop.csv", "0,0,1,0\n1,1,1,2\n", "line 2", "server 1 is cabled to itself"),
    ("zero-rate.csv", "0,0,1,0,0\n", "line 1", "rate 0 Gbps: a cable's rate must be > 0"),
    ("negative-rate.csv", "0,0,1,0,25\n1,1,2,0,-5\n2,1,0,1\n", "line 2", "must be > 0"),
    ("nan-rate.csv", "0,0,1,0,nan\n", "line 1", "rate 'nan' is not finite"),
    ("huge-rate.csv", "0,0,1,0,1e9\n", "line 1", "rate 1e+09 Gbps is outside 0.001..1600 Gbps"),
    ("word-rate.csv", "0,0,1,0,fast\n", "line 1", "rate 'fast' is not a number"),
    ("three-columns.csv", "0,0,1,0\n1,1,2\n", "line 2", "3 field(s)"),
    ("six-columns.csv", "0,0,1,0,25,extra\n", "line 1", "6 field(s)"),
    ("bad-header.csv", "server_a,port_a,server_b,port\n0,0,1,0\n", "line 1", "header"),
    ("yaml.yaml", "cables:\n  - [0, 1]\n", "line 1", "not a cabling file"),
    ("space-separated.csv", "\n0 0 1 0\n", "line 2", "not a cabling file"),
    ("negative-first.csv", "-1,0,1,0\n", "line 1", "server '-1' is not a server number"),
]
MALFORMED_WHOLE_FILE = [
    ("empty.csv", "", "no cables: an empty cabling file"),
    ("comments-only.csv", "# nothing cabled yet\n\n", "no cables"),
    ("gap.csv", "0,0,1,0\n1,1,3,0\n3,1,0,1\n", "no server 2: servers are numbered 0..3 without gaps"),
    (
        "disconnected.csv",
        "0,0,1,0\n2,0,3,0\n",
        "disconnected: 2 of 4 servers (2, 3) have no path of cables to server 0",
    ),
    (
        "isolated-node.json",
        '{"nodes": [{"id": 0}, {"id": 1}, {"id": 2}], "edges": [{"source": 0, "target": 1}]}',
        "disconnected",
    ),
    ("directed.json", '{"directed": true, "nodes": [], "edges": [{"source": 0, "target": 1}]}', "a directed graph"),
    ("list.json", "[[0, 1]]", "not node-link JSON"),
    ("html.xml", "<html><body>0,0,1,0</body></html>", "not GraphML"),
    (
        "nested.graphml",
        '<graphml xmlns="http://graphml.graphdrawing.org/xmlns"><graph><node id="0"><graph/></node></graph></graphml>',
        "nested graphs",
    ),
    ("entities.graphml", '<!DOCTYPE g [<!ENTITY a "aaaa">]><graphml/>', "declares entities"),
]
MALFORMED_GRAPH = [
    ("broken.json", '{"nodes": [{"id": 0},\n  {"id": 1}', "line 2", "not JSON"),
    ("node-name.json", '{"nodes": [{"id": 0}, {"id": "a"}], "edges": []}', "node 1", "node id 'a'"),
    ("node-twice.json", '{"nodes": [{"id": 0}, {"id": "0"}], "edges": []}', "node 1", "server 0 is listed twice"),
    ("no-target.json", '{"nodes": [], "edges": [{"source": 0, "target": 1}, {"source": 1}]}', "edge 1", "'target'"),
    (
        "same-key.json",
        '{"nodes": [], "edges": [{"source": 0, "target": 1, "key": 0}, {"source": 1, "target": 0, "key": 0}]}',
        "edge 1",
        "repeats the key",
    ),
    ("bool-rate.json", '{"nodes": [], "edges": [{"source": 0, "target": 1, "gbps": true}]}', "edge 0", "rate True"),
    (
        "bad-xml.graphml",
        '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">\n<graph>\n<node id="0">\n</graphml>',
        "line 4",
        "not XML",
    ),
]


def _graphml(edges, rate: str | None = None, node: str = "0") -> str:
    lines = ['<graphml xmlns="http://graphml.graphdrawing.org/xmlns">']
    lines.append('<key id="gbps" for="edge" attr.name="gbps" attr.type="double"/>')
    lines.append('<graph edgedefault="undirected">')
    lines.append(f'<node id="{node}"/>')
    for a, b in edges:
        data = f'<data key="gbps">{rate}</data>' if rate is not None else ""
        lines.append(f'<edge source="{a}" target="{b}">{data}</edge>')
    lines.append("</graph></graphml>")
    return "\n".join(lines)


MALFORMED_GRAPH += [
    ("edge-to-name.graphml", _graphml([(0, 1), (1, "x")]), "edge 1", "node id 'x'"),
    ("negative-rate.graphml", _graphml([(0, 1)], rate="-3"), "edge 0", "must be > 0"),
    ("node-name.graphml", _graphml([(0, 1)], node="n0"), "node 0", "node id 'n0'"),
]


def _error(path: Path) -> CablingFileError | UsageError:
    with pytest.raises(UsageError) as err:
        read_cabling(path, 25.0)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    assert err.value.exit_code == 2
    return err.value


@pytest.mark.parametrize(("name", "text", "where", "problem"), MALFORMED_CSV + MALFORMED_GRAPH)
def test_malformed_file_is_one_line_naming_the_file_and_line(tmp_path, name, text, where, problem):
    path = _written(tmp_path, name, text)
    err = _error(path)
    assert isinstance(err, CablingFileError) and err.where == where
    assert str(err).startswith(f"{path}: {where}: ")
    assert problem in str(err)


@pytest.mark.parametrize(("name", "text", "problem"), MALFORMED_WHOLE_FILE)
def test_malformed_whole_file_is_one_line_naming_the_file(tmp_path, name, text, problem):
    path = _written(tmp_path, name, text)
    assert problem in str(_error(path))


def test_too_many_cables_at_one_server(tmp_path):
    text = "".join(f"0,{k},{k + 1},0\n" for k in range(65))
    err = _error(_written(tmp_path, "fan.csv", text))
    assert str(err).endswith("line 65: server 0 has more than 64 cables")


def test_files_that_are_no_text_or_no_regular_file_are_refused(tmp_path):
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"0,0,1,0\n\xff\xfe\x00junk")
    assert "not UTF-8 text" in str(_error(binary))
    huge = tmp_path / "huge.csv"
    with open(huge, "wb") as f:
        f.truncate(MAX_CABLING_BYTES + 1)
    assert f"larger than {MAX_CABLING_BYTES:,} bytes: not a cabling file" in str(_error(huge))
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    assert "is a FIFO" in str(_error(fifo))
    assert "is a folder" in str(_error(tmp_path))
    assert "no such cabling file" in str(_error(tmp_path / "absent.csv"))


@pytest.mark.parametrize("name", HYPERCUBE_FILES)
def test_damaged_hypercube_files_read_or_fail_in_one_line(tmp_path, name):
    """Every cut and every deleted character of the fixture, at 60 fixed offsets: the file
    reads as some cabling or is refused with a `UsageError`, never another exception."""
    text = (FIXTURES / name).read_text()
    refused = 0
    for k in range(60):
        at = k * len(text) // 60
        for variant, damaged in enumerate((text[:at], text[:at] + text[at + 1 :])):
            path = _written(tmp_path, f"damaged-{k}-{variant}{Path(name).suffix}", damaged)
            try:
                cabling = read_cabling(path, 25.0)
            except UsageError as err:
                refused += 1
                assert "\n" not in str(err) and str(err).startswith(f"{path}: ")
            else:
                assert cabling.servers >= 2 and cabling.cables
    assert refused > 0


# ---- ring orders ---------------------------------------------------------------------------


def _cabling(servers: int, pairs) -> Cabling:
    return Cabling(servers, tuple(Cable(a, 0, b, 0, 1.0) for a, b in pairs))


def _is_ring(order, cabling: Cabling) -> bool:
    pairs = {frozenset(p) for p in cabling.cable_pairs()}
    n = cabling.servers
    return sorted(order) == list(range(n)) and all(frozenset((order[i - 1], order[i])) in pairs for i in range(n))


def test_hamiltonian_ring_on_the_hypercube_is_a_gray_code():
    hypercube = _hypercube()
    ring = hamiltonian_ring(hypercube)
    assert ring is not None and _is_ring(ring, hypercube)
    assert ring == tuple(i ^ (i >> 1) for i in range(16))


def test_hamiltonian_ring_found_by_search_where_no_candidate_order_is_one():
    torus = _cabling(12, torus_cables(3, 4))
    ring = hamiltonian_ring(torus)
    assert ring is not None and _is_ring(ring, torus) and ring != tuple(range(12))
    ring_of_rings = _cabling(8, ring_cables(8, 4))
    assert hamiltonian_ring(ring_of_rings) == tuple(range(8))


def test_no_hamiltonian_ring_on_a_tree_or_the_petersen_graph():
    star = _cabling(5, [(0, 1), (0, 2), (0, 3), (0, 4)])
    assert hamiltonian_ring(star) is None
    path = _cabling(4, [(0, 1), (1, 2), (2, 3), (1, 2)])  # parallel cables make no ring
    assert hamiltonian_ring(path) is None
    petersen = _cabling(10, nx.petersen_graph().edges())  # 3-regular, yet no Hamiltonian cycle
    assert hamiltonian_ring(petersen) is None


def test_circulant_strides_only_for_circulants():
    assert circulant_strides(_cabling(8, ring_cables(8, 4))) == (1, 1)
    assert circulant_strides(_cabling(8, [(i, (i + s) % 8) for s in (1, 4) for i in range(8)])) == (1, 4)
    assert circulant_strides(_hypercube()) is None
    assert circulant_strides(_cabling(5, [(i, (i + 1) % 5) for i in range(5)] + [(0, 2)])) is None
