"""The emulator on real namespaces, veths and tc (root only).

Every test uses its own run directory, so it neither waits for nor touches other runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from contract.network import circulant_network
from contract.plan import Link
from emulator import (
    EmulatedNetwork,
    EmulationConfig,
    EmulationError,
    EmulationInputError,
    ShapingError,
    identity,
    nsutil,
    shaping,
)
from emulator.checks import check_paths
from emulator.hostconfig import TC_TIMEOUT_S
from tests.fixtures.sample_plans import circulant_plan, switch_plan

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def _root_links() -> set[str]:
    out = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0].split("@")[0] for line in out.splitlines() if line.strip()}


def _assert_gone(
    pids_and_starts: list[tuple[int, int | None]], netns: set[int], run_dir: Path, root_links_before: set[str]
) -> None:
    # namespace inodes are recycled: a namespace created after our teardown (another run on
    # this machine) may carry one of ours, so only processes started before now count
    now_ticks = float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        alive = [p for p, st in pids_and_starts if nsutil.is_same_process(p, st)]
        if not alive:
            break
        time.sleep(0.05)
    assert alive == [], f"processes of the run still alive: {alive}"
    while True:
        left = [p for p in nsutil.pids_in_netns(netns) if (nsutil.start_time(p) or 0) <= now_ticks]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert left == [], f"processes still live in one of the run's namespaces: {left}"
    assert _root_links() == root_links_before, "root namespace interfaces changed"
    assert not list(run_dir.glob("run-*.json")), "state file left behind"


def _config(tmp_path, **kw) -> EmulationConfig:
    return EmulationConfig(run_dir=str(tmp_path), **kw)


def test_build_and_teardown_leave_nothing(tmp_path):
    before = _root_links()
    network = circulant_network(12, (1, 5))  # the plain description, no Plan
    with EmulatedNetwork(network, _config(tmp_path)) as net:
        assert net.network is network
        shells = [(h.pid, nsutil.start_time(h.pid)) for h in net.hosts]
        netns = {nsutil.netns_inode(h.pid) for h in net.hosts}
        assert len(netns) == 12 and None not in netns
        sleeper = net.popen(3, ["sleep", "60"])  # net.stop() alone would orphan this
        procs = [(sleeper.pid, nsutil.start_time(sleeper.pid))]
        assert nsutil.netns_inode(sleeper.pid) == nsutil.netns_inode(net.hosts[3].pid)
        assert (tmp_path / f"run-{os.getpid()}.json").exists()
        assert _root_links() == before, "cables must never appear in the root namespace"
    assert net.facts["build_s"] > 0 and net.facts["teardown_s"] < 5
    # the teardown ended once the kernel had freed the namespaces (the next build's tc waits for it)
    assert 0 < net.facts["kernel_cleanup_s"] <= net.facts["teardown_s"]
    assert not nsutil.kernel_freeing_namespaces()
    _assert_gone(shells + procs, netns, tmp_path, before)


def _tc_classes(net, u: int) -> dict[str, float]:
    """HTB rates (bit/s) as iproute2's `tc` prints them: independent of our pyroute2 read-back."""
    rates = {}
    for port in net.ports[u]:
        out = net.hosts[u].cmd(f"tc class show dev {port.ifname}")
        m = re.search(r"class htb 1:1 .*?rate (\S+) ceil", out)
        if m:
            rates[port.ifname] = _parse_rate(m.group(1))
    return rates


def test_qdiscs_match_the_plan_including_rates_above_1_gbit(tmp_path):
    # switch baseline: 4x ports, here 4 * 600 = 2400 Mbit/s: TCLink would leave these unshaped
    plan = switch_plan(6, degree=4)
    with EmulatedNetwork(plan, _config(tmp_path, link_mbps=600)) as net:
        assert net.link_rate_bps == [2_400_000_000] * 6
        for u in range(net.nodes):
            rates = _tc_classes(net, u)
            assert len(rates) == len(net.ports[u])
            for port in net.ports[u]:
                assert rates[port.ifname] == pytest.approx(2.4e9, rel=1e-3), port.ifname
        mtu = net.hosts[0].cmd("cat /sys/class/net/h0-eth0/mtu").strip()
        assert mtu == "9000"


def _parse_rate(text: str) -> float:
    units = {"Gbit": 1e9, "Mbit": 1e6, "Kbit": 1e3, "bit": 1}
    for unit, mult in units.items():
        if text.endswith(unit):
            return float(text[: -len(unit)]) * mult
    return float(text)


def test_a_link_left_unshaped_is_caught(tmp_path, monkeypatch):
    # a fault we cannot cause with a correct tc: the batch silently skips one cable
    real = shaping.tc_batch
    monkeypatch.setattr(shaping, "tc_batch", lambda items, netem: real(items[1:], netem))
    before = _root_links()
    net = EmulatedNetwork(circulant_plan(4, (1,)), _config(tmp_path))
    with pytest.raises(ShapingError, match="root qdisc"):
        net.start()
    shells = [(h.pid, None) for h in net.hosts]
    _assert_gone(shells, set(), tmp_path, before)


def test_routes_are_the_plan_and_packets_take_the_plan_paths(tmp_path):
    from pyroute2 import IPRoute

    plan = circulant_plan(12, (1, 5))
    # iperf3 -n ends the test once the bytes are written, not delivered: at 400 Mbit/s most
    # of the 2 MiB has crossed by then (at 100 Mbit/s only about half)
    with EmulatedNetwork(plan, _config(tmp_path, link_mbps=400)) as net:
        owner = {p.address: p.node for ports in net.ports for p in ports}
        for u in range(12):
            with nsutil.in_netns_of(net.hosts[u].pid), IPRoute() as ipr:
                routes = {r.get_attr("RTA_DST"): r for r in ipr.get_routes(family=2, table=254) if r["dst_len"] == 32}
            for v in range(12):
                if v != u:
                    r = routes[identity(v)]
                    assert owner[r.get_attr("RTA_GATEWAY")] == plan.next_hop[u, v]
                    assert r.get_attr("RTA_PREFSRC") == identity(u)
        multi_hop = [(s, d) for s in range(12) for d in range(12) if s != d and len(plan.path(s, d)) > 2]
        assert multi_hop
        results = check_paths(net, multi_hop)
        bad = [r for r in results if not r.ok]
        assert not bad, bad[:3]
        # relayed TCP traffic really crosses the intermediate host
        relay = plan.path(0, 3)[1]
        port = next(p for p in net.ports[relay] if p.peer == plan.path(0, 3)[2])
        before = int(net.hosts[relay].cmd(f"cat /sys/class/net/{port.ifname}/statistics/tx_bytes"))
        srv = net.popen(3, ["iperf3", "-s", "-1"], stdout=subprocess.DEVNULL)
        time.sleep(0.3)
        cli = net.popen(0, ["iperf3", "-c", net.host_address(3), "-n", "2M"], stdout=subprocess.DEVNULL)
        assert cli.wait(timeout=20) == 0
        srv.wait(timeout=5)
        after = int(net.hosts[relay].cmd(f"cat /sys/class/net/{port.ifname}/statistics/tx_bytes"))
        assert after - before >= 1_000_000, (before, after)  # the 2 MiB crossed the relaying host (not relayed: ~0)


def test_one_connection_takes_one_of_parallel_cables(tmp_path):
    # what the predictor's per-connection cap stands on (contract.network.connection_capacities):
    # the multipath route hashes a TCP connection onto one cable, so it never adds them up
    from contract.network import Network, Routes

    links = (Link(0, 1, 25.0), Link(0, 1, 25.0))
    network = Network(2, 0, links, Routes(kind="table", table=((-1, 1), (0, -1))), 1.0, 25.0)
    with EmulatedNetwork(network, _config(tmp_path, link_mbps=50)) as net:
        names = [p.ifname for p in net.ports[0]]
        assert len(names) == 2

        def sent() -> list[int]:
            return [int(net.hosts[0].cmd(f"cat /sys/class/net/{n}/statistics/tx_bytes")) for n in names]

        before = sent()
        srv = net.popen(1, ["iperf3", "-s", "-1"], stdout=subprocess.DEVNULL)
        time.sleep(0.3)
        cli = net.popen(0, ["iperf3", "-c", net.host_address(1), "-n", "4M"], stdout=subprocess.DEVNULL)
        assert cli.wait(timeout=30) == 0
        srv.wait(timeout=10)
        moved = [b - a for a, b in zip(before, sent())]
    assert sum(moved) >= 2_000_000, moved
    assert max(moved) >= 0.97 * sum(moved), moved  # one cable: the other only its neighbour's odd frame


def _classes(net, u: int, ifname: str) -> dict[int, tuple[int, int]]:
    """The HTB classes the kernel has on one cable end: ``{minor: (rate, ceil)}`` in bit/s."""
    from pyroute2 import IPRoute

    with nsutil.in_netns_of(net.hosts[u].pid), IPRoute() as ipr:
        got = shaping.read_back(ipr, {ipr.link_lookup(ifname=ifname)[0]: ifname})[ifname]
    return {m: (c["rate_bps"], c["ceil_bps"]) for m, c in got["classes"].items()}


@pytest.mark.parametrize("fair", [True, False], ids=["fair", "fifo"])
def test_a_cable_end_has_a_class_per_destination_routed_through_it(tmp_path, fair):
    # what the predictor's max-min sharing stands on: h0's cable to h1 carries traffic to h1
    # and, relayed by h1, to h2; with fair queues each destination has its own HTB class (each
    # sends at its own rate, an equal share), without them one class (one FIFO queue) carries all
    from contract.network import Network, Routes

    links = (Link(0, 1, 25.0), Link(1, 2, 25.0))
    routes = Routes(kind="table", table=((-1, 1, 1), (0, -1, 2), (1, 1, -1)))
    network = Network(3, 0, links, routes, 1.0, 25.0)
    with EmulatedNetwork(network, _config(tmp_path, link_mbps=50, fair_queues=fair)) as net:
        (port,) = net.ports[0]
        classes = _classes(net, 0, port.ifname)
        if fair:  # equal shares of what the default class's floor leaves, each may borrow the cable
            assert classes == {1: (50e6, 50e6), 2: (0.5e6, 50e6), 0x101: (24.75e6, 50e6), 0x102: (24.75e6, 50e6)}
            assert net.facts["destination_classes"] == 6  # h0: 1, 2 (one cable); h1: 0 | 2; h2: 0, 1
        else:
            assert classes == {1: (50e6, 50e6)} and net.facts["destination_classes"] == 0

        def sent() -> dict[int, int]:  # bytes each class sent (this tc has no -j for -s)
            stats = net.hosts[0].cmd(f"tc -s class show dev {port.ifname}")
            return {int(m, 16): int(n) for m, n in re.findall(r"class htb 1:(\w+) .*\n Sent (\d+) bytes", stats)}

        moved = []
        for d in (2, 1):  # to h2 first, then to h1
            before = sent()
            srv = net.popen(d, ["iperf3", "-s", "-1"], stdout=subprocess.DEVNULL)
            time.sleep(0.3)
            cli = net.popen(0, ["iperf3", "-c", net.host_address(d), "-n", "2M"], stdout=subprocess.DEVNULL)
            assert cli.wait(timeout=30) == 0
            srv.wait(timeout=10)
            moved.append({m: n - before.get(m, 0) for m, n in sent().items()})
        if fair:  # then busy together: eight connections to h1, one to h2 (one FIFO queue gave it 31-43%)
            servers = [net.popen(d, ["iperf3", "-s", "-1"], stdout=subprocess.DEVNULL) for d in (1, 2)]
            time.sleep(0.3)
            clients = [
                net.popen(
                    0, ["iperf3", "-J", "-c", net.host_address(d), "-t", "2", "-P", str(n)], stdout=subprocess.PIPE
                )
                for d, n in ((1, 8), (2, 1))
            ]
            received = [json.loads(c.communicate(timeout=30)[0])["end"]["sum_received"]["bytes"] for c in clients]
            for srv in servers:
                srv.wait(timeout=10)
            assert 0.44 <= received[1] / sum(received) <= 0.56, received  # half the cable each
    big = 500_000  # of the 2 MiB, the classes' byte counters saw 0.8-1.1 MB in a trial run
    if fair:  # each destination's bytes in its own class; the other class sees at most a stray frame
        assert moved[0][0x102] >= big and moved[0][0x101] < 20_000, moved
        assert moved[1][0x101] >= big and moved[1][0x102] < 20_000, moved
    else:
        assert all(m[1] >= big for m in moved), moved


def _neighbours(net, u: int) -> list[dict]:
    out = net.hosts[u].cmd("ip -j neigh show")
    return json.loads(out or "[]")


def test_every_cable_end_knows_its_peer_without_arp(tmp_path):
    # the kernel's one neighbour table for all namespaces overflows at 1024 learned entries
    # (128 hosts of degree 8): permanent entries for every cable's other end, and no ARP
    plan = circulant_plan(12, (1, 5))
    with EmulatedNetwork(plan, _config(tmp_path, link_mbps=100)) as net:
        traced = check_paths(net, [(0, 6), (6, 0), (3, 9)])  # traffic first, relayed too
        assert traced and all(r.ok for r in traced), traced
        for u in range(12):
            entries = {(e["dst"], e["dev"]): e for e in _neighbours(net, u)}
            assert len(entries) == len(net.ports[u]), entries  # nothing learned by ARP
            for p in net.ports[u]:
                e = entries[(p.peer_address, p.ifname)]
                assert e["state"] == ["PERMANENT"]
                peer = next(q for q in net.ports[p.peer] if q.link == p.link)
                real_mac = net.hosts[p.peer].cmd(f"cat /sys/class/net/{peer.ifname}/address").strip()
                assert e["lladdr"] == real_mac


def test_bad_plan_raises_before_anything_exists(tmp_path):
    plan = circulant_plan(6, (1,))
    bad = dataclasses.replace(plan, links=plan.links + (Link(0, 17, 25.0),))
    before = _root_links()
    with pytest.raises(EmulationInputError) as err:
        EmulatedNetwork(bad, _config(tmp_path)).start()
    assert "\n" not in str(err.value)
    assert not list(tmp_path.iterdir())
    assert _root_links() == before


def test_second_run_gets_a_clear_busy_message(tmp_path):
    from emulator import EmulationBusyError

    with EmulatedNetwork(circulant_plan(4, (1,)), _config(tmp_path)):
        with pytest.raises(EmulationBusyError, match="another topolab network is up"):
            EmulatedNetwork(circulant_plan(4, (1,)), _config(tmp_path)).start()


_HOLDER = textwrap.dedent("""
    import json, subprocess, sys, time
    from emulator import EmulatedNetwork, EmulationConfig, nsutil
    from tests.fixtures.sample_plans import circulant_plan
    net = EmulatedNetwork(circulant_plan(6, (1,)), EmulationConfig(run_dir=sys.argv[1]))
    with net:
        procs = [net.popen(i, ["sleep", "300"]) for i in range(6)] if sys.argv[2] == "procs" else []
        procs += [net.popen(0, ["iperf3", "-s"], stdout=subprocess.DEVNULL)] if procs else []
        info = {"pids": [[h.pid, nsutil.start_time(h.pid)] for h in net.hosts]
                        + [[p.pid, nsutil.start_time(p.pid)] for p in procs],
                "netns": [nsutil.netns_inode(h.pid) for h in net.hosts]}
        print(json.dumps(info), flush=True)
        time.sleep(300)
""")


def _start_holder(tmp_path, procs: bool = True):
    """A run in a child process: its hosts, and (``procs``) processes started in them."""
    argv = [PYTHON, "-c", _HOLDER, str(tmp_path), "procs" if procs else "shells"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, text=True)
    info = json.loads(proc.stdout.readline())
    return proc, [tuple(x) for x in info["pids"]], set(info["netns"])


def test_sigkilled_run_is_cleaned_by_topolab_clean(tmp_path):
    from topolab.clean.command import run_clean

    before = _root_links()
    proc, pids, netns = _start_holder(tmp_path)
    proc.kill()
    proc.wait()
    time.sleep(0.3)
    survivors = [p for p, st in pids if nsutil.is_same_process(p, st)]
    assert survivors, "a SIGKILLed run leaves its host processes behind (that is what clean is for)"
    assert run_clean(argparse.Namespace(run_dir=str(tmp_path), json=False)) == 0
    _assert_gone(pids, netns, tmp_path, before)


def test_a_run_killed_before_it_started_anything_in_its_hosts_is_cleaned(tmp_path):
    """Its host shells carry the run's mark (``TOPOLAB_RUN``), which is how clean proves their
    namespaces are the run's own: a run killed while building, or an idle `topolab shell`."""
    from topolab.clean.command import run_clean

    before = _root_links()
    proc, pids, netns = _start_holder(tmp_path, procs=False)
    from emulator.state import ENV_MARK

    (state,) = tmp_path.glob("run-*.json")
    marked = set(nsutil.pids_with_env(ENV_MARK, json.loads(state.read_text())["run_id"]))
    proc.kill()
    proc.wait()
    assert all(nsutil.is_same_process(p, st) for p, st in pids), "the hosts' shells outlive a SIGKILLed driver"
    assert marked >= {p for p, _ in pids}, "every host shell carries the run's mark"
    assert run_clean(argparse.Namespace(run_dir=str(tmp_path), json=False)) == 0
    _assert_gone(pids, netns, tmp_path, before)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_tears_down_by_itself(tmp_path, sig):
    before = _root_links()
    proc, pids, netns = _start_holder(tmp_path)
    proc.send_signal(sig)
    proc.wait(timeout=20)
    _assert_gone(pids, netns, tmp_path, before)


def test_clean_never_touches_processes_outside_our_namespaces(tmp_path):
    """A state file (stale, corrupt or forged) that names the root namespace, PID 1, this very
    process and a process outside every namespace of ours: clean ends none of them."""
    from emulator.state import ENV_MARK, clean_dead_runs

    run_id = "4242-1"
    outsider = subprocess.Popen(["sleep", "30"], env={**os.environ, ENV_MARK: run_id})
    try:
        root_ns = nsutil.netns_inode(1)
        ours = nsutil.netns_inode(os.getpid())
        state = {
            "run_id": run_id,
            "owner_pid": 4242,
            "owner_start": 1,  # an owner that is gone
            "hosts": {
                "h0": {"pid": 1, "start": nsutil.start_time(1), "netns": root_ns},
                "h1": {"pid": outsider.pid, "start": nsutil.start_time(outsider.pid), "netns": ours},
                "h2": {"pid": os.getpid(), "start": nsutil.start_time(os.getpid()), "netns": ours},
            },
            "procs": [{"pid": outsider.pid, "start": nsutil.start_time(outsider.pid), "argv0": "sleep"}],
        }
        (tmp_path / "run-4242.json").write_text(json.dumps(state))
        report = clean_dead_runs(str(tmp_path), log=lambda msg: None)
        assert report.killed == []
        assert report.runs_cleaned == [run_id]  # the stale state file itself is gone
        assert outsider.poll() is None, "clean ended a process outside the project's namespaces"
        assert nsutil.netns_inode(1) == root_ns
    finally:
        outsider.kill()
        outsider.wait()


def test_host_whose_shell_exits_is_one_clear_error(tmp_path, monkeypatch):
    """A host shell that dies at once: the build fails within seconds naming the host, and
    nothing is left behind."""
    from emulator.host import EmulatedHost

    before = _root_links()
    real_start = EmulatedHost.startShell

    def start_then_die(self, mnopts=None):
        real_start(self, mnopts)
        if self.name == "h2":
            os.kill(self.pid, signal.SIGKILL)

    monkeypatch.setattr(EmulatedHost, "startShell", start_then_die)
    t0 = time.monotonic()
    with pytest.raises(EmulationError) as err:
        EmulatedNetwork(circulant_plan(4, (1,)), _config(tmp_path)).start()
    assert time.monotonic() - t0 < 10
    assert "host h2" in str(err.value) and "\n" not in str(err.value)
    assert _root_links() == before
    assert not list(tmp_path.glob("run-*.json"))


def _fake_tc(tmp_path, monkeypatch, on_h1: str) -> None:
    """Put a ``tc`` first on PATH that runs ``on_h1`` for host h1's batch and hands every
    other batch to the real tc: a fault of one host's tc we cannot cause with a correct tc."""
    real = shutil.which("tc")
    assert real
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "tc"
    script.write_text(
        "#!/bin/sh\n"
        "input=$(cat)\n"
        'case "$input" in *"dev h1-eth"*) ' + on_h1 + " ;; esac\n"
        f'printf "%s\\n" "$input" | exec {real} "$@"\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


@pytest.mark.parametrize(
    "on_h1, cause, waited_s",
    [
        ('echo "Error: Specified qdisc kind is unknown." >&2; exit 1', "Specified qdisc kind is unknown", 0.0),
        ("sleep 300", "tc did not finish within", TC_TIMEOUT_S),
    ],
    ids=["tc-fails", "tc-hangs"],
)
def test_a_failing_tc_is_one_line_naming_the_host_and_leaves_nothing(tmp_path, monkeypatch, on_h1, cause, waited_s):
    _fake_tc(tmp_path, monkeypatch, on_h1)
    run_dir = tmp_path / "run"
    before = _root_links()
    net = EmulatedNetwork(circulant_plan(4, (1,)), EmulationConfig(run_dir=str(run_dir), netem="off"))
    t0 = time.monotonic()
    with pytest.raises(ShapingError) as err:
        net.start()
    # after tc's own timeout when it hangs (0.1 s, and 6.1 s with the 5 s timeout, measured);
    # the 10 s only stop a hang
    assert time.monotonic() - t0 < waited_s + 10
    message = str(err.value)
    assert "host h1" in message and cause in message, message
    assert "\n" not in message and err.value.exit_code != 0
    assert not any(f"host h{u}:" in message for u in (0, 2, 3)), "only h1's tc failed"
    shells = [(h.pid, None) for h in net.hosts]
    _assert_gone(shells, {h.netns for h in net.hosts}, run_dir, before)


def test_frames_make_cables_carry_mtu_packets_in_a_class_per_connection(tmp_path):
    # packets = "frames": TCP hands each cable at most one MTU (gso_max_size), and each cable
    # end shares its rate among the connections routed through it; h1 relays h0 -> h2, so
    # its cable to h2 carries the connections (0, 2) and (1, 2), each in its own class
    from contract.network import Network, Routes

    links = (Link(0, 1, 25.0), Link(1, 2, 25.0))
    routes = Routes(kind="table", table=((-1, 1, 1), (0, -1, 2), (1, 1, -1)))
    network = Network(3, 0, links, routes, 1.0, 25.0)
    mtu = 9000
    with EmulatedNetwork(network, _config(tmp_path, link_mbps=50, mtu=mtu, packets="frames")) as net:
        assert net.facts["packets"] == "frames"
        to_h2 = next(p for p in net.ports[1] if p.peer == 2)
        classes = _classes(net, 1, to_h2.ifname)
        base = shaping.CONNECTION_CLASS_BASE
        assert set(classes) == {1, 2, base, base + 1}, classes  # cable, default, (0, 2), (1, 2)
        assert classes[base] == classes[base + 1] == (8, 50e6)  # each only borrows the cable
        link = net.hosts[1].cmd(f"ip -d link show dev {to_h2.ifname}")
        assert f"gso_max_size {mtu} " in link, link

        def sent() -> dict[int, tuple[int, int]]:  # (bytes, packets) each class sent
            stats = net.hosts[1].cmd(f"tc -s class show dev {to_h2.ifname}")
            return {
                int(m, 16): (int(b), int(n))
                for m, b, n in re.findall(r"class htb 1:(\w+) .*\n Sent (\d+) bytes (\d+) pkt", stats)
            }

        srv = net.popen(2, ["iperf3", "-s", "-1"], stdout=subprocess.DEVNULL)
        time.sleep(0.3)
        cli = net.popen(0, ["iperf3", "-c", net.host_address(2), "-n", "2M"], stdout=subprocess.DEVNULL)
        assert cli.wait(timeout=30) == 0
        srv.wait(timeout=10)
        moved = sent()
    relayed, packets = moved[base]  # h0 -> h2 crossed h1 in the class of connection (0, 2)
    assert relayed >= 1_000_000 and moved[base + 1][0] < 20_000, moved  # 1.8 MB of the 2 MiB in a trial
    assert relayed / packets <= mtu + 14, moved  # frames of one MTU, not 64 KiB offload packets
