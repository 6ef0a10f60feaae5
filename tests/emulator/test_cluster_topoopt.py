"""topoopt-12 over three stand-in machines: placed by planner/partition.py, built on Mininet
Cluster Edition (emulator/cluster.py), checked with the same path and goodput checks
`topolab verify` uses on one machine (emulator/checks.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from emulator.checks import check_goodput, check_paths
from emulator.cluster import ClusterNetwork
from emulator.cluster_standins import StandIns
from planner import build_plan, load_scenario
from planner.partition import partition_network

pytestmark = pytest.mark.root

MACHINES = 3
ROUNDS = 3


@pytest.fixture
def standins() -> Iterator[StandIns]:
    with StandIns(MACHINES) as machines:
        yield machines
    assert machines.leftovers() == []


def test_multi_machine_topoopt12_paths_and_tunnel_rates(standins: StandIns) -> None:
    plan = build_plan(load_scenario("scenarios/topoopt-12.toml"))
    cut = partition_network(plan.network, MACHINES)
    assert sorted(cut.loads) == [16.0, 16.0, 16.0]  # 4 servers of degree 4 on each machine
    assert standins.ssh is not None
    with ClusterNetwork(plan.network, cut.assignment, standins.machines, standins.ssh) as net:
        crossing = [k for k in range(len(plan.network.links)) if net.crosses(k)]
        assert len(crossing) == cut.cut_cables > 0
        # every ordered pair reaches the other along exactly the planned path
        paths = check_paths(net, timeout_s=30)
        wrong = [(r.src, r.dst, r.observed) for r in paths if not r.ok]
        assert len(paths) == 12 * 11 and wrong == []
        # a tunnelled cable carries, both ways at once, what a cable inside a machine carries
        # (within 5%), and neither exceeds its HTB rate. Measured alternately, best of up to
        # ROUNDS: a loaded machine only ever takes goodput away, from either cable at random.
        local = next(k for k in range(len(plan.network.links)) if not net.crosses(k))
        best = {crossing[0]: 0.0, local: 0.0}
        for _ in range(ROUNDS):
            for k in best:
                r = check_goodput(net, links=[k], seconds=2.0, retries_max=0).links[0]
                assert r.ratio(r.a_to_b_mbps or 0) <= 1 + r.tolerance, r  # shaped: never above
                best[k] = max(best[k], min(r.a_to_b_mbps or 0, r.b_to_a_mbps or 0))
            if abs(best[crossing[0]] - best[local]) <= 0.05 * best[local]:
                break
        assert best[local] > 0.5 * r.tcp_max_mbps, best  # the local cable itself works
        assert abs(best[crossing[0]] - best[local]) <= 0.05 * best[local], best


def test_multi_machine_topoopt12_collective_is_verified(standins: StandIns) -> None:
    # the workers start through the hosts' popen on their machines and exchange data over the
    # tunnels (tcp:// on the identities); their control channel is the coordinator's ipc://
    # socket, which the stand-ins reach because they share this host's file system
    from topolab.collective import measure

    plan = build_plan(load_scenario("scenarios/topoopt-12.toml"))
    cut = partition_network(plan.network, MACHINES)
    assert standins.ssh is not None
    with ClusterNetwork(plan.network, cut.assignment, standins.machines, standins.ssh) as net:
        results = measure(net, plan, ["topoopt"], [1 << 20], repeat=1, warmup=0, timeout_s=20, log=lambda _m: None)
        assert [r.verified for r in results] == [True]
        assert results[0].times_s[0] >= results[0].ideal_s  # no faster than the shaped cables allow
