"""Planes of a bandwidth allocation in the emulator: addresses, tables, rules, classes, paths.

The network is C_6(1, 2) with the pair (0, 3) split over two paths that both differ from its
destination-based route 0-1-3: plane 1 is 0-2-3 at 15 Gbit/s, plane 2 is 0-4-3 at 25 Gbit/s
(a 25 Gbit/s cable emulated at 100 Mbit/s, so 60 and 100 Mbit/s).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contract.emulation import EmulatedRates
from contract.network import Link, Network, PairAllocation, PathShare, Routes, circulant_network
from emulator import EmulatedNetwork, EmulationConfig, EmulationInputError, ShapingError, identity, nsutil, shaping
from emulator.addressing import (
    IDENTITY_NET,
    LINK_NET,
    MAX_PLANE_NODES,
    MAX_PLANES,
    PLANE_NET,
    link_addresses,
    plane_address,
    plane_of_address,
    ports_of,
)
from emulator.checks import check_paths, check_plane_paths
from emulator.planes import RULE_PRIORITY, destination_rates, node_planes, table_of, validate_allocation

REPO = Path(__file__).resolve().parents[2]
LINK_MBPS = 100
PLANE_1 = (0, 2, 3)
PLANE_2 = (0, 4, 3)


def _network(paths=((PLANE_1, 15.0), (PLANE_2, 25.0))) -> Network:
    base = circulant_network(6, (1, 2))
    shares = tuple(PathShare(path, gbps) for path, gbps in paths)
    return dataclasses.replace(base, allocation=(PairAllocation(0, 3, shares),))


def _config(tmp_path) -> EmulationConfig:
    return EmulationConfig(run_dir=str(tmp_path), link_mbps=LINK_MBPS)


def _root_state() -> dict[str, str]:
    """What a run must leave untouched in the root namespace: links, addresses, rules, routes."""
    commands = {
        "links": ["ip", "-br", "link"],
        "addresses": ["ip", "-br", "addr"],
        "rules": ["ip", "rule"],
        "routes": ["ip", "route", "show", "table", "all"],
    }
    return {k: subprocess.run(argv, capture_output=True, text=True, check=True).stdout for k, argv in commands.items()}


# ---- pure: addresses, tables, validation, rates ---------------------------------------------


def test_plane_addresses_are_their_own_block_and_invert():
    assert plane_address(0, 1) == "198.19.128.1"
    assert plane_address(3, 2) == "198.19.128.50"
    last = plane_address(MAX_PLANE_NODES - 1, MAX_PLANES)
    assert last == "198.19.255.255"
    seen = set()
    for node in (0, 1, 7, MAX_PLANE_NODES - 1):
        for plane in range(1, MAX_PLANES + 1):
            addr = plane_address(node, plane)
            assert addr not in seen
            seen.add(addr)
            assert plane_of_address(addr) == (node, plane)
    # no identity and no cable of a network with planes lies in the plane block
    assert not PLANE_NET.overlaps(IDENTITY_NET) and PLANE_NET.subnet_of(LINK_NET)
    assert plane_of_address(link_addresses(16383)[1]) is None
    assert plane_of_address(identity(5)) is None
    assert plane_of_address("198.19.128.0") is None  # offset 0 of a block is no plane
    with pytest.raises(ValueError):
        plane_address(0, 0)
    with pytest.raises(ValueError):
        plane_address(MAX_PLANE_NODES, 1)


def test_tables_avoid_the_kernels_reserved_ids_and_never_collide():
    tables = {table_of(s, p) for s in range(MAX_PLANE_NODES) for p in range(1, MAX_PLANES + 1)}
    assert len(tables) == MAX_PLANE_NODES * MAX_PLANES
    assert min(tables) > 255 and max(tables) < 2**31


def test_node_planes_put_each_plane_on_its_path_only():
    planes = node_planes(_network())
    assert planes[0].planes == (1, 2)
    assert planes[0].rules == ((plane_address(0, 1), table_of(0, 1)), (plane_address(0, 2), table_of(0, 2)))
    assert [(h.plane, h.next_hop) for h in planes[0].hops] == [(1, 2), (2, 4)]
    assert [(h.plane, h.dst, h.next_hop) for h in planes[2].hops] == [(1, 3, 3)]
    assert planes[2].rules == ((plane_address(0, 1), table_of(0, 1)),)
    assert planes[1].hops == () and planes[1].rules == () and planes[1].planes == ()
    assert planes[3].hops == ()  # the destination forwards nothing
    assert all(p.sources == (0,) for u, p in enumerate(planes) if u != 0) and planes[0].sources == ()


def test_destination_rates_are_dilated_like_the_cables():
    network = _network()
    ports = ports_of(network.links, network.nodes, network.servers)
    rates = destination_rates(network, ports, EmulatedRates(network.link_gbps, LINK_MBPS).bps_per_gbps)
    by_edge = {(w, next(p.peer for p in ports[w] if p.ifname == name)): r for (w, name), r in rates.items()}
    assert by_edge == {
        (0, 2): {3: 60_000_000},
        (2, 3): {3: 60_000_000},
        (0, 4): {3: 100_000_000},
        (4, 3): {3: 100_000_000},
    }


@pytest.mark.parametrize(
    ("paths", "message"),
    [
        ((((0, 2, 3), 15.0), ((0, 1, 2), 5.0)), r"paths\[1\].path = \(0, 1, 2\): must run from 0 to 3"),
        ((((0, 3), 15.0),), r"no cable joins 0 and 3"),
        ((((0, 2, 0, 4, 3), 15.0),), r"visits a node twice"),
        ((((0, 2, 3), 0.0),), r"gbps = 0.0: must be a positive rate"),
        ((((0, 2, 3), 15.0), ((0, 2, 4, 3), 15.0)), r"30 Gbit/s planned from 0 to 2"),
    ],
)
def test_an_allocation_the_emulator_cannot_carry_is_refused(paths, message):
    with pytest.raises(EmulationInputError, match=message):
        validate_allocation(_network(paths))


def test_the_address_plan_limits_networks_with_planes():
    big = circulant_network(MAX_PLANE_NODES + 1, (1,))
    one_pair = (PairAllocation(0, 1, (PathShare((0, 1), 1.0),)),)
    with pytest.raises(EmulationInputError, match=f"plane addresses exist for at most {MAX_PLANE_NODES} nodes"):
        validate_allocation(dataclasses.replace(big, allocation=one_pair))
    too_many = tuple(PathShare((0, 2, 3), 0.1) for _ in range(MAX_PLANES + 1))
    with pytest.raises(EmulationInputError, match=f"{MAX_PLANES + 1} paths, the emulator holds 1..{MAX_PLANES}"):
        validate_allocation(dataclasses.replace(_network(), allocation=(PairAllocation(0, 3, too_many),)))
    validate_allocation(circulant_network(6, (1, 2)))  # no allocation: nothing to check


def test_tc_batch_of_a_planned_cable_end():
    s = shaping.Shaping("h0-eth2", 100_000_000, 0.0, (shaping.DestinationClass(3, identity(3), 60_000_000),))
    text = shaping.tc_batch([s], use_netem=False)
    assert "root handle 1: htb default 2" in text
    assert "classid 1:2 htb rate 40000000bit ceil 100000000bit" in text
    assert "parent 1:1 classid 1:103 htb rate 60000000bit ceil 100000000bit" in text
    assert "u32 match ip dst 198.18.0.4/32 flowid 1:103" in text
    full = shaping.Shaping("x", 100, 0.0, (shaping.DestinationClass(1, identity(1), 100),))
    assert full.default_rate_bps == 1  # a full cable still leaves unplanned traffic its floor


# ---- on real namespaces ------------------------------------------------------------------


@pytest.mark.root
def test_each_plane_takes_its_planned_path_and_a_broken_plane_is_caught(tmp_path):
    from pyroute2 import IPRoute

    network = _network()
    assert network.path(0, 3) == [0, 1, 3]  # both planes differ from the destination route
    with EmulatedNetwork(network, _config(tmp_path)) as net:
        with nsutil.in_netns_of(net.hosts[2].pid), IPRoute() as ipr:
            rules = [
                (r.get_attr("FRA_SRC"), r.get_attr("FRA_TABLE"), r.get_attr("FRA_PRIORITY"))
                for r in ipr.get_rules(family=2)
            ]
            plane_routes = ipr.get_routes(family=2, table=table_of(0, 1))
        assert (plane_address(0, 1), table_of(0, 1), RULE_PRIORITY) in rules
        assert [(r.get_attr("RTA_DST"), r.get_attr("RTA_GATEWAY")) for r in plane_routes] == [
            (identity(3), next(p.peer_address for p in net.ports[2] if p.peer == 3))
        ]
        results = check_plane_paths(net)
        assert [(r.plane, r.observed) for r in results] == [(1, list(PLANE_1)), (2, list(PLANE_2))]
        assert all(r.ok for r in results)
        assert all(r.ok for r in check_paths(net, [(0, 3), (3, 0), (2, 3)]))  # plane 0 as before
        # a destination the plane's table has no route for is reached through the main table
        ping = net.popen(0, ["ping", "-c1", "-W2", "-I", plane_address(0, 1), identity(5)], stdout=subprocess.DEVNULL)
        assert ping.wait(timeout=10) == 0

        # cable h0-h2 down: plane 1 loses its route and falls back to the main table (0-1-3)
        k = net.live.cable_between(0, 2)
        net.live.cable_down(k)
        broken = {r.plane: r for r in check_plane_paths(net, retries=0)}
        assert not broken[1].ok and broken[1].observed == [0, 1, 3]
        assert broken[2].ok
        # a wrong expectation is detected too: plane 2 traced against plane 1's path
        wrong = dataclasses.replace(broken[2], expected=list(PLANE_1))
        assert not wrong.ok
        # cable back up: the live route step restores the plane routes
        net.live.cable_up(k)
        assert all(r.ok for r in check_plane_paths(net))


@pytest.mark.root
def test_destination_classes_are_read_back_with_their_rates(tmp_path):
    from pyroute2 import IPRoute

    with EmulatedNetwork(_network(), _config(tmp_path)) as net:
        assert net.facts["shaping_checked"] == sum(len(p) for p in net.ports)
        assert net.facts["planes"] == {
            "pairs": 1,
            "planes": 2,
            "plane_routes": 4,
            "rules": 4,
            "destination_classes": 4,
        }
        assert net.plane_address(0, 2) == plane_address(0, 2) and net.plane_address(0, 0) == identity(0)
        assert net.plane_addresses(0) == {1: plane_address(0, 1), 2: plane_address(0, 2)}
        assert net.plane_addresses(3) == {}
        with pytest.raises(IndexError, match="node 1 sends on no plane 1"):
            net.plane_address(1, 1)
        seen = {}
        for u, peer in ((0, 2), (2, 3), (0, 4), (4, 3), (0, 1)):
            port = next(p for p in net.ports[u] if p.peer == peer)
            with nsutil.in_netns_of(net.hosts[u].pid), IPRoute() as ipr:
                got = shaping.read_back(ipr, {ipr.link_lookup(ifname=port.ifname)[0]: port.ifname})[port.ifname]
            seen[u, peer] = {m: (c["rate_bps"], c["ceil_bps"]) for m, c in got["classes"].items()}, got["filters"]
        cable, ceil, floor = (100_000_000, 100_000_000), 100_000_000, (1_000_000, 100_000_000)
        # a planned destination at its planned rate; every other destination routed through the
        # cable end an equal share of what is left above the default class's floor
        assert seen[0, 2] == (
            {1: cable, 2: floor, 0x102: (39_000_000, ceil), 0x103: (60_000_000, ceil)},
            {0x102, 0x103},
        )
        assert seen[2, 3] == (
            {1: cable, 2: floor, 0x103: (60_000_000, ceil), 0x105: (39_000_000, ceil)},
            {0x103, 0x105},
        )
        assert seen[0, 4] == ({1: cable, 2: floor, 0x103: cable, 0x104: (8, ceil)}, {0x103, 0x104})  # plan fills it
        assert seen[4, 3] == ({1: cable, 2: floor, 0x103: cable}, {0x103})
        assert seen[0, 1] == (
            {1: cable, 2: floor, 0x101: (49_500_000, ceil), 0x103: (49_500_000, ceil)},
            {0x101, 0x103},
        )
        # a live rate change keeps the destination classes under the new ceiling
        net.live.set_cable_rate(net.live.cable_between(0, 2), 200_000_000)


@pytest.mark.root
def test_a_plane_over_parallel_cables_is_one_multipath_route_in_its_table(tmp_path):
    from pyroute2 import IPRoute

    links = (Link(0, 1, 25.0), Link(0, 1, 25.0), Link(1, 2, 25.0), Link(0, 2, 25.0))
    routes = Routes(kind="table", table=((-1, 1, 2), (0, -1, 2), (0, 1, -1)))
    allocation = (PairAllocation(0, 2, (PathShare((0, 1, 2), 20.0),)),)
    network = Network(3, 0, links, routes, 1.0, 25.0, allocation=allocation)
    with EmulatedNetwork(network, _config(tmp_path)) as net:
        with nsutil.in_netns_of(net.hosts[0].pid), IPRoute() as ipr:
            (route,) = ipr.get_routes(family=2, table=table_of(0, 1))
            hops = {ipr.get_links(nh["oif"])[0].get_attr("IFLA_IFNAME") for nh in route.get_attr("RTA_MULTIPATH")}
            names = {ipr.link_lookup(ifname=n)[0]: n for n in ("h0-eth0", "h0-eth1")}
            got = shaping.read_back(ipr, names)
        assert hops == {"h0-eth0", "h0-eth1"}
        for name in names.values():  # 20 Gbit/s over two 25 Gbit/s cables: 40 of each 100 Mbit/s
            assert got[name]["classes"][0x102]["rate_bps"] == 40_000_000
        assert [r.observed for r in check_plane_paths(net)] == [[0, 1, 2]]


@pytest.mark.root
def test_a_missing_destination_filter_fails_the_build(tmp_path, monkeypatch):
    real = shaping.tc_batch
    monkeypatch.setattr(
        shaping,
        "tc_batch",
        lambda items, netem: "".join(l + "\n" for l in real(items, netem).splitlines() if "u32" not in l),
    )
    with pytest.raises(ShapingError, match="no u32 filter into the class of 198.18.0.4"):
        EmulatedNetwork(_network(), _config(tmp_path)).start()


def _iperf(net, src: int, dst: int, bind: str, port: int, seconds: int = 4):
    server = net.popen(dst, ["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL)
    return server, (
        src,
        ["iperf3", "-c", identity(dst), "-B", bind, "-p", str(port), "-t", str(seconds), "-O", "1", "-J"],
    )


def _tx_bytes(net, node: int, peer: int) -> int:
    port = next(p for p in net.ports[node] if p.peer == peer)
    return int(net.hosts[node].cmd(f"cat /sys/class/net/{port.ifname}/statistics/tx_bytes"))


def _received_mbps(proc) -> float:
    out, _ = proc.communicate(timeout=30)
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6


@pytest.mark.root
def test_plane_sockets_get_the_planned_split(tmp_path):
    with EmulatedNetwork(_network(), _config(tmp_path)) as net:
        flows = {
            "plane1": _iperf(net, 0, 3, plane_address(0, 1), 5201),
            "plane2": _iperf(net, 0, 3, plane_address(0, 2), 5202),
            "unplanned": _iperf(net, 0, 2, identity(0), 5203),  # shares h0-h2 with plane 1
        }
        time.sleep(0.4)  # let the servers listen
        sent_before = {peer: _tx_bytes(net, peer, 3) for peer in (1, 2, 4)}
        clients = {
            name: net.popen(src, argv, stdout=subprocess.PIPE, text=True) for name, (_s, (src, argv)) in flows.items()
        }
        mbps = {name: _received_mbps(proc) for name, proc in clients.items()}
        for server, _ in flows.values():
            server.wait(timeout=10)
        sent = {peer: _tx_bytes(net, peer, 3) - sent_before[peer] for peer in (1, 2, 4)}
    # the bytes to h3 arrive over the planes' last cables, none over plane 0's (h1-h3)
    assert sent[2] > 10_000_000 and sent[4] > 10_000_000 and sent[1] < 1_000_000, sent
    # plane 2 has its cables to itself; plane 1 shares h0-h2 with unplanned traffic, and its
    # destination class (60 of 100 Mbit/s) wins it 60:40 instead of TCP's even split
    assert mbps["plane2"] > 0.9 * LINK_MBPS, mbps
    assert mbps["plane1"] + mbps["plane2"] > 1.45 * LINK_MBPS, mbps  # more than any one cable
    share = mbps["plane1"] / (mbps["plane1"] + mbps["unplanned"])
    assert share == pytest.approx(0.6, abs=0.06), mbps


@pytest.mark.root
def test_planes_leave_nothing_behind(tmp_path):
    before = _root_state()
    with EmulatedNetwork(_network(), _config(tmp_path)) as net:
        shells = [(h.pid, nsutil.start_time(h.pid)) for h in net.hosts]
        assert plane_address(0, 2) in net.hosts[0].cmd("ip -br addr show lo")
        assert str(table_of(0, 2)) in net.hosts[4].cmd("ip rule")
        assert plane_address(0, 1) not in _root_state()["rules"]
    assert not any(nsutil.is_same_process(pid, start) for pid, start in shells)
    assert _root_state() == before
    assert not list(tmp_path.glob("run-*.json"))


_HOLDER = """
import dataclasses, json, sys, time
from contract.network import PairAllocation, PathShare, circulant_network
from emulator import EmulatedNetwork, EmulationConfig, nsutil
shares = (PathShare((0, 2, 3), 15.0), PathShare((0, 4, 3), 25.0))
network = dataclasses.replace(circulant_network(6, (1, 2)), allocation=(PairAllocation(0, 3, shares),))
with EmulatedNetwork(network, EmulationConfig(run_dir=sys.argv[1])) as net:
    print(json.dumps([[h.pid, nsutil.start_time(h.pid)] for h in net.hosts]), flush=True)
    time.sleep(300)
"""


@pytest.mark.root
def test_a_sigkilled_run_with_planes_is_cleaned_completely(tmp_path):
    from topolab.clean.command import run_clean

    before = _root_state()
    repo = Path(__file__).resolve().parents[2]
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path)], cwd=repo, stdout=subprocess.PIPE, text=True
    )
    shells = [tuple(x) for x in json.loads(holder.stdout.readline())]
    holder.kill()
    holder.wait(timeout=10)
    holder.stdout.close()
    assert any(nsutil.is_same_process(pid, start) for pid, start in shells)  # what clean is for
    assert run_clean(argparse.Namespace(run_dir=str(tmp_path), json=False)) == 0
    deadline = time.monotonic() + 3
    while any(nsutil.is_same_process(pid, start) for pid, start in shells) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(nsutil.is_same_process(pid, start) for pid, start in shells)
    assert _root_state() == before
