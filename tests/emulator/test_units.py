"""Emulator pieces that need no root: addresses, config, plan validation, parsing."""

from __future__ import annotations

import dataclasses
import ipaddress

import pytest

from contract.emulation import EmulationConfigError, emulated_rates
from contract.network import circulant_network
from contract.physics import tcp_goodput_fraction
from contract.plan import Link
from emulator import EmulationConfig, EmulationInputError, cable, identity, link_addresses, node_of_identity, shaping
from emulator.addressing import RANGE, cable_mac, ports_of
from emulator.cable import cable_shaping, routed_connections, routed_destinations, shared_classes
from emulator.checks import parse_traceroute
from emulator.planes import MIN_CLASS_RATE_BPS
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


def test_every_cable_end_has_its_own_unicast_mac():
    ports = [p for node in ports_of(circulant_network(12, (1, 5)).links, 12, 12) for p in node]
    macs = {cable_mac(p.address) for p in ports}
    assert len(macs) == len(ports) == 48
    assert cable_mac("198.19.1.3") == "02:00:c6:13:01:03"
    assert all(int(m.split(":")[0], 16) & 0b11 == 0b10 for m in macs)  # locally administered, unicast


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
        ({"mtu": 1500.0}, "mtu"),
        ({"netem": "maybe"}, "netem"),
        ({"link_mbps": "fast"}, "link_mbps"),
        ({"ssh_user": "a b"}, "ssh_user"),
        ({"machines": ["localhost"]}, "machines"),
        ({"run_dir": "/tmp/x", "mtu": 9000, "lock_wait_s": -1.0}, "lock_wait_s"),
        ({"reference_gbps": 0.0}, "reference_gbps"),
        ({"destination_classes": "yes"}, "destination_classes"),
        ({"fair_queues": 1}, "fair_queues"),
    ],
)
def test_bad_emulation_setting_is_one_line_naming_the_key(table, field):
    with pytest.raises(EmulationConfigError) as err:
        EmulationConfig(**table)
    message = str(err.value)
    assert err.value.key == f"emulation.{field}" and message.startswith(f"emulation.{field}: ")
    assert "\n" not in message and err.value.exit_code == 2


def test_a_replaced_setting_is_checked_like_a_new_one():
    config = EmulationConfig(link_mbps=250, mtu=1500, netem="off")
    assert (config.link_mbps, type(config.link_mbps), config.mtu) == (250.0, float, 1500)
    assert dataclasses.replace(config, lock_wait_s=3).lock_wait_s == 3.0
    with pytest.raises(EmulationConfigError, match=r"^emulation\.mtu: must be <= 65535, got 70000$"):
        dataclasses.replace(config, mtu=70000)


def test_a_table_sets_only_scenario_keys():
    assert EmulationConfig.from_table({"ssh_identity": "", "machines": ["10.0.0.1"]}).machines == ("10.0.0.1",)
    with pytest.raises(EmulationConfigError, match=r"^emulation\.lock_wait_s: unknown key"):
        EmulationConfig.from_table({"lock_wait_s": 5})


def test_emulated_rates_decide_the_time_scale_once():
    network = circulant_network(4, (1,), link_gbps=25.0)
    plain = emulated_rates(network, EmulationConfig(link_mbps=100))
    assert (plain.reference_gbps, plain.time_scale, plain.mtu) == (25.0, 250.0, 9000)
    pinned = emulated_rates(network, EmulationConfig(link_mbps=100, reference_gbps=100.0), mtu=1450)
    assert (pinned.time_scale, pinned.mtu) == (1000.0, 1450)
    assert pinned.link_rate_bps(network.links) == [25_000_000] * 4


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


def test_both_networks_expose_the_rates_they_are_built_at():
    # not started: the rates are decided when a network is made, by contract.emulation
    from emulator import EmulatedNetwork
    from emulator.cluster import ClusterNetwork

    network = circulant_network(6, (1, 2), link_gbps=25.0)
    config = EmulationConfig(link_mbps=100, reference_gbps=50.0)
    one = EmulatedNetwork(network, config)
    several = ClusterNetwork(network, [0, 0, 1, 1, 2, 2], [], None, config)  # type: ignore[arg-type]
    for net in (one, several):
        assert (net.time_scale, net.link_mbps, net.reference_gbps) == (500.0, 100.0, 50.0)
        assert net.link_rate_bps == [50_000_000] * 12
    assert (one.mtu, several.mtu) == (9000, 1450)  # a multi-machine network's cables are its tunnels'
    for net in (one, several):
        assert net.capacities[(0, 1)] == pytest.approx(50e6 * tcp_goodput_fraction(net.mtu) / 8)


def test_every_cable_end_has_the_destinations_routed_through_it():
    # C_12(1, 5): node 0's cables lead to 1, 11, 5 and 7; every other server is reached through one
    network = circulant_network(12, (1, 5))
    ports = ports_of(network.links, 12, 12)
    routed = routed_destinations(network.next_hop, ports, 12)
    for u in range(12):
        mine = [routed.get((u, p.ifname), ()) for p in ports[u]]
        assert sorted(d for ds in mine for d in ds) == [d for d in range(12) if d != u]
        for p, ds in zip(ports[u], mine):
            assert p.peer in ds and all(network.next_hop[u][d] == p.peer for d in ds)


def test_every_cable_end_has_the_connections_routed_through_it():
    # packets = "frames": a class per connection; each of the 132 connections of C_12(1, 5)
    # crosses exactly the cable ends of its route, and a cable end's are the ones routed on it
    network = circulant_network(12, (1, 5))
    ports = ports_of(network.links, 12, 12)
    carried = routed_connections(network.next_hop, ports, 12)
    peer = {(u, p.ifname): p.peer for u in range(12) for p in ports[u]}
    crossings = {}
    for (u, ifname), pairs in carried.items():
        assert len(set(pairs)) == len(pairs)
        for src, dst in pairs:
            assert network.next_hop[u][dst] == peer[u, ifname]
            crossings.setdefault((src, dst), []).append(u)
    for src in range(12):
        for dst in range(12):
            if src == dst:
                continue
            path = [src]
            while path[-1] != dst:
                path.append(int(network.next_hop[path[-1]][dst]))
            assert sorted(crossings[src, dst]) == sorted(path[:-1])


def test_frames_share_by_connection_up_to_the_class_limit_then_by_destination():
    network = circulant_network(12, (1, 5))
    ports = ports_of(network.links, 12, 12)
    frames, offload = EmulationConfig(packets="frames"), EmulationConfig(packets="offload")
    connections = sum(len(c) for c in routed_connections(network.next_hop, ports, 12).values())
    by_connection = shared_classes(network.next_hop, ports, 12, frames, max_classes=connections)
    assert by_connection.borrow and not by_connection.destinations
    assert sum(len(c) for c in by_connection.connections.values()) == connections
    by_destination = shared_classes(network.next_hop, ports, 12, frames, max_classes=connections - 1)
    assert by_destination.borrow and not by_destination.connections
    assert by_destination.destinations == routed_destinations(network.next_hop, ports, 12)
    plain = shared_classes(network.next_hop, ports, 12, offload)
    assert not plain.borrow and plain.destinations == by_destination.destinations
    none = shared_classes(network.next_hop, ports, 12, EmulationConfig(packets="frames", fair_queues=False))
    assert none == cable.SharedClasses({}, {}, False)
    # borrowing destination classes: the least rate, the cable as ceil
    shaped = cable_shaping(ports[0], [100_000_000] * 24, 0.0, None, *by_destination.of(0), by_destination.borrow)
    assert {d.rate_bps for s in shaped for d in s.destinations} == {MIN_CLASS_RATE_BPS}


def test_connection_classes_borrow_the_cable_and_match_source_and_destination():
    network = circulant_network(12, (1, 5))
    ports = ports_of(network.links, 12, 12)[0]
    rates = [100_000_000] * len(network.links)
    first = ports[0].ifname
    shaped = cable_shaping(ports, rates, 0.0, {first: {3: 40_000_000}}, None, {first: ((0, 1), (0, 3), (5, 1))})
    classes = shaped[0].destinations
    # the planned destination keeps its class; (0, 3) goes in it; the two others only borrow
    assert [(d.node, d.source, d.rate_bps) for d in classes] == [
        (3, "", 40_000_000),
        (1, identity(0), MIN_CLASS_RATE_BPS),
        (1, identity(5), MIN_CLASS_RATE_BPS),
    ]
    assert shaped[0].default_rate_bps == 60_000_000 - 2 * MIN_CLASS_RATE_BPS
    assert len({d.minor for d in classes}) == 3
    text = shaping.tc_batch(shaped[:1], use_netem=False)
    assert f"match ip dst {identity(1)}/32 match ip src {identity(5)}/32 flowid 1:{classes[2].minor:x}" in text


def test_shared_classes_split_what_planned_classes_and_the_default_floor_leave():
    network = circulant_network(12, (1, 5))
    ports = ports_of(network.links, 12, 12)[0]
    rates = [100_000_000] * len(network.links)
    first, second = ports[0].ifname, ports[1].ifname
    shaped = cable_shaping(ports, rates, 0.0, {first: {3: 40_000_000}}, {first: (1, 2, 3), second: (11,)})
    by_name = {s.ifname: {d.node: d.rate_bps for d in s.destinations} for s in shaped}
    assert by_name[first] == {3: 40_000_000, 1: 29_500_000, 2: 29_500_000}  # (100 - 40 - 1) / 2 each
    assert by_name[second] == {11: 99_000_000}
    assert all(not by_name[p.ifname] for p in ports[2:])  # nothing routed: one class, as before
    assert [s.default_rate_bps for s in shaped[:2]] == [1_000_000, 1_000_000]  # the floor, 1%


def test_htb_rates_are_read_from_tcs_text():
    # what this tc (iproute2 6.1) prints for `tc class show dev X`, also with -j: HTB classes
    # as text, each rate in the largest unit that keeps it whole or under 1000 of the next
    from emulator.shaping import htb_rates_from_text

    text = (
        "class htb 1:1 root rate 59999Kbit ceil 59999Kbit burst 1589b cburst 1589b \n"
        "class htb 1:2 parent 1:1 prio 0 rate 1234Kbit ceil 59999Kbit burst 1599b cburst 1589b \n"
        "class htb 1:10b parent 1:1 prio 0 rate 2500Mbit ceil 2500Mbit burst 1250b cburst 1250b \n"
        "class htb 1:10a parent 1:1 prio 0 rate 7872bit ceil 59999Kbit burst 1599b cburst 1589b \n"
        " Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n"
        "class tbf 2:1 parent 2: \n"
    )
    # set as 59,999,000 / 1,234,567 / 2.5e9 / 7,874 bit/s: within 0.1% (HTB keeps bytes/s)
    assert htb_rates_from_text(text) == {1: 59_999_000, 2: 1_234_000, 0x10B: 2_500_000_000, 0x10A: 7_872}
    assert htb_rates_from_text("") == {}


def test_an_htb_class_bursts_one_frame_or_50_us_of_its_rate():
    from emulator import shaping

    # a class that idled sends its burst at once, above its cable's rate: keep it a frame at
    # the dilated rates (a GSO packet's 74.5 KB was 6 ms of a 100 Mbit/s cable)
    assert shaping.htb_burst_bytes(800_000) == shaping.BURST_FLOOR == 1514
    assert shaping.htb_burst_bytes(100_000_000) == 1514  # 625 bytes in 50 us: the floor
    assert shaping.htb_burst_bytes(1_000_000_000) == 6250  # 50 us of the rate
    s = shaping.Shaping("h0-eth0", 100_000_000, 0.0, (shaping.DestinationClass(3, identity(3), 800_000),))
    text = shaping.tc_batch([s], use_netem=False)
    assert text.count("burst 1514b cburst 1514b") == 3  # the cable's class, the default, destination 3
    assert "burst 1514b cburst 1514b" in shaping.tc_rate_change([s])


def test_with_frames_the_classes_take_turns_a_frame_each():
    from emulator import shaping

    # HTB sends a packet at a class's turn and another while its deficit allows: a quantum of
    # one frame is one frame a turn (9014 sent 4110-byte frames two at a turn)
    conn = shaping.DestinationClass(3, identity(3), 8, source=identity(1))
    framed = shaping.Shaping("h0-eth0", 1_000_000, 0.0, (conn,), frame_bytes=4110)
    assert framed.child_quantum == 4110
    text = shaping.tc_batch([framed], use_netem=False)
    assert text.count("quantum 4110") == 2  # the default class and the connection's
    assert "quantum 200000" in text  # the cable's class, which has no siblings
    assert "quantum 4110" in shaping.tc_rate_change([framed])
    plain = dataclasses.replace(framed, frame_bytes=0)
    assert plain.child_quantum == shaping.DESTINATION_QUANTUM == 9014
    assert shaping.tc_batch([plain], use_netem=False).count("quantum 9014") == 2


def _proc_with(proc, names: dict[str, str]) -> str:
    """A /proc of processes named ``names`` by PID."""
    for pid, name in names.items():
        (proc / pid).mkdir(parents=True)
        (proc / pid / "comm").write_text(name + "\n")
    (proc / "self").mkdir()  # not a PID: skipped
    (proc / "77").mkdir()  # a process gone before its comm was read: skipped
    return str(proc)


def test_the_kernel_frees_namespaces_while_a_worker_runs_the_netns_workqueue(tmp_path):
    from emulator.nsutil import kernel_freeing_namespaces

    busy = _proc_with(tmp_path / "busy", {"1": "systemd", "40": "kworker/u8:3+netns"})
    idle = _proc_with(tmp_path / "idle", {"1": "systemd", "40": "kworker/u8:3-netns", "41": "bash+netns"})
    assert kernel_freeing_namespaces(busy) is True
    assert kernel_freeing_namespaces(idle) is False  # done ("-"), or not a kernel worker


class _FakeKernel:
    """A clock that only ``sleep`` moves, and a kernel freeing namespaces for its first looks."""

    def __init__(self, busy_looks: int):
        self.now = 100.0
        self.busy_looks = busy_looks
        self.looks = 0

    def freeing(self) -> bool:
        self.looks += 1
        return self.looks <= self.busy_looks

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_teardown_waits_until_the_kernel_is_quiet_some_looks_in_a_row():
    from emulator.host import KERNEL_CLEANUP_POLL_S, KERNEL_CLEANUP_QUIET_POLLS, wait_kernel_cleanup

    kernel = _FakeKernel(busy_looks=5)
    cleanup = wait_kernel_cleanup(10.0, kernel.freeing, kernel.clock, kernel.sleep)
    assert cleanup.done and kernel.looks == 5 + KERNEL_CLEANUP_QUIET_POLLS
    assert cleanup.waited_s == pytest.approx((kernel.looks - 1) * KERNEL_CLEANUP_POLL_S)
    quiet = _FakeKernel(busy_looks=0)  # nothing to free: three looks, no more
    assert wait_kernel_cleanup(10.0, quiet.freeing, quiet.clock, quiet.sleep).done
    assert quiet.looks == KERNEL_CLEANUP_QUIET_POLLS


def test_a_kernel_still_freeing_at_the_limit_ends_the_wait_undone():
    from emulator.host import KERNEL_CLEANUP_POLL_S, wait_kernel_cleanup

    kernel = _FakeKernel(busy_looks=10**6)
    cleanup = wait_kernel_cleanup(1.0, kernel.freeing, kernel.clock, kernel.sleep)
    assert not cleanup.done and cleanup.limit_s == 1.0
    assert 1.0 <= cleanup.waited_s < 1.0 + 2 * KERNEL_CLEANUP_POLL_S


def test_the_kernel_cleanup_limit_grows_with_the_tc_lines_and_cables():
    from contract.limits import limit_s, work_limit_s
    from emulator.host import (
        KERNEL_CLEANUP_FLOOR_S,
        KERNEL_CLEANUP_LINE_S,
        KERNEL_CLEANUP_PAIR_S,
        kernel_cleanup_limit_s,
    )

    assert kernel_cleanup_limit_s(1000, 48) == limit_s(KERNEL_CLEANUP_FLOOR_S)  # 12 hosts: the floor
    big = kernel_cleanup_limit_s(157_440, 512)  # ncf-128's hosts: 1,230 lines each
    assert big == work_limit_s(KERNEL_CLEANUP_FLOOR_S, 157_440 * KERNEL_CLEANUP_LINE_S + 512 * KERNEL_CLEANUP_PAIR_S)
    assert big > limit_s(KERNEL_CLEANUP_FLOOR_S)
