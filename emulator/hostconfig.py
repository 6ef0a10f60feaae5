"""Per-host configuration, batched: addresses, sysctls, routes, qdiscs; then the read-back.

For each host, inside its namespace (the calling thread enters it with ``setns``, see
`emulator.nsutil`), over netlink in a few batches (`emulator.nlbatch`):
- addresses: the identity /32 on ``lo`` and each cable end's /31, every link up;
- neighbours: for each cable end, a permanent entry for the other end (its address at its
  `addressing.cable_mac`). No ARP at all: the kernel keeps one neighbour table for all
  namespaces, and past ``net.ipv4.neigh.default.gc_thresh3`` entries (1024 by default: 128
  hosts of degree 8 have 1024 cable ends) it drops new ones ("neighbor table overflow!"),
  so packets waited for ARP and TCP for its retransmission timeouts, seconds each. Permanent
  entries do not count against that limit, and we leave the root namespace's sysctls alone;
- sysctls (`host_sysctls`, written by `write_sysctls`): ip_forward on (hosts relay for each
  other, as the TopoOpt prototype relayed with RDMA forwarding), rp_filter off (a relayed
  packet arrives on a cable that is not the route back to its source), cubic, no ICMP rate
  limit so traceroute sees every hop, no tail loss probes, a large TCP receive buffer from a
  connection's start (`TCP_RECEIVE_BUFFER_BYTES`);
- routes (`host_routes`, sent by `send_routes`): one static /32 route per destination from
  the network's next-hop table, with the identity as preferred source; a next hop reached by
  parallel cables gets one multipath route over all of them (flows hashed on ports). Every
  route carries ``congctl cubic`` (`CUBIC`) and TCP's least retransmission timeout
  (`nlbatch.RTO_MIN_MS`, locked).
- planes of a bandwidth allocation (`emulator.planes`): the host's plane addresses (/32 on
  ``lo``) and its plane rules with the addresses; with the routes, a /28 route per sourcing
  node's plane addresses (like its identity) and the plane routes in their tables.

Then per host one ``tc -batch`` shapes every cable end (`apply_qdiscs`: as many hosts at a
time as this process has cores, `tc_parallelism`; each batch bounded by `tc_limit_s` of its
lines), and `check_qdiscs` reads every qdisc back from the kernel (bounded by
`readback_limit_s` of the classes): Mininet never raises on tc errors, so nothing is trusted
unread. Every limit grows with the work it waits for, never below the fixed limit it had
(`contract.limits.work_limit_s`), and stays a bound its error states.

`host_sysctls`, `loopback_addresses` and `host_routes` decide what a host gets, apart from how
it is sent: `emulator.hostscripts` writes the same decisions as shell scripts for real servers.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import itertools
import multiprocessing
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import numpy as np

from contract.limits import limit_s, work_limit_s

from . import nlbatch, nsutil, shaping
from .addressing import PLANE_BLOCK_LEN, Port, identity, plane_address, plane_block
from .errors import EmulationError, ShapingError
from .host import KERNEL_BUSY_WAIT_S, EmulatedHost
from .planes import RULE_PRIORITY, NodePlanes

CUBIC = "cubic"
"""Congestion control of every route (``ip route ... congctl cubic``): the default bbr leaves
10-27% of a shaped link unused, and a child namespace may only pick algorithms the ROOT
namespace lists in tcp_allowed_congestion_control, which we must not change. A route's
congctl applies to every connection over it, both ends, whatever the namespace default."""
TC_FLOOR_S = 5.0
"""The least time one host's ``tc -batch`` may take, native (`tc_limit_s`)."""
TC_TIMEOUT_S = limit_s(TC_FLOOR_S)
"""... on this machine: the limit of a batch of up to 10,000 lines alone (5,000 two at a time)."""
TC_LINE_S = 50e-6
"""What one line of a ``tc -batch`` costs (an HTB class, a u32 filter, a qdisc), alone:
14-28 us measured with 1,016-10,000 destination classes (and their filters) over 8-80 cable
ends, 39-41 us with 1,000 on each of 8 ends (u32's filters of one device grow superlinearly; a
cable end carries at most the servers routed through it), on a 2-core machine by
``sudo .venv/bin/python -m tests.emulator.test_build_limits`` (one namespace of our own:
`shaping.tc_batch` of that many classes through ``ip netns exec NS tc -batch -``, timed)."""
READBACK_FLOOR_S = 10.0
"""The least time the read-back of every host's qdiscs may take, native (`readback_limit_s`)."""
READBACK_TIMEOUT_S = limit_s(READBACK_FLOOR_S)
"""... on this machine."""
READBACK_CLASS_S = 400e-6
"""What reading one HTB class back costs a read-back process (the class, its filter, its
qdiscs, decoded by pyroute2 and checked): 210-360 us measured at 128 hosts and 16,260 destination
classes (1.7-2.9 s in two processes on two cores, ``build_phases_s["readback"]`` of
`scenarios/ncf-128.toml`'s build); 124-148 us a class in one process on one host of
1,016-10,000 classes (``sudo .venv/bin/python -m tests.emulator.test_build_limits``)."""
READBACK_HOSTS_PER_PROCESS = 16
"""Fewer hosts than this per core are read back in one process (a fork costs ~10 ms)."""
ROUTE_SEQ_BASE = 100_000
"""Netlink sequence numbers of the routes: ``ROUTE_SEQ_BASE + destination``, above those of
the address requests, so each ack names its request."""
PLANE_BLOCK_SEQ_BASE = 200_000
"""... of the routes to a node's plane addresses: ``PLANE_BLOCK_SEQ_BASE + node`` (nodes
with planes < 2048, so above every destination route's number)."""
PLANE_ROUTE_SEQ_BASE = 300_000
"""... of the plane routes: ``PLANE_ROUTE_SEQ_BASE + i`` for the host's i-th `PlaneHop`."""
_TC_ERRORS_SHOWN = 3

TCP_RECEIVE_BUFFER_BYTES = 4 << 20
"""Every emulated host's TCP receive buffer at a connection's start (``net.ipv4.tcp_rmem``'s
middle value, 128 KiB by default), so the window a receiver advertises can grow with the data
from the first packets instead of waiting for the kernel's tuning of the buffer. That tuning
grows the buffer only when the application reads more in a round trip than the window let in
(it cannot, while the window is what limits it), so with the default a connection could keep
its first window, 6 frames of 9000 bytes (56,704 bytes), through a whole run while the others'
grew past 2 MB: at the dilated rates its round trip (the plan's latency dilated, and the time
the machine takes to answer) then held it below its cable's rate. In the Vagrant VM under
software emulation (round trips of 90-600 ms at 4 Mbit/s) one ring connection in three runs
out of four kept that window and carried its cable at a third of the rate, `topoopt-12` 26-27%
slower than predicted; with this buffer every data connection's window was 2-3 MB and the run
2.3% (docs/emulation.md section 3)."""
TCP_RMEM_MIN = 4096
"""``net.ipv4.tcp_rmem``'s least value (the kernel's default): what a socket keeps under memory
pressure."""
TCP_RMEM_MAX = 32 << 20
"""``net.ipv4.tcp_rmem``'s largest value, how far the kernel may tune a buffer: the reference
machine's own (the kernel's default is 6 MiB), so no host tunes less far than the machine
would; a buffer takes memory only for what waits in it."""

HOST_SYSCTLS = {
    "net/ipv4/ip_forward": "1",
    "net/ipv4/conf/all/rp_filter": "0",
    "net/ipv4/conf/default/rp_filter": "0",
    "net/ipv4/conf/lo/rp_filter": "0",
    "net/ipv4/tcp_congestion_control": CUBIC,  # where allowed; routes carry congctl cubic anyway
    "net/ipv4/icmp_ratelimit": "0",  # traceroute must see every hop, every time
    "net/ipv4/icmp_msgs_per_sec": "1000000",
    "net/ipv4/icmp_msgs_burst": "100000",
    "net/ipv4/fib_multipath_hash_policy": "1",  # parallel cables: hash on ports too
    # no tail loss probes: on a shaped cable nothing is lost, and a probe after 2 RTTs of
    # tens of microseconds resends what a shaped class still holds (as the timeouts did:
    # `nlbatch.RTO_MIN_MS`)
    "net/ipv4/tcp_early_retrans": "0",
    # every connection's receive buffer large from its start (`TCP_RECEIVE_BUFFER_BYTES`)
    "net/ipv4/tcp_rmem": f"{TCP_RMEM_MIN} {TCP_RECEIVE_BUFFER_BYTES} {TCP_RMEM_MAX}",
}
OPTIONAL_SYSCTLS = {
    "net/ipv4/icmp_msgs_per_sec",
    "net/ipv4/icmp_msgs_burst",
    "net/ipv4/fib_multipath_hash_policy",
    "net/ipv4/tcp_congestion_control",
}


def host_sysctls(ifnames: Sequence[str]) -> dict[str, str]:
    """``{key: value}`` of every sysctl a host sets (keys as paths under ``/proc/sys``):
    `HOST_SYSCTLS` and reverse-path filtering off on each of its cable ends ``ifnames``."""
    values = dict(HOST_SYSCTLS)
    for name in ifnames:
        values[f"net/ipv4/conf/{name}/rp_filter"] = "0"
    return values


def write_sysctls(ifnames: list[str]) -> None:
    """Per-namespace sysctls of one host (the calling thread is in its namespace)."""
    for key, value in host_sysctls(ifnames).items():
        try:
            with open(f"/proc/sys/{key}", "w") as f:
                f.write(value)
        except OSError as exc:
            if key not in OPTIONAL_SYSCTLS:
                raise EmulationError(f"cannot set sysctl {key.replace('/', '.')}={value} in a host: {exc}") from None


def peer_neighbour(seq: int, index: int, port: Port) -> bytes:
    """The permanent neighbour entry of ``port``'s other end (module docstring); a link
    that goes down loses it, so bringing one up adds it again."""
    return nlbatch.permanent_neighbour(seq, index, port.peer_address, port.peer_mac)


def subnet31(address: str) -> str:
    """Network address of the /31 that holds the cable end ``address``."""
    return str(ipaddress.ip_network(f"{address}/31", strict=False).network_address)


def loopback_addresses(u: int, planes: NodePlanes = NodePlanes()) -> list[str]:
    """The /32 addresses node ``u`` holds on its loopback: its identity, then one per plane it
    sends on (`emulator.planes`)."""
    return [identity(u)] + [plane_address(u, plane) for plane in planes.planes]


def configure_host(
    host: EmulatedHost,
    u: int,
    ports: list[Port],
    next_hop: np.ndarray,
    name_of: Callable[[int], str],
    timeout_s: float = nlbatch.NETLINK_TIMEOUT_S,
    planes: NodePlanes = NodePlanes(),
) -> None:
    """Addresses, sysctls, plane rules and routes of node ``u``: a few netlink batches in its
    namespace."""
    data, labels, seq = bytearray(), {}, 0

    def add(msg: bytes, label: str) -> None:
        data.extend(msg)
        labels[seq] = label

    with nsutil.in_netns_of(host.pid):
        write_sysctls([p.ifname for p in ports])
        lo = socket.if_nametoindex("lo")
        index = {p.ifname: socket.if_nametoindex(p.ifname) for p in ports}
        seq += 1
        add(nlbatch.link_up(seq, lo), f"{host.name}: lo up")
        for address in loopback_addresses(u, planes):
            seq += 1
            add(nlbatch.addr_add(seq, lo, address, 32), f"{host.name}: loopback address {address}/32")
        for address, table in planes.rules:
            seq += 1
            add(nlbatch.rule_add(seq, address, table, RULE_PRIORITY), f"{host.name}: rule from {address} table {table}")
        for p in ports:
            idx = index[p.ifname]
            seq += 1
            add(nlbatch.addr_add(seq, idx, p.address, 31), f"{host.name}: {p.address}/31 on {p.ifname}")
            seq += 1
            add(nlbatch.link_up(seq, idx), f"{host.name}: {p.ifname} up")
            seq += 1
            add(peer_neighbour(seq, idx, p), f"{host.name}: neighbour {p.peer_address} on {p.ifname}")
        nlbatch.send(bytes(data), labels=labels, timeout_s=timeout_s)
        data.clear()
        labels.clear()
        for p in ports:
            # the kernel's connected /31 again, now with cubic (see CUBIC)
            seq += 1
            add(
                nlbatch.connected_route(seq, subnet31(p.address), 31, index[p.ifname], p.address, CUBIC),
                f"{host.name}: connected route of {p.ifname}",
            )
        send_routes(host, u, ports, next_hop, index, name_of, data, labels, timeout_s=timeout_s, planes=planes)


@dataclass(frozen=True)
class HostRoute:
    """One route a host installs: to ``dst/dst_len`` in routing table ``table`` over
    ``cables`` (its own cable ends towards the next hop; several: one multipath route over
    all of them), from the host's identity as preferred source. ``seq`` is the route's
    netlink sequence number, ``label`` names it in an error."""

    seq: int
    dst: str
    dst_len: int
    table: int
    cables: tuple[Port, ...]
    label: str


def host_routes(
    u: int,
    ports: Sequence[Port],
    next_hop: np.ndarray,
    name_of: Callable[[int], str],
    planes: NodePlanes = NodePlanes(),
) -> list[HostRoute]:
    """Every route of node ``u`` over ``ports`` (its cables that are up): one /32 per
    destination (main table) by ``next_hop``, the /28 of each other sourcing node's plane
    addresses like that node's identity, and ``u``'s plane routes in their tables. A plane
    route whose cables are all down is left out (that plane falls back to the main table);
    a main-table route whose cables are all down raises `EmulationError`. What `send_routes`
    sends over netlink and `emulator.hostscripts` writes as ``ip route`` text."""
    by_peer: dict[int, list[Port]] = {}
    for p in ports:
        by_peer.setdefault(p.peer, []).append(p)
    me = name_of(u)

    def cables_towards(v: int) -> tuple[Port, ...]:
        hop = int(next_hop[u, v])
        cables = by_peer.get(hop)
        if not cables:
            raise EmulationError(f"{me}: route to {name_of(v)} goes via {name_of(hop)}, but every cable to it is down")
        return tuple(cables)

    routes = []
    for v in range(len(next_hop)):
        if v != u:
            label = f"{me}: route to {name_of(v)} via {name_of(int(next_hop[u, v]))}"
            routes.append(HostRoute(ROUTE_SEQ_BASE + v, identity(v), 32, nlbatch.MAIN_TABLE, cables_towards(v), label))
    for v in planes.sources:
        label = f"{me}: route to the plane addresses of {name_of(v)}"
        routes.append(
            HostRoute(
                PLANE_BLOCK_SEQ_BASE + v, plane_block(v), PLANE_BLOCK_LEN, nlbatch.MAIN_TABLE, cables_towards(v), label
            )
        )
    for i, hop in enumerate(planes.hops):
        cables = by_peer.get(hop.next_hop)
        if cables:
            label = (
                f"{me}: plane {hop.plane} of {name_of(hop.src)} to {name_of(hop.dst)} "
                f"via {name_of(hop.next_hop)} (table {hop.table})"
            )
            routes.append(HostRoute(PLANE_ROUTE_SEQ_BASE + i, identity(hop.dst), 32, hop.table, tuple(cables), label))
    return routes


def send_routes(
    host: EmulatedHost,
    u: int,
    ports: list[Port],
    next_hop: np.ndarray,
    index: dict[str, int],
    name_of: Callable[[int], str],
    data: bytearray,
    labels: dict[int, str],
    *,
    replace: bool = False,
    timeout_s: float = nlbatch.NETLINK_TIMEOUT_S,
    planes: NodePlanes = NodePlanes(),
) -> None:
    """The routes of node ``u`` over ``ports`` (`host_routes`), appended to the requests
    already in ``data`` and sent in one batch; multipath routes over parallel cables go in a
    second one. ``replace`` changes the routes of a running network. The calling thread is in
    the host's namespace. Used at build time and by live changes."""
    from pyroute2 import IPBatch

    batch = IPBatch()  # only for multipath routes (parallel cables); the rest is encoded directly
    mp_what: list[str] = []
    encode_route = nlbatch.RouteEncoder(CUBIC, replace=replace)
    for r in host_routes(u, ports, next_hop, name_of, planes):
        if len(r.cables) == 1:
            c = r.cables[0]
            data.extend(encode_route(r.seq, r.dst, c.peer_address, index[c.ifname], host.identity, r.table, r.dst_len))
            labels[r.seq] = r.label
        else:  # parallel cables: spread flows over all of them (L4 hash)
            batch.route(
                "replace" if replace else "add",
                dst=r.dst,
                dst_len=r.dst_len,
                table=r.table,
                prefsrc=host.identity,
                metrics=nlbatch.route_metrics(CUBIC),
                multipath=[{"gateway": c.peer_address, "oif": index[c.ifname]} for c in r.cables],
            )
            mp_what.append(f"multipath {r.label}")
    nlbatch.send(bytes(data), labels=labels, timeout_s=timeout_s)
    if batch.batch:
        nlbatch.send(bytes(batch.batch), mp_what, timeout_s=timeout_s)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container's or taskset's
    share, not the machine's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def tc_parallelism(hosts: int) -> int:
    """How many hosts' ``tc -batch`` run at a time: one per usable core (`usable_cores`), at
    most ``hosts``. Every tc change takes the kernel's one routing-netlink lock, so more at
    once only makes each batch wait for the others: `scenarios/ncf-128.toml`'s 128 batches of
    up to 282 lines took up to 1.2 s each all at once on a quiet 2-core machine (over 5 s on
    a busy one), 24-73 ms each two at a time, and the phase 1.9 s either way."""
    return max(1, min(hosts, usable_cores()))


def tc_limit_s(lines: int, parallel: int) -> float:
    """How long one host's ``tc -batch`` of ``lines`` lines may take while ``parallel``
    batches run at a time (they take turns for the cores and the kernel's lock):
    `contract.limits.work_limit_s` of `TC_LINE_S` a line, at least `TC_FLOOR_S`."""
    return work_limit_s(TC_FLOOR_S, lines * TC_LINE_S, parallel)


@dataclass(frozen=True)
class TcPhase:
    """What `apply_qdiscs` ran: ``hosts`` batches of ``lines`` lines in all, ``parallel`` at a
    time, the longest of ``most_lines`` lines, bounded by ``limit_s`` (the largest limit of any
    batch)."""

    hosts: int
    parallel: int
    most_lines: int
    limit_s: float
    lines: int


def apply_qdiscs(
    work: list[tuple[EmulatedHost, list[shaping.Shaping]]],
    use_netem: bool,
    timeout_s: float | None = None,
    render: Callable[[list[shaping.Shaping], bool], str] | None = None,
    parallel: int | None = None,
) -> TcPhase:
    """One ``tc -batch`` per host (its text from ``render``: by default the build's `shaping.tc_batch`,
    or `shaping.tc_rate_change` for a live rate change), ``parallel`` at a time (default
    `tc_parallelism`), each bounded by ``timeout_s`` (default: `tc_limit_s` of its lines);
    raise `ShapingError` naming the hosts whose tc failed and why (tc's last line, or that it
    did not finish within its limit). After the first failure no further batch starts, so a
    hung tc ends the phase within its limit (and those of the batches beside it)."""
    render = render or shaping.tc_batch  # looked up now: a test may replace it
    texts = [render(items, use_netem) for _host, items in work]
    lines = [text.count("\n") for text in texts]
    parallel = parallel or tc_parallelism(len(work))
    limits = [tc_limit_s(n, parallel) if timeout_s is None else timeout_s for n in lines]
    phase = TcPhase(len(work), parallel, max(lines, default=0), max(limits, default=0.0), sum(lines))
    if not work:
        return phase
    outcomes: dict[int, str] = {}  # by the host's place in ``work``
    jobs = iter(enumerate(zip(work, texts, lines, limits, strict=True)))
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="tc") as pool:

        def start(count: int) -> dict[Future[str], int]:
            return {
                pool.submit(_run_tc, host, text, n, limit): i
                for i, ((host, _items), text, n, limit) in itertools.islice(jobs, count)
            }

        running = start(parallel)
        while running:
            done, _pending = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                outcomes[running.pop(future)] = future.result()
            if not any(outcomes.values()):  # no new batch after a failure: only the running ones end
                running |= start(len(done))
    errors = [outcomes[i] for i in sorted(outcomes) if outcomes[i]]
    if errors:
        more = f" (and {len(errors) - _TC_ERRORS_SHOWN} more)" if len(errors) > _TC_ERRORS_SHOWN else ""
        raise ShapingError("tc refused the shaping: " + "; ".join(errors[:_TC_ERRORS_SHOWN]) + more)
    return phase


def _run_tc(host: EmulatedHost, text: str, lines: int, timeout_s: float) -> str:
    """Run one host's ``tc -batch`` (``lines`` lines) in its namespace; '' if it succeeded,
    else the error."""
    # the batch from an unnamed file, not a pipe: waiting on past the limit (`_wait_while_kernel_frees`)
    # retries ``communicate``, which cannot go on writing an input it had not finished
    with tempfile.TemporaryFile("w+") as batch:
        batch.write(text)
        batch.seek(0)
        proc = subprocess.Popen(
            ["mnexec", "-a", str(host.pid), "tc", "-batch", "-"],
            stdin=batch,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        try:
            _out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _out, err = _wait_while_kernel_frees(proc)
    except subprocess.TimeoutExpired as late:
        proc.kill()
        # not communicate(): a child tc left behind may hold the pipes; teardown ends it
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout_s)
        for pipe in (proc.stdout, proc.stderr):
            pipe.close()
        more = f", then {late.timeout:.3g} s more while the kernel freed network namespaces" if late.timeout else ""
        return f"host {host.name}: tc did not finish within {timeout_s:.3g} s (its batch of {lines} lines){more}"
    if proc.returncode == 0:
        return ""
    lines_out = err.strip().splitlines()
    return f"host {host.name}: {lines_out[-1] if lines_out else f'tc exited with status {proc.returncode}'}"


def _wait_while_kernel_frees(proc: subprocess.Popen, slice_s: float = 0.5) -> tuple[str, str]:
    """``proc``'s output once it ends, waiting past its limit while the kernel frees network
    namespaces (`KERNEL_BUSY_WAIT_S` at most); `subprocess.TimeoutExpired` once it does not (then
    the batch is hung). Retrying ``communicate`` loses no output."""
    start, waited = time.monotonic(), 0.0
    while nsutil.kernel_freeing_namespaces() and waited < KERNEL_BUSY_WAIT_S:
        try:
            return proc.communicate(timeout=slice_s)
        except subprocess.TimeoutExpired:
            waited = time.monotonic() - start
    raise subprocess.TimeoutExpired(proc.args, waited)  # its timeout: how long it waited past the limit


def readback_limit_s(classes: int, processes: int) -> float:
    """How long reading back ``classes`` HTB classes may take, split among ``processes``
    processes on as many cores: `contract.limits.work_limit_s` of `READBACK_CLASS_S` a class
    for the largest share, at least `READBACK_FLOOR_S`."""
    return work_limit_s(READBACK_FLOOR_S, -(-classes // max(1, processes)) * READBACK_CLASS_S)


def check_qdiscs(
    work: list[tuple[EmulatedHost, list[shaping.Shaping]]], use_netem: bool, timeout_s: float | None = None
) -> None:
    """Read every host's qdiscs back and raise `ShapingError` on any cable not shaped as
    planned. pyroute2 decodes every class and filter in Python (128 hosts with a class per
    destination: 16,256 of each, 4.6 s in one process), so the hosts are split among up to
    one forked process per core (`READBACK_HOSTS_PER_PROCESS` hosts at least each), which
    enter the hosts' namespaces and return the mismatches; the whole read-back is bounded by
    ``timeout_s`` (default: `readback_limit_s` of the classes), after which the processes are
    ended."""
    jobs = [(host.pid, host.name, items) for host, items in work]
    processes = max(1, min(usable_cores(), len(jobs) // READBACK_HOSTS_PER_PROCESS))
    chunks = [jobs[i::processes] for i in range(processes)]
    if timeout_s is None:
        classes = sum(_classes(items) for _host, items in work)
        timeout_s = readback_limit_s(classes, processes)
    pool = multiprocessing.get_context("fork").Pool(processes, initializer=_default_signals)
    try:
        outcome = pool.map_async(functools.partial(_read_back, use_netem=use_netem), chunks)
        try:
            found = outcome.get(timeout_s)
        except multiprocessing.TimeoutError:
            raise ShapingError(f"reading the qdiscs back from the hosts took more than {timeout_s:.3g} s") from None
    finally:
        pool.terminate()
        pool.join()
    shaping.raise_on([problem for problems in found for problem in problems])


def _classes(items: list[shaping.Shaping]) -> int:
    """The HTB classes of one host's shaping: each cable's, and its default and destination classes."""
    return sum(1 + (1 + len(s.destinations) if s.destinations else 0) for s in items)


def _default_signals() -> None:
    """A read-back process ends at SIGTERM/SIGINT like any process (not by the emulator's handlers)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _read_back(jobs: list[tuple[int, str, list[shaping.Shaping]]], use_netem: bool) -> list[str]:
    """The mismatches of some hosts (``(shell pid, name, shaping)`` each), read in their namespaces."""
    from pyroute2 import IPRoute

    problems: list[str] = []
    for pid, name, items in jobs:
        with nsutil.in_netns_of(pid), IPRoute() as ipr:
            names = {ipr.link_lookup(ifname=s.ifname)[0]: s.ifname for s in items}
            actual = shaping.read_back(ipr, names)
        problems.extend(shaping.check(items, actual, use_netem, name))
    return problems
