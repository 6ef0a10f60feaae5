"""A network over stand-in machines on Mininet Cluster Edition (emulator/cluster/net.py): every host
reaches every other over veths and VXLAN tunnels, a tunnelled cable holds its HTB rate, and
nothing is left on any machine afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from contract.errors import RunError
from contract.network import circulant_network
from emulator.cluster import ClusterNetwork
from emulator.hostconfig import HOST_SYSCTLS
from tests.fixtures.standins import StandIns

pytestmark = pytest.mark.root

NET = circulant_network(6, (1, 2))  # 12 cables
PLACEMENT = [0, 0, 1, 1, 2, 2]  # cable 0-1 stays on m0, cable 1-2 crosses m0 -> m1
IPERF_SECONDS = 3


@pytest.fixture
def standins() -> Iterator[StandIns]:
    with StandIns(3) as machines:
        yield machines
    assert machines.leftovers() == []


def _machine_state(standins: StandIns, index: int) -> tuple[list[str], set[str], str]:
    """Interfaces of a stand-in's root namespace, the network namespaces its processes use
    and its nftables tables (a run's underlay filter is one)."""
    assert standins.ssh is not None
    out = standins.ssh.run(
        standins.machines[index],
        "ip -br link | cut -d' ' -f1; echo --; readlink /proc/[0-9]*/ns/net | sort -u; echo --; nft list tables\n",
        5,
        "probe",
    )
    links, namespaces, tables = out.split("--\n")
    return links.split(), set(namespaces.split()), tables


def _goodput_mbps(net: ClusterNetwork, server: int, client: int) -> float:
    cable = next(p for p in net.ports[client] if p.peer == server)
    srv = net.popen(server, ["iperf3", "-s", "-1", "-B", cable.peer_address], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        cli = net.popen(
            client, ["iperf3", "-J", "-c", cable.peer_address, "-t", str(IPERF_SECONDS), "-O", "1"], text=True
        )
        out, _ = cli.communicate(timeout=IPERF_SECONDS + 15)
    finally:
        srv.kill()
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6


def test_cluster_network_over_three_machines(standins: StandIns) -> None:
    before = [_machine_state(standins, i) for i in range(3)]
    with ClusterNetwork(NET, PLACEMENT, standins.machines, standins.ssh) as net:
        assert sum(1 for link in net.links if link.vni is not None) == sum(
            net.crosses(k) for k in range(len(NET.links))
        )
        assert 0 < sum(net.crosses(k) for k in range(len(NET.links))) < len(NET.links)
        # each machine runs its hosts: its shells live there, in namespaces of their own
        for u, host in enumerate(net.hosts):
            assert host.machine == standins.machines[PLACEMENT[u]]
            assert host.cmd("cat /proc/1/comm").strip() == "sleep"  # the stand-in's PID namespace
        # every host reaches every other, the tunnels included
        for u in range(NET.nodes):
            targets = " ".join(net.host_address(v) for v in range(NET.nodes) if v != u)
            out = net.hosts[u].cmd(f"for t in {targets}; do ping -c1 -W2 -q $t >/dev/null && echo ok $t; done")
            assert out.count("ok ") == NET.nodes - 1, f"h{u}: {out}"
        # each cable end knows its peer for good, over a tunnel too: nothing learned by ARP
        for u, host in enumerate(net.hosts):
            entries = host.cmd("ip neigh show").strip().splitlines()
            assert len(entries) == len(net.ports[u]) and all(e.split()[-1] == "PERMANENT" for e in entries), entries
        # a tunnel end is a VXLAN device of its own VNI, MTU 1450, shaped like a veth end
        detail = net.hosts[1].cmd("ip -d link show h1-eth1; tc class show dev h1-eth1")
        assert "vxlan id" in detail and "mtu 1450" in detail and "rate 100Mbit" in detail
        # every route runs cubic, each cable's connected /31 included: the namespaces' default
        # is the root's bbr, which carried 82-94 of 95.5 Mbit/s both ways at once
        for u, host in enumerate(net.hosts):
            routes = host.cmd("ip -4 route show").strip().splitlines()
            assert len(routes) == NET.nodes - 1 + len(net.ports[u]), routes  # /32 per node, /31 per cable
            assert all(route.rstrip().endswith("congctl cubic") for route in routes), routes
            assert all("rto_min lock 5s" in route for route in routes), routes  # nlbatch.RTO_MIN_MS
            # the sysctls as the emulator sets them on one machine (a value of three words too)
            assert host.cmd("sysctl -n net.ipv4.tcp_rmem").split() == HOST_SYSCTLS["net/ipv4/tcp_rmem"].split()
        sent_before = net.cable_tx_bytes()
        local = _goodput_mbps(net, 1, 0)  # h0 -> h1: a veth inside m0
        sent = net.cable_tx_bytes()
        assert set(sent) == {(l.a, l.b) for l in NET.links} | {(l.b, l.a) for l in NET.links}
        # the counters saw at least what iperf3 received over its timed seconds
        assert sent[(0, 1)] - sent_before[(0, 1)] >= local * 1e6 / 8 * IPERF_SECONDS
        assert sent[(2, 1)] - sent_before[(2, 1)] < 1e6  # h2 -> h1 stayed nearly idle
        tunnel = _goodput_mbps(net, 2, 1)  # h1 -> h2: VXLAN from m0 to m1
        assert 0.9 * 100 <= local <= 100  # HTB holds the 100 Mbit/s rate
        assert abs(tunnel - local) <= 0.05 * local, f"tunnel {tunnel:.1f} vs local {local:.1f} Mbit/s"
        # the build read every cable end's class back; one shaped otherwise is caught by name
        net.check_shaping()
        net.hosts[1].cmd("tc class change dev h1-eth1 parent 1: classid 1:1 htb rate 50Mbit ceil 50Mbit")
        with pytest.raises(RunError, match=r"on 1 cable end\(s\): h1-eth1: htb rate 50000000 bit/s, wanted 100000000"):
            net.check_shaping()
    assert [_machine_state(standins, i) for i in range(3)] == before  # nothing left on any machine


DRIVER = """
import json, sys, time
from pathlib import Path
from contract.errors import RunError
from contract.network import circulant_network
from emulator.cluster import ClusterNetwork
from emulator.cluster.ssh import Machine, SshOptions
cfg = json.loads(sys.argv[1])
ssh = SshOptions(control_dir=Path(cfg["control"]), identity=Path(cfg["identity"]),
                 known_hosts=Path(cfg["known"]), prefix=tuple(cfg["prefix"]))
machines = [Machine(*m) for m in cfg["machines"]]
net = ClusterNetwork(circulant_network(6, (1, 2)), cfg["placement"], machines, ssh).__enter__()
for u in range(6):
    net.popen(u, ["sleep", "1000"])
time.sleep(1)
print("ready", net.run_id, flush=True)
time.sleep(1000)
"""


def test_cluster_killed_run_is_cleaned_on_every_machine(standins: StandIns) -> None:
    from emulator.cluster.state import clean_machines

    assert standins.ssh is not None
    before = [_machine_state(standins, i) for i in range(3)]
    cfg = {
        "control": str(standins.ssh.control_dir),
        "identity": str(standins.ssh.identity),
        "known": str(standins.ssh.known_hosts),
        "prefix": list(standins.ssh.prefix),
        "machines": [[m.name, m.address] for m in standins.machines],
        "placement": PLACEMENT,
    }
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(cfg)], stdout=subprocess.PIPE, text=True)
    try:
        line = driver.stdout.readline() if driver.stdout else ""
        assert line.startswith("ready"), line
    finally:
        driver.kill()  # SIGKILL: no teardown runs
        driver.wait(5)
    run_id = line.split()[1]
    left = [_machine_state(standins, i) for i in range(3)]
    assert all(len(ns) > len(b[1]) for (_, ns, _), b in zip(left, before))  # the hosts outlive their driver
    assert all("topolab_" in tables for _, _, tables in left)  # and so does each machine's underlay filter
    report = clean_machines(standins.machines, standins.ssh, log=lambda _msg: None)
    assert sorted(report.runs_cleaned) == [f"m{i}: {run_id}" for i in range(3)]
    assert report.killed >= 12  # 6 host shells and the 6 sleeps they started
    assert [_machine_state(standins, i) for i in range(3)] == before
    again = clean_machines(standins.machines, standins.ssh, log=lambda _msg: None)
    assert again.runs_cleaned == [] and again.killed == 0


def test_cluster_clean_leaves_a_live_run_alone(standins: StandIns) -> None:
    from emulator.cluster.state import clean_machines

    with ClusterNetwork(NET, PLACEMENT, standins.machines, standins.ssh) as net:
        report = clean_machines(standins.machines, standins.ssh, log=lambda _msg: None)
        assert sorted(report.runs_alive) == [f"m{i}: {net.run_id}" for i in range(3)]
        assert report.killed == 0
        out = net.hosts[0].cmd(f"ping -c1 -W2 {net.host_address(5)} >/dev/null && echo ok")
        assert out.strip() == "ok"
