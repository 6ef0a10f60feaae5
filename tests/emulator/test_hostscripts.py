"""Host scripts (`emulator.hostscripts`): the emulator's configuration of each node as a shell
script for a real server, applied unchanged to bare namespaces joined by veth cables.

The root tests make one namespace per node (``tlhs-<pid>-<tag><u>``) and one veth pair per
cable, created directly inside the two namespaces and named unlike the emulator's interfaces
(``n<u>p<j>``), so the scripts only work if their interface variables are honoured. Each
node's script runs unchanged (``ip netns exec NS sh h<u>.sh`` with ``ETH<j>`` in the
environment), twice, and must leave the same state; then `emulator.checks` (what ``topolab
verify`` runs) traces every path and plane and measures every cable's goodput, and
`emulator.shaping.check` reads every qdisc, class and filter back against the emulator's own
shaping. Namespaces are deleted by name at the end, also on failure.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from contract.emulation import emulated_rates
from contract.network import Network, circulant_network
from emulator import EmulatedNetwork, EmulationConfig, EmulationError, EmulationInputError, identity, shaping
from emulator.addressing import node_name, ports_of
from emulator.checks import check_goodput, check_paths, check_plane_paths
from emulator.hostscripts import cable_end_shaping, check_text, host_scripts, port_variable
from emulator.planes import RULE_PRIORITY, node_planes

REPO = Path(__file__).resolve().parents[2]
CONFIG = EmulationConfig(link_mbps=100)
SCRIPT_TIMEOUT_S = 30
_ROUTE = re.compile(r"^route replace (198\.18\.\d+\.\d+)/32 via (\S+) dev \$\{ETH(\d+)\} proto static", re.M)


def _scenario(tmp_path: Path, planned: bool = False) -> Path:
    path = REPO / "scenarios" / "topoopt-12.toml"
    if planned:
        text = path.read_text().replace("[topology]", '[topology]\nrouting = "planned"', 1)
        path = tmp_path / "topoopt-12-planned.toml"
        path.write_text(text)
    return path


def _plan_network(tmp_path: Path, planned: bool = False) -> Network:
    from planner.build import build_plan
    from planner.scenario import load_scenario

    return build_plan(load_scenario(_scenario(tmp_path, planned))).network


def _exported(tmp_path: Path, planned: bool = False) -> dict[str, str]:
    """The scripts `topolab export --formats hosts` writes, at the emulator's rates (`CONFIG`):
    what a user applies to real servers is what these tests apply to namespaces."""
    from topolab.cli import main

    out = tmp_path / "export"
    argv = ["export", str(_scenario(tmp_path, planned)), "--to", str(out), "--formats", "hosts"]
    assert main([*argv, "--link-mbps", f"{CONFIG.link_mbps:g}"]) == 0
    return {path.name: path.read_text() for path in sorted((out / "hosts").glob("*.sh"))}


@pytest.fixture(scope="module")
def topoopt(tmp_path_factory) -> Network:
    return _plan_network(tmp_path_factory.mktemp("plan"))


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> Network:
    network = _plan_network(tmp_path_factory.mktemp("planned"), planned=True)
    assert network.allocation and any(len(a.paths) > 1 for a in network.allocation)
    return network


# ---- pure: the scripts are the emulator's configuration ------------------------------------


def test_shaping_is_what_the_emulator_builds(topoopt, planned):
    for network in (topoopt, planned):
        net = EmulatedNetwork(network, dataclasses.replace(CONFIG, host_memory_mib=0.001))  # never started
        assert cable_end_shaping(network, CONFIG) == [net.shaping_of(u, 0.0) for u in range(network.nodes)]
    # the planned classes differ from plain equal shares: the allocation is in them
    assert cable_end_shaping(planned, CONFIG) != cable_end_shaping(topoopt, CONFIG)


def test_frames_scripts_shape_as_the_emulator_builds_them(topoopt):
    # packets = "frames": a class per connection, and TCP's packets of one MTU on every cable
    frames = dataclasses.replace(CONFIG, packets="frames")
    net = EmulatedNetwork(topoopt, dataclasses.replace(frames, host_memory_mib=0.001))  # never started
    shaped = cable_end_shaping(topoopt, frames)
    assert shaped == [net.shaping_of(u, 0.0) for u in range(topoopt.nodes)]
    assert all(d.source for ends in shaped for s in ends for d in s.destinations)
    script = host_scripts(topoopt, frames)["h0.sh"]
    assert f"mtu {frames.mtu} gso_max_size {frames.mtu} up" in script
    assert "match ip src" in script and "gso_max_size" not in host_scripts(topoopt, CONFIG)["h0.sh"]


def test_each_route_goes_to_the_plans_next_hop(topoopt):
    scripts = host_scripts(topoopt, CONFIG)
    ports = ports_of(topoopt.links, topoopt.nodes, topoopt.servers)
    assert sorted(scripts) == sorted(f"h{u}.sh" for u in range(12))
    for u in range(topoopt.nodes):
        text = scripts[f"h{u}.sh"]
        routes = _ROUTE.findall(text)
        assert len(routes) == topoopt.nodes - 1
        for dst, via, j in routes:
            v = int(dst.rsplit(".", 1)[1]) - 1
            port = ports[u][int(j)]
            assert (port.peer_address, port.peer) == (via, int(topoopt.next_hop[u, v]))
        assert f"{port_variable(0)}=${{{port_variable(0)}:-h{u}-eth0}}" in text
        assert "rto_min 5000ms" in text and "congctl cubic" in text


def test_parallel_cables_get_one_multipath_route():
    network = circulant_network(4, (1, 2))  # stride 2 of 4: two cables between 0 and 2
    text = host_scripts(network, CONFIG)["h0.sh"]
    line = next(x for x in text.splitlines() if x.startswith(f"route replace {identity(2)}/32"))
    assert line.endswith("nexthop via 198.19.0.9 dev ${ETH2} nexthop via 198.19.0.12 dev ${ETH3}"), line


def test_every_script_is_valid_sh_and_every_command_word_is_generated(planned):
    scripts = host_scripts(planned, CONFIG, plan_name="a\nrm -rf / $(reboot) `x`")
    for text in scripts.values():
        subprocess.run(["sh", "-n"], input=text, text=True, check=True)
        assert text.count("\n#") > 5 and "a_rm_-rf_/___reboot___x_" in text.splitlines()[1]
        body = [x for x in text.splitlines() if x and not x.startswith("#")]
        assert not any("reboot" in x for x in body)
    for bad in ("addr replace 198.18.0.1/32 dev x;reboot", "route replace $(id)", "dev ${ETH0}`x`"):
        with pytest.raises(EmulationError, match="refusing"):
            check_text([bad])


def test_a_network_the_emulator_refuses_is_refused(topoopt):
    broken = dataclasses.replace(topoopt, link_gbps=-1.0)
    with pytest.raises(EmulationInputError, match="link_gbps"):
        host_scripts(broken, CONFIG)
    looping = dataclasses.replace(topoopt, links=topoopt.links[:-1])  # a route over a missing cable
    with pytest.raises(EmulationInputError, match="plan.routes"):
        host_scripts(looping, CONFIG)


# ---- root: applied to bare namespaces --------------------------------------------------------


class _Host:
    """What `emulator.checks` asks of a host: ``cmd`` runs a shell command in it."""

    def __init__(self, ns: str):
        self.ns = ns

    def cmd(self, command: str) -> str:
        return subprocess.run(
            ["ip", "netns", "exec", self.ns, "sh", "-c", command], capture_output=True, text=True, timeout=10
        ).stdout


class Namespaces:
    """One bare namespace per node, a veth pair per cable inside them, as `emulator.checks`
    reads a network (``network``, ``popen``, ``host_address``, ``ports``, ``hosts``, the
    rates); nothing of the emulator builds them."""

    def __init__(self, network: Network, tag: str):
        self.network = network
        self.names = [f"tlhs-{os.getpid()}-{tag}{u}" for u in range(network.nodes)]
        self.ports = ports_of(network.links, network.nodes, network.servers)
        self.ifnames = [[f"n{u}p{j}" for j in range(len(self.ports[u]))] for u in range(network.nodes)]
        rates = emulated_rates(network, CONFIG)
        self.mtu, self.link_rate_bps = rates.mtu, rates.link_rate_bps(network.links)
        self.hosts = [_Host(ns) for ns in self.names]

    def create(self) -> None:
        lines = [f"netns add {ns}" for ns in self.names]
        for k, link in enumerate(self.network.links):
            (a, ja), (b, jb) = (
                (u, next(j for j, p in enumerate(self.ports[u]) if p.link == k)) for u in (link.a, link.b)
            )
            lines.append(
                f"link add {self.ifnames[a][ja]} netns {self.names[a]} type veth "
                f"peer name {self.ifnames[b][jb]} netns {self.names[b]}"
            )
        subprocess.run(["ip", "-batch", "-"], input="\n".join(lines) + "\n", text=True, check=True, timeout=30)

    def delete(self) -> None:
        """End what still runs in our namespaces (by PID: only our processes live there),
        then delete each by name; the kernel frees them and their veths."""
        for ns in self.names:
            out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
            for pid in out.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        subprocess.run(
            ["ip", "-force", "-batch", "-"],
            input="".join(f"netns del {ns}\n" for ns in self.names),
            text=True,
            capture_output=True,
        )

    def environment(self, u: int) -> dict[str, str]:
        return os.environ | {port_variable(j): name for j, name in enumerate(self.ifnames[u])}

    def apply(self, scripts: dict[str, str], folder: Path, extra: dict[str, str] | None = None) -> None:
        """Run every node's script, unchanged, in its namespace (all at once, with the
        variables ``extra`` set too); each must succeed."""
        for name, text in scripts.items():
            (folder / name).write_text(text)

        def run(u: int) -> subprocess.CompletedProcess:
            path = folder / f"{node_name(u, self.network.servers)}.sh"
            argv = ["ip", "netns", "exec", self.names[u], "sh", str(path)]
            return subprocess.run(
                argv, env=self.environment(u) | (extra or {}), capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S
            )

        with ThreadPoolExecutor(4) as pool:
            done = list(pool.map(run, range(self.network.nodes)))
        for u, proc in enumerate(done):
            assert proc.returncode == 0, f"h{u}.sh: {proc.stderr}"
            assert proc.stderr == "", f"h{u}.sh: {proc.stderr}"

    def wait_up(self, timeout_s: float = 10.0) -> None:
        """Wait (bounded) until every cable end is operationally up: the kernel reports a
        veth's carrier a moment after both ends are set up, and until then ``ip`` shows the
        link's state and its routes (``linkdown``) otherwise."""
        deadline = time.monotonic() + timeout_s
        waiting = list(range(self.network.nodes))
        while waiting and time.monotonic() < deadline:
            shown = {u: self.hosts[u].cmd("ip -br link; ip -4 route show table all") for u in waiting}
            waiting = [
                u
                for u, text in shown.items()
                if "linkdown" in text
                or not all(re.search(rf"^{name}@\S+\s+UP\b", text, re.M) for name in self.ifnames[u])
            ]
            if waiting:
                time.sleep(0.1)

    def state(self, settle: bool = True) -> list[str]:
        """Everything the scripts set, as text, per namespace, once every cable end is up
        (``settle``; IPv4 only: the veths' IPv6 link-local addresses and neighbours are the
        kernel's, not the scripts')."""
        if settle:
            self.wait_up()
        out = []
        for u, host in enumerate(self.hosts):
            commands = [
                "ip -4 addr",
                "ip -4 route show table all",
                "ip -4 rule",
                "ip -4 neigh",
                "ip -d link",
                "tc qdisc",
            ]
            for name in self.ifnames[u]:
                commands += [f"tc class show dev {name}", f"tc filter show dev {name}"]
            commands.append(
                "sysctl net.ipv4.ip_forward net.ipv4.conf.all.rp_filter net.ipv4.tcp_early_retrans net.ipv4.tcp_rmem"
            )
            # a counter, not configuration: packets sent while a cable end's HTB was being built
            out.append(re.sub(r"direct_packets_stat \d+ ", "", host.cmd("; ".join(commands))))
        return out

    def popen(self, i: int, argv, **kw) -> subprocess.Popen:
        kw.setdefault("start_new_session", True)
        return subprocess.Popen(["ip", "netns", "exec", self.names[i], *map(str, argv)], **kw)

    def host_address(self, i: int) -> str:
        return identity(i)

    def shaping_problems(self, network: Network) -> list[str]:
        """`emulator.shaping.check` of every cable end against the emulator's own shaping,
        read back from the kernel as the emulator reads its hosts."""
        from pyroute2 import NetNS

        problems = []
        for u, items in enumerate(cable_end_shaping(network, CONFIG)):
            rename = {p.ifname: self.ifnames[u][j] for j, p in enumerate(self.ports[u])}
            wanted = [dataclasses.replace(s, ifname=rename[s.ifname]) for s in items]
            with NetNS(self.names[u]) as ns:
                index = {ns.link_lookup(ifname=s.ifname)[0]: s.ifname for s in wanted}
                actual = shaping.read_back(ns, index)
            problems += shaping.check(wanted, actual, False, self.names[u])
        return problems


@pytest.fixture
def namespaces():
    made: list[Namespaces] = []

    def make(network: Network, tag: str) -> Namespaces:
        bench = Namespaces(network, tag)
        made.append(bench)
        bench.create()
        return bench

    try:
        yield make
    finally:
        for bench in made:
            bench.delete()
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert f"tlhs-{os.getpid()}-" not in left


def _assert_same_state(first: list[str], again: list[str]) -> None:
    """The state after a second run is the first run's; else the first difference, as a diff."""
    for u, (a, b) in enumerate(zip(first, again)):
        diff = "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), n=1))
        assert not diff, f"h{u}.sh run twice changed its namespace:\n{diff}"


def _assert_paths(results) -> None:
    wrong = [(r.src, r.dst, r.plane, r.expected, r.observed) for r in results if not r.ok]
    assert not wrong, f"{len(wrong)} of {len(results)} paths differ from the plan: {wrong[:3]}"


@pytest.mark.root
def test_topoopt_scripts_on_bare_namespaces_verify(topoopt, namespaces, tmp_path):
    bench = namespaces(topoopt, "t")
    scripts = _exported(tmp_path)
    assert len(scripts) == 12
    bench.apply(scripts, tmp_path)
    first = bench.state()
    bench.apply(scripts, tmp_path)  # idempotent: the same state again
    _assert_same_state(first, bench.state())
    assert "rto_min lock 5s congctl cubic" in first[0] and "mtu 9000" in first[0]
    assert "PERMANENT" in first[0] and "net.ipv4.ip_forward = 1" in first[0]
    # every pair reachable, by its identity
    for u, host in enumerate(bench.hosts):
        out = host.cmd(
            "; ".join(f"ping -c1 -W1 -q {identity(v)} >/dev/null && echo ok {v}" for v in range(12) if v != u)
        )
        assert out.split().count("ok") == 11, (u, out)
    results = check_paths(bench, timeout_s=30)
    assert len(results) == 132
    _assert_paths(results)
    assert bench.shaping_problems(topoopt) == []
    report = check_goodput(bench, seconds=2.0, omit_s=1, retries_max=4)
    assert len(report.links) == len(topoopt.links) == 24
    assert all(r.ok for r in report.links), [(r.link, r.a_to_b_mbps, r.b_to_a_mbps, r.error) for r in report.links]


@pytest.mark.root
def test_planned_scripts_carry_every_plane(planned, namespaces, tmp_path):
    bench = namespaces(planned, "p")
    scripts = _exported(tmp_path, planned=True)
    bench.apply(scripts, tmp_path)
    first = bench.state()
    bench.apply(scripts, tmp_path)
    _assert_same_state(first, bench.state())
    planes = node_planes(planned)
    for u, host in enumerate(bench.hosts):
        rules = [line for line in host.cmd("ip -4 rule").splitlines() if line.startswith(f"{RULE_PRIORITY}:")]
        assert len(rules) == len(planes[u].rules) > 0
        tables = {t for _a, t in planes[u].rules}
        routes = host.cmd("; ".join(f"ip -4 route show table {t}" for t in sorted(tables))).splitlines()
        assert len(routes) == len(planes[u].hops)
    results = check_plane_paths(bench, timeout_s=30)
    assert len(results) == sum(len(a.paths) for a in planned.allocation)
    assert any(r.plane > 1 for r in results)
    # planes off the destination-based route: a missing rule or table would show
    assert sum(r.expected != planned.path(r.src, r.dst) for r in results) > 50
    _assert_paths(results)
    _assert_paths(check_paths(bench, timeout_s=30))
    assert bench.shaping_problems(planned) == []
    report = check_goodput(bench, seconds=2.0, omit_s=1, retries_max=4)
    assert all(r.ok for r in report.links), [(r.link, r.a_to_b_mbps, r.b_to_a_mbps, r.error) for r in report.links]


@pytest.mark.root
def test_a_bad_interface_name_stops_the_script_before_any_change(topoopt, namespaces, tmp_path):
    bench = namespaces(topoopt, "b")
    path = tmp_path / "h0.sh"
    path.write_text(host_scripts(topoopt, CONFIG)["h0.sh"])
    before = bench.state(settle=False)[0]
    good = bench.environment(0)
    for change, message in (
        ({"ETH1": "n0p0"}, "given twice"),
        ({"ETH2": "x;reboot"}, "not a plain name"),
        ({"ETH3": "-all"}, "not a plain name"),
        ({"ETH0": "nosuchnic0"}, "no interface nosuchnic0"),
        ({"ETH0": "a" * 16}, "longer than 15"),
        ({"STATIC_NEIGHBOURS": "maybe"}, "must be yes or no"),
    ):
        proc = subprocess.run(
            ["ip", "netns", "exec", bench.names[0], "sh", str(path)],
            env=good | change,
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT_S,
        )
        assert proc.returncode == 2 and message in proc.stderr, (change, proc.stderr)
    assert bench.state(settle=False)[0] == before


@pytest.mark.root
def test_parallel_cables_scripts_verify(namespaces, tmp_path):
    network = circulant_network(4, (1, 2))  # two cables between 0 and 2, and between 1 and 3
    bench = namespaces(network, "m")
    scripts = host_scripts(network, CONFIG)
    bench.apply(scripts, tmp_path, {"STATIC_NEIGHBOURS": "no"})  # the NICs' own MACs, and ARP
    assert "PERMANENT" not in bench.hosts[0].cmd("ip -4 neigh")
    assert "nexthop via" in bench.hosts[0].cmd(f"ip -4 route show {identity(2)}")
    _assert_paths(check_paths(bench, timeout_s=30))
    assert bench.shaping_problems(network) == []
    bench.apply(scripts, tmp_path)
    assert bench.hosts[0].cmd("ip -4 neigh").count("PERMANENT") == 4
    _assert_paths(check_paths(bench, timeout_s=30))


def test_a_switch_is_a_forwarding_node_with_a_script_of_its_own():
    from tests.fixtures.sample_plans import switch_plan

    network = switch_plan(4).network
    scripts = host_scripts(network, CONFIG)
    assert sorted(scripts) == ["h0.sh", "h1.sh", "h2.sh", "h3.sh", "s0.sh"]
    assert "forwarding node" in scripts["s0.sh"].splitlines()[1]
    assert scripts["s0.sh"].count("ETH3=${ETH3:-s0-eth3}") == 1
    # a server reaches every other server through the switch's end of its one cable
    routes = _ROUTE.findall(scripts["h0.sh"])
    assert len(routes) == network.nodes - 1 and {via for _dst, via, _j in routes} == {"198.19.0.1"}
