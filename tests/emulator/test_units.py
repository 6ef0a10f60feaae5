"""Emulator pieces that need no root: addresses, config, plan validation, parsing."""

from __future__ import annotations

import dataclasses
import ipaddress

import pytest

from contract.network import circulant_network
from contract.physics import tcp_goodput_fraction
from contract.plan import Link
from emulator import EmulationConfig, EmulationInputError, identity, link_addresses, node_of_identity
from emulator.addressing import RANGE, ports_of
from emulator.checks import parse_traceroute
from emulator.validate import validate
from tests.fixtures.sample_plans import circulant_plan, switch_plan


def test_every_address_is_in_the_benchmarking_range():
    plan = circulant_plan(32, (1, 5))
    addrs = [identity(u) for u in range(plan.servers)]
    for ports in ports_of(plan.links, plan.servers, plan.servers):
        addrs += [p.address for p in ports]
    assert len(set(addrs)) == len(addrs)
    assert all(ipaddress.ip_address(a) in RANGE for a in addrs)
    assert all(node_of_identity(identity(u)) == u for u in range(plan.servers))
    a, b = link_addresses(7)
    assert ipaddress.ip_network(f"{a}/31", strict=False) == ipaddress.ip_network(f"{b}/31", strict=False)


def test_ports_follow_mininet_names_and_parallel_cables_stay_separate():
    plan = circulant_plan(4, (1,))
    plan = dataclasses.replace(plan, links=plan.links + (Link(0, 1, 25.0),))
    ports = ports_of(plan.links, 4, 4)
    assert [p.ifname for p in ports[0]] == ["h0-eth0", "h0-eth1", "h0-eth2"]
    assert [p.peer for p in ports[0]].count(1) == 2
    assert all(len(p.ifname) <= 15 for ps in ports for p in ps)


def test_tcp_maximum_matches_the_measured_fractions():
    # docs/emulation.md: 95.6% at MTU 1500, 99.2% at MTU 9000
    assert tcp_goodput_fraction(1500) == pytest.approx(0.956, abs=0.001)
    assert tcp_goodput_fraction(9000) == pytest.approx(0.992, abs=0.001)


@pytest.mark.parametrize(
    "table, field",
    [
        ({"link_mbps": 0}, "link_mbps"),
        ({"link_mbps": -5}, "link_mbps"),
        ({"mtu": 100}, "mtu"),
        ({"netem": "maybe"}, "netem"),
        ({"link_mbps": "fast"}, "link_mbps"),
    ],
)
def test_bad_emulation_table_names_the_field(table, field):
    with pytest.raises(EmulationInputError, match=f"emulation.{field}"):
        EmulationConfig.from_any(table)


def test_config_accepts_any_object_with_the_fields():
    @dataclasses.dataclass
    class Emulation:  # what the scenario loader hands over
        link_mbps: float = 250.0
        mtu: int = 1500
        netem: str = "off"

    config = EmulationConfig.from_any(Emulation())
    assert (config.link_mbps, config.mtu, config.netem) == (250.0, 1500, "off")


def test_plan_with_a_link_to_a_nonexistent_server_is_refused():
    plan = circulant_plan(6, (1,))
    bad = dataclasses.replace(plan, links=plan.links + (Link(2, 9, 25.0),))
    with pytest.raises(EmulationInputError, match=r"plan.links\[6\].b = 9: no such node"):
        validate(bad, EmulationConfig())


def test_zero_rate_link_is_refused():
    plan = circulant_plan(6, (1,))
    bad = dataclasses.replace(plan, links=(Link(0, 1, 0.0),) + plan.links[1:])
    with pytest.raises(EmulationInputError, match=r"plan.links\[0\].gbps = 0.0"):
        validate(bad, EmulationConfig())


def test_too_many_hosts_for_memory_is_refused():
    with pytest.raises(EmulationInputError, match="at most 6 hosts fit"):
        validate(circulant_plan(12, (1, 5)), EmulationConfig(host_memory_mib=8.0), available_mib=100.0)


def test_route_through_a_non_neighbour_is_refused():
    plan = circulant_plan(6, (1,))
    table = [list(r) for r in plan.routes.table]
    table[0][3] = 3  # 0 and 3 share no cable in a 6-ring
    bad = dataclasses.replace(plan, routes=dataclasses.replace(plan.routes, table=tuple(map(tuple, table))))
    with pytest.raises(EmulationInputError, match="no cable joins 0 and 3"):
        validate(bad, EmulationConfig())


def test_switch_plan_validates():
    validate(switch_plan(12), EmulationConfig())


def test_traceroute_output_becomes_a_node_sequence():
    text = (
        "traceroute to 198.18.0.5 (198.18.0.5), 5 hops max, 60 byte packets\n"
        " 1  198.18.0.2  0.231 ms\n 2  *\n 3  198.18.0.5  0.221 ms\n"
    )
    assert parse_traceroute(text, 0) == [0, 1, None, 4]


def test_network_of_a_plan_keeps_what_the_emulator_builds():
    plan = switch_plan(6)
    network = plan.network
    assert (network.servers, network.switches, network.nodes) == (6, 1, 7)
    assert network.links == plan.links and network.latency_us == plan.latency_us
    assert (network.next_hop == plan.next_hop).all()
    assert network.path(0, 5) == plan.path(0, 5) == [0, 6, 5]
    assert network.neighbours(6) == list(range(6))


@pytest.mark.parametrize("n, strides", [(12, (1, 5)), (32, (1, 13)), (7, (3,)), (10, (2, 5))])
def test_circulant_network_routes_are_shortest_and_valid(n, strides):
    import networkx as nx

    network = circulant_network(n, strides)
    validate(network, EmulationConfig())  # every next hop a neighbour, no loops
    g = nx.MultiGraph((l.a, l.b) for l in network.links)
    for v in range(n):
        assert len(network.path(0, v)) - 1 == nx.shortest_path_length(g, 0, v)
        assert len(network.path(3 % n, v)) - 1 == nx.shortest_path_length(g, 3 % n, v)


def test_disconnected_circulant_is_refused():
    with pytest.raises(ValueError, match="not connected"):
        circulant_network(12, (2,))
