"""Live changes on a running emulated network: cable down and up, new routes, a new rate."""

from __future__ import annotations

import subprocess

import networkx as nx
import numpy as np
import pytest

from contract.network import circulant_network
from emulator import EmulatedNetwork, EmulationConfig
from emulator.errors import EmulationError
from emulator.hostconfig import TCP_RECEIVE_BUFFER_BYTES, TCP_RMEM_MAX, TCP_RMEM_MIN

pytestmark = pytest.mark.root


def _root_links() -> set[str]:
    out = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0].split("@")[0] for line in out.splitlines() if line.strip()}


def _ping(net, a: int, b: int) -> bool:
    proc = net.popen(
        a, ["ping", "-c1", "-W1", net.host_address(b)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return proc.wait(timeout=5) == 0


def _out(net, node: int, argv: list[str]) -> str:
    proc = net.popen(node, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc.communicate(timeout=5)[0]


def _next_hops_without(network, dead: set[int]) -> np.ndarray:
    g = nx.Graph()
    g.add_nodes_from(range(network.nodes))
    g.add_edges_from((l.a, l.b) for k, l in enumerate(network.links) if k not in dead)
    table = np.full((network.nodes, network.nodes), -1, dtype=np.int32)
    for v in range(network.nodes):
        for u, path in nx.single_source_shortest_path(g, v).items():
            if u != v:
                table[u, v] = path[-2]  # u's neighbour on the shortest path towards v
    return table


def test_cable_down_reroute_up_and_rate(tmp_path):
    before = _root_links()
    network = circulant_network(12, (1, 5))
    with EmulatedNetwork(network, EmulationConfig(run_dir=str(tmp_path), link_mbps=100)) as net:
        k = net.live.cable_between(0, 1)
        assert net.live.cable_name(k) == "h0-h1"
        assert _ping(net, 0, 1) and _ping(net, 1, 0)

        net.live.cable_down(k)
        assert "state DOWN" in _out(net, 0, ["ip", "link", "show", "h0-eth0"])
        assert "state DOWN" in _out(net, 1, ["ip", "link", "show", "h1-eth0"])
        assert not _ping(net, 0, 1) and not _ping(net, 1, 0)  # nothing rerouted yet

        net.live.replace_routes(_next_hops_without(network, {k}))
        assert _ping(net, 0, 1) and _ping(net, 1, 0)
        assert "dev h0-eth0" not in _out(net, 0, ["ip", "route", "get", net.host_address(1)])

        with pytest.raises(EmulationError, match="h0: route to h1 goes via h1, but every cable to it is down"):
            net.live.replace_routes(network.next_hop)  # the old table needs the dead cable

        net.live.cable_up(k)
        for node, ifname, peer in ((0, "h0-eth0", "198.19.0.1"), (1, "h1-eth0", "198.19.0.0")):
            assert f"{peer} lladdr" in _out(net, node, ["ip", "neigh", "show", "dev", ifname, "nud", "permanent"])
        net.live.replace_routes(network.next_hop)
        assert not net.live.dead
        assert "dev h0-eth0" in _out(net, 0, ["ip", "route", "get", net.host_address(1)])
        route = _out(net, 0, ["ip", "route", "show", net.host_address(1)])
        assert "congctl cubic" in route and "rto_min lock 5s" in route  # nlbatch.RTO_MIN_MS, locked
        assert "rto_min lock 5s" in _out(net, 0, ["ip", "route", "show", "dev", "h0-eth0", "proto", "kernel"])
        assert _out(net, 0, ["sysctl", "-n", "net.ipv4.tcp_early_retrans"]).strip() == "0"  # no loss probes
        rmem = [int(v) for v in _out(net, 0, ["sysctl", "-n", "net.ipv4.tcp_rmem"]).split()]
        assert rmem == [TCP_RMEM_MIN, TCP_RECEIVE_BUFFER_BYTES, TCP_RMEM_MAX]  # a large window from the start
        assert _ping(net, 0, 1) and _ping(net, 1, 0)

        net.live.set_cable_rate(k, 40_000_000)
        assert "rate 40Mbit" in _out(net, 0, ["tc", "class", "show", "dev", "h0-eth0"])
        assert "rate 40Mbit" in _out(net, 1, ["tc", "class", "show", "dev", "h1-eth0"])
        assert net.link_rate_bps[k] == 40_000_000
    assert _root_links() == before
    assert not list(tmp_path.glob("run-*.json"))
    with pytest.raises(EmulationError, match="not up"):
        net.live.cable_down(k)
