"""While the kernel frees network namespaces (it holds the routing-netlink lock every tc and
netlink change waits for), a build waits before it starts and a host's tc batch may run past
its limit: neither is hung. The kernel's freeing is a fault this test cannot cause on demand
(it lasts milliseconds for a small network), so `nsutil.kernel_freeing_namespaces` stands in
for it; the namespaces, tc and the network are real."""

from __future__ import annotations

import subprocess

import pytest

from contract.network import circulant_network
from emulator import EmulatedNetwork, EmulationConfig, hostconfig, nsutil

from .test_build_limits import bare_host, many_classes

pytestmark = pytest.mark.root


def _freeing_for(looks: int):
    """The kernel reads as freeing namespaces for the first ``looks`` looks, then idle."""
    seen = {"looks": 0}

    def freeing() -> bool:
        seen["looks"] += 1
        return seen["looks"] <= looks

    return freeing, seen


def test_a_build_waits_while_the_kernel_frees_namespaces(tmp_path, monkeypatch) -> None:
    freeing, seen = _freeing_for(5)
    monkeypatch.setattr(nsutil, "kernel_freeing_namespaces", freeing)
    with EmulatedNetwork(circulant_network(4, (1,)), EmulationConfig(run_dir=str(tmp_path), link_mbps=100)) as net:
        assert net.facts["kernel_busy_before_build_s"] > 0
        assert seen["looks"] >= 5 + 3  # busy, then the quiet looks in a row it waits for
    monkeypatch.setattr(nsutil, "kernel_freeing_namespaces", lambda: False)
    with EmulatedNetwork(circulant_network(4, (1,)), EmulationConfig(run_dir=str(tmp_path), link_mbps=100)) as net:
        assert "kernel_busy_before_build_s" not in net.facts  # idle: no wait at all


def test_a_tc_batch_past_its_limit_waits_while_the_kernel_frees_and_fails_once_it_does_not(monkeypatch) -> None:
    items = many_classes(8, 2000)
    text = hostconfig.shaping.tc_batch(items, False)
    lines = text.count("\n")
    with bare_host("kb", 8) as host:
        monkeypatch.setattr(nsutil, "kernel_freeing_namespaces", lambda: True)
        assert hostconfig._run_tc(host, text, lines, 1e-4) == ""  # past 0.1 ms, but the kernel was busy
        out = subprocess.run(
            ["ip", "netns", "exec", host.ns, "tc", "class", "show", "dev", "x7"], capture_output=True, text=True
        ).stdout
        assert len(out.splitlines()) == 250 + 2  # the batch ran to its end
    with bare_host("kc", 8) as host:
        monkeypatch.setattr(nsutil, "kernel_freeing_namespaces", lambda: False)
        error = hostconfig._run_tc(host, text, lines, 1e-4)
        assert error == f"host h0: tc did not finish within 0.0001 s (its batch of {lines} lines)"
