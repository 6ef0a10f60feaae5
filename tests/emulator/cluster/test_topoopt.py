"""topoopt-12 over three stand-in machines: placed by planner/topology/partition.py, built on Mininet
Cluster Edition (emulator/cluster/net.py), checked with the same path and goodput checks
`topolab verify` uses on one machine (emulator/checks.py)."""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.checks import check_goodput, check_paths
from emulator.cluster import ClusterNetwork
from planner import build_plan, load_scenario
from planner.collectives.from_plan import allreduce_for_plan
from planner.topology.partition import partition_network
from tests.fixtures.standins import StandIns

pytestmark = pytest.mark.root

MACHINES = 3
ROUNDS = 3
START_TIMEOUT_S = 30.0  # a worker that fails to start is named from its exit long before this


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


def test_multi_machine_topoopt12_collective_is_verified(standins: StandIns, monkeypatch) -> None:
    # the workers start through the hosts' popen on their machines and exchange data over the
    # tunnels (tcp:// on the identities). The coordinator's files (its ipc:// control socket,
    # the specs) sit in a directory the stand-ins cannot see, as on real machines: the workers
    # get their spec on stdin and reach the control socket through one each machine's sshd
    # forwards, in that machine's /run/topolab
    from topolab.collective.command import measure

    monkeypatch.setattr(tempfile, "tempdir", str(standins.driver_dir))
    plan = build_plan(load_scenario("scenarios/topoopt-12.toml"))
    cut = partition_network(plan.network, MACHINES)
    assert standins.ssh is not None
    with ClusterNetwork(plan.network, cut.assignment, standins.machines, standins.ssh) as net:
        results = measure(net, plan, ["topoopt"], [1 << 20], repeat=1, warmup=0, timeout_s=20, log=lambda _m: None)
        assert [r.verified for r in results] == [True]
        assert results[0].times_s[0] >= results[0].ideal_s  # no faster than the shaped cables allow
        relays = sorted(set(net._relays.values()))
        assert len(relays) == MACHINES and all(r.startswith("/run/topolab/cluster-") for r in relays)
        assert not any(Path(r).exists() for r in relays)  # on the machines, not here
        on_machine = standins.ssh.run(standins.machines[0], "ls /run/topolab\n", 5, "listing")
        assert any(r.endswith(name) for name in on_machine.split() for r in relays)
    for i, machine in enumerate(standins.machines):  # the sockets went with the run
        assert "control" not in standins.ssh.run(machine, "ls /run/topolab 2>/dev/null || true\n", 5, f"m{i}")


def test_multi_machine_worker_failure_names_rank_and_cause(standins: StandIns, monkeypatch) -> None:
    # a worker that cannot start on its machine (here: no such Python there) is named, with
    # what it wrote on that machine's stderr, from its exit (1.5 s measured), not by the
    # start timeout
    from workers.coordinator import Coordinator, WorkerFailure

    monkeypatch.setattr(tempfile, "tempdir", str(standins.driver_dir))
    plan = build_plan(load_scenario("scenarios/topoopt-12.toml"))
    cut = partition_network(plan.network, MACHINES)
    schedule = allreduce_for_plan(plan, "topoopt", 1 << 16).to_dict()
    assert standins.ssh is not None
    with ClusterNetwork(plan.network, cut.assignment, standins.machines, standins.ssh) as net:
        hosts = [net.host_address(i) for i in range(plan.servers)]
        t0 = time.monotonic()
        with pytest.raises(WorkerFailure) as failure:
            with Coordinator(
                schedule,
                hosts,
                spawn=lambda rank, argv: net.popen(rank, argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL),
                python="/nonexistent/python3",
                control_relay=net.relay_control,
                start_timeout_s=START_TIMEOUT_S,
            ):
                pass
        message = str(failure.value)
        assert time.monotonic() - t0 < START_TIMEOUT_S, message
        assert message.startswith("worker rank ") and "exited with code" in message, message
        assert "exited with code 0" not in message, message  # its own exit status, through ssh
        assert "/nonexistent/python3" in message, message  # its stderr, from its machine
