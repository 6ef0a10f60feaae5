"""The build's time limits grow with the work they wait for (issue 50 item 2).

One host's ``tc -batch`` gets a limit from its lines and from how many batches run beside it
(`emulator.hostconfig.tc_limit_s`), the batches run one per core at a time
(`tc_parallelism`), a netlink batch gets a limit from its requests (`emulator.nlbatch.
batch_limit_s`) and the read-back one from its classes (`readback_limit_s`); none falls below
the fixed limit it had, and each stays a bound. As root, one host of 8,000 classes is shaped
and read back under its computed limits.

Run as a program (root), this module measures the costs those limits are built on, in
namespaces of its own, and prints them:

    sudo .venv/bin/python -m tests.emulator.test_build_limits
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

if __name__ == "__main__":  # run as a program from anywhere: the project's packages first
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from contract.limits import SLOWDOWN, WORK_MARGIN, limit_s, work_limit_s
from emulator import hostconfig, nlbatch, nsutil, shaping
from emulator.addressing import identity
from emulator.errors import ShapingError
from emulator.host import wait_kernel_cleanup
from emulator.hostconfig import (
    READBACK_TIMEOUT_S,
    TC_TIMEOUT_S,
    apply_qdiscs,
    check_qdiscs,
    readback_limit_s,
    tc_limit_s,
    tc_parallelism,
    usable_cores,
)


def test_a_limit_is_its_floor_until_the_work_needs_more_then_grows_with_it():
    assert work_limit_s(5.0, 0.0) == work_limit_s(5.0, 0.4) == limit_s(5.0)
    assert work_limit_s(5.0, 2.0) == pytest.approx(limit_s(2.0 * WORK_MARGIN))
    assert work_limit_s(5.0, 2.0, sharing=3) == pytest.approx(3 * work_limit_s(5.0, 2.0))
    assert work_limit_s(5.0, 2.0, sharing=0) == work_limit_s(5.0, 2.0)
    assert limit_s(1.0) == SLOWDOWN  # and every limit is on this machine


def test_a_tc_limit_grows_with_the_batch_and_the_batches_beside_it():
    assert tc_limit_s(0, 1) == tc_limit_s(300, 2) == TC_TIMEOUT_S  # a host of 128 servers' classes
    small, large = tc_limit_s(20_000, 1), tc_limit_s(40_000, 1)
    assert TC_TIMEOUT_S < small < large and large == pytest.approx(2 * small)
    assert tc_limit_s(20_000, 4) == pytest.approx(4 * small)
    assert tc_limit_s(20_000, 4) > tc_limit_s(20_000, 2) > small


def test_the_read_back_limit_grows_with_the_classes_and_shares_them_among_processes():
    assert readback_limit_s(0, 1) == readback_limit_s(1000, 2) == READBACK_TIMEOUT_S
    one, two = readback_limit_s(16_260, 1), readback_limit_s(16_260, 2)
    assert READBACK_TIMEOUT_S < two < one and one == pytest.approx(2 * two, rel=1e-3)


def test_tc_runs_one_batch_per_core_at_a_time():
    assert tc_parallelism(128) == min(128, usable_cores())
    assert tc_parallelism(1) == tc_parallelism(0) == 1
    assert 1 <= usable_cores() <= (os.cpu_count() or 1)


def _veth_batch(pairs: int) -> bytes:
    from pyroute2 import IPBatch

    batch = IPBatch()
    for k in range(pairs):
        batch.link("add", ifname=f"a{k}", kind="veth", net_ns_pid=1, peer={"ifname": f"b{k}", "net_ns_pid": 1})
    return bytes(batch.batch)


def _route_batch(routes: int) -> bytes:
    encode = nlbatch.RouteEncoder("cubic")
    return b"".join(encode(1 + d, identity(d), "198.18.0.1", 2, "198.18.0.2") for d in range(routes))


def test_a_netlink_limit_counts_links_created_dearer_than_other_requests():
    assert nlbatch.batch_limit_s(_route_batch(2000)) == nlbatch.NETLINK_TIMEOUT_S  # a few ms of work
    assert nlbatch.batch_limit_s(b"") == nlbatch.NETLINK_TIMEOUT_S
    cables = nlbatch.batch_limit_s(_veth_batch(2000))  # 1,000 servers of degree 4
    assert cables > nlbatch.NETLINK_TIMEOUT_S
    assert cables == pytest.approx(work_limit_s(nlbatch.NETLINK_FLOOR_S, 2000 * nlbatch.NEW_LINK_S))
    assert nlbatch.batch_limit_s(_route_batch(40_000)) > nlbatch.NETLINK_TIMEOUT_S


class _FakeTc:
    """Stands in for `hostconfig._run_tc`: records the batches at once and each one's limit,
    fails the hosts named in ``failing``."""

    def __init__(self, failing: tuple[str, ...] = ()):
        self.failing = failing
        self.lock = threading.Lock()
        self.active = self.most_active = 0
        self.limits: dict[str, float] = {}

    def __call__(self, host, text: str, lines: int, timeout_s: float) -> str:
        with self.lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
            self.limits[host.name] = timeout_s
        time.sleep(0.002)  # long enough for the other threads to start theirs, were they allowed
        with self.lock:
            self.active -= 1
        return f"host {host.name}: tc did not finish within {timeout_s:.3g} s" if host.name in self.failing else ""


def _work(hosts: int, big: int = -1) -> list[tuple[SimpleNamespace, list[shaping.Shaping]]]:
    """``hosts`` hosts of one cable end each; host ``big`` carries 12,000 destination classes."""
    work = []
    for u in range(hosts):
        destinations = tuple(shaping.DestinationClass(d, identity(d), 1000) for d in range(12_000 if u == big else 3))
        work.append((SimpleNamespace(name=f"h{u}", pid=0), [shaping.Shaping(f"h{u}-eth0", 10**9, 0.0, destinations)]))
    return work


def test_batches_run_at_most_parallel_at_a_time_each_with_the_limit_of_its_lines(monkeypatch):
    fake = _FakeTc()
    monkeypatch.setattr(hostconfig, "_run_tc", fake)
    phase = apply_qdiscs(_work(16, big=5), use_netem=False, parallel=3)
    assert 1 <= fake.most_active <= 3 and len(fake.limits) == 16
    big_lines = len(shaping.tc_batch(_work(16, big=5)[5][1], False).splitlines())
    assert fake.limits["h5"] == tc_limit_s(big_lines, 3) > TC_TIMEOUT_S
    assert {fake.limits[f"h{u}"] for u in range(16) if u != 5} == {TC_TIMEOUT_S}
    assert (phase.hosts, phase.parallel, phase.most_lines, phase.limit_s) == (16, 3, big_lines, fake.limits["h5"])


def test_after_a_failure_no_batch_starts_and_the_error_names_the_host_and_its_limit(monkeypatch):
    fake = _FakeTc(failing=("h0",))
    monkeypatch.setattr(hostconfig, "_run_tc", fake)
    with pytest.raises(ShapingError) as err:
        apply_qdiscs(_work(8), use_netem=False, parallel=1)
    assert list(fake.limits) == ["h0"]  # one at a time, and none after h0's failure
    assert str(err.value) == f"tc refused the shaping: host h0: tc did not finish within {TC_TIMEOUT_S:.3g} s"


@contextlib.contextmanager
def bare_host(tag: str, ends: int) -> Iterator[SimpleNamespace]:
    """A namespace of our own (``tl<tag><pid>``) with ``ends`` veth pairs (``x<i>``/``y<i>``)
    and a process living in it, as a host (``name``, ``pid``, ``ns``); deleted after."""
    ns = f"tl{tag}{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    sleeper = None
    try:
        links = "".join(f"link add x{i} type veth peer name y{i}\n" for i in range(ends))
        subprocess.run(["ip", "-n", ns, "-batch", "-"], input=links, text=True, check=True)
        sleeper = subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "600"])
        ours = nsutil.netns_inode(os.getpid())
        for _ in range(1000):  # until it has entered the namespace (ip execs sleep there)
            if nsutil.netns_inode(sleeper.pid) not in (ours, None):
                break
            time.sleep(0.005)
        assert nsutil.netns_inode(sleeper.pid) not in (ours, None)
        yield SimpleNamespace(name="h0", pid=sleeper.pid, ns=ns)
    finally:
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()
        subprocess.run(["ip", "netns", "del", ns], check=True)


def many_classes(ends: int, classes: int) -> list[shaping.Shaping]:
    """``classes`` destination classes spread over ``ends`` cable ends ``x<i>``."""
    per_end = classes // ends
    return [
        shaping.Shaping(
            f"x{i}",
            10**9,
            0.0,
            tuple(shaping.DestinationClass(d, identity(d), 10**9 // (2 * per_end)) for d in range(per_end)),
        )
        for i in range(ends)
    ]


@pytest.mark.root
def test_a_host_of_8000_classes_is_shaped_and_read_back_within_its_limits():
    items = many_classes(16, 8000)
    with bare_host("bl", 16) as host:
        phase = apply_qdiscs([(host, items)], use_netem=False)  # raises if past its limit
        assert phase.limit_s == tc_limit_s(phase.most_lines, 1) > TC_TIMEOUT_S and phase.parallel == 1
        check_qdiscs([(host, items)], use_netem=False)  # every class as planned, within its limit
        out = subprocess.run(
            ["ip", "netns", "exec", host.ns, "tc", "class", "show", "dev", "x15"], capture_output=True, text=True
        ).stdout
        assert len(out.splitlines()) == 500 + 2  # x15's destinations, its default class and the cable's


def _timed(argv: list[str], text: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, input=text, text=True, check=True)
    return time.perf_counter() - t0


def measure() -> None:
    """Print the costs the limits are built on (`hostconfig.TC_LINE_S`, `READBACK_CLASS_S`,
    `nlbatch.NEW_LINK_S`, `nlbatch.REQUEST_S`), measured alone in namespaces of our own."""
    from pyroute2 import IPBatch

    for classes, ends in ((1016, 8), (4000, 8), (8000, 8), (8000, 16), (10_000, 80)):
        items = many_classes(ends, classes)
        with bare_host("m", ends) as host:
            text = shaping.tc_batch(items, False)
            lines = text.count("\n")
            took = _timed(["ip", "netns", "exec", host.ns, "tc", "-batch", "-"], text)
            t0 = time.perf_counter()
            check_qdiscs([(host, items)], use_netem=False)
            read = time.perf_counter() - t0
        freed = wait_kernel_cleanup(600).waited_s  # the namespace was deleted as the block ended
        print(
            f"tc -batch: {classes} classes on {ends} ends, {lines} lines: {took:.3f} s, {took / lines * 1e6:.1f} us "
            f"a line; read back in one process: {read:.2f} s, {read / classes * 1e6:.0f} us a class; "
            f"freed by the kernel in {freed:.2f} s, {freed / lines * 1e6:.1f} us a line",
            flush=True,
        )
    for pairs, routes in ((500, 5000), (2000, 20_000)):
        with bare_host("ma", 0) as a, bare_host("mb", 0) as b:
            batch = IPBatch()
            for k in range(pairs):
                peer = {"ifname": f"b{k}", "net_ns_pid": b.pid}
                batch.link("add", ifname=f"a{k}", kind="veth", net_ns_pid=a.pid, peer=peer)
            t0 = time.perf_counter()
            nlbatch.send(bytes(batch.batch), timeout_s=600)
            made = time.perf_counter() - t0
            with nsutil.in_netns_of(a.pid):
                index = socket.if_nametoindex("a0")
                nlbatch.send(nlbatch.addr_add(1, index, "198.18.255.0", 31) + nlbatch.link_up(2, index))
                encode = nlbatch.RouteEncoder("cubic")
                data = b"".join(
                    encode(10 + d, identity(d), "198.18.255.1", index, "198.18.255.0") for d in range(routes)
                )
                t0 = time.perf_counter()
                nlbatch.send(data, timeout_s=600)
                routed = time.perf_counter() - t0
        freed = wait_kernel_cleanup(600).waited_s
        print(
            f"netlink: {pairs} veth pairs {made:.3f} s, {made / pairs * 1e6:.0f} us a pair; "
            f"{routes} routes {routed:.3f} s, {routed / routes * 1e6:.1f} us a route; "
            f"freed by the kernel in {freed:.2f} s, {freed / pairs * 1e6:.0f} us a pair",
            flush=True,
        )


if __name__ == "__main__":
    measure()
