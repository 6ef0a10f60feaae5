"""A plan with parallel cables over stand-in machines (emulator/cluster/net.py): the route to a
node reached over two cables is one multipath route, over veths inside a machine and over VXLAN
tunnels between machines, and every pair of servers reaches the other along the planned path
(emulator/checks.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contract.network import circulant_network
from emulator.addressing import identity
from emulator.checks import check_paths
from emulator.cluster import ClusterNetwork
from tests.fixtures.standins import StandIns

pytestmark = pytest.mark.root

# C_4(1, 2): stride 2 gives each of 0-2 and 1-3 two cables (degree 4 everywhere)
NET = circulant_network(4, (1, 2))
# the two cables 0-2 are veths inside m0; the two cables 1-3 are tunnels from m1 to m2
PLACEMENT = [0, 1, 0, 2]


@pytest.fixture
def standins() -> Iterator[StandIns]:
    with StandIns(3) as machines:
        yield machines
    assert machines.leftovers() == []


def test_parallel_cables_are_one_multipath_route_on_every_machine(standins: StandIns) -> None:
    parallel = {(0, 2): False, (1, 3): True}  # pair: whether its cables cross machines
    for (a, b), crossing in parallel.items():
        cables = [k for k, link in enumerate(NET.links) if {link.a, link.b} == {a, b}]
        assert len(cables) == 2 and (PLACEMENT[a] != PLACEMENT[b]) == crossing
    assert standins.ssh is not None
    with ClusterNetwork(NET, PLACEMENT, standins.machines, standins.ssh) as net:
        for a, b in parallel:
            for u, v in ((a, b), (b, a)):
                route = net.hosts[u].cmd(f"ip -4 route show {identity(v)}")
                hops = [line.split() for line in route.splitlines() if "nexthop" in line]
                assert sorted(h[h.index("dev") + 1] for h in hops) == sorted(
                    p.ifname for p in net.ports[u] if p.peer == v
                ), route
                assert f"src {identity(u)}" in route and "congctl cubic" in route and "rto_min lock" in route, route
        # every ordered pair reaches the other along exactly the planned path
        paths = check_paths(net, timeout_s=30)
        wrong = [(r.src, r.dst, r.observed) for r in paths if not r.ok]
        assert len(paths) == 4 * 3 and wrong == []
