"""planner/topology/partition.py: balanced min-cut partitions of a network over machines."""

from __future__ import annotations

import pytest

import planner.topology.partition as partition_module
from contract.network import Link, Network, circulant_network
from planner.topology.partition import partition_graph, partition_network

ENGINES = ("pymetis", "kernighan-lin")


@pytest.mark.parametrize("method", ENGINES)
def test_machines_partition_two_cliques_cuts_only_the_bridge(method: str) -> None:
    # two 6-cliques joined by one cable: the only balanced cut with one crossing cable
    edges = [(a, b) for part in (range(6), range(6, 12)) for a in part for b in part if a < b] + [(0, 6)]
    p = partition_graph(12, edges, 2, method=method)
    assert p.method == method
    assert p.cut_cables == 1
    assert {p.assignment[u] for u in range(6)} != {p.assignment[u] for u in range(6, 12)}
    assert len(set(p.assignment[:6])) == 1 and len(set(p.assignment[6:])) == 1


@pytest.mark.parametrize("method", ENGINES)
@pytest.mark.parametrize("machines", [2, 3, 4])
def test_machines_partition_of_circulant_is_balanced_and_beats_random(method: str, machines: int) -> None:
    net = circulant_network(48, (1, 5))
    p = partition_network(net, machines, method=method)
    assert sorted(set(p.assignment)) == list(range(machines))
    assert p.imbalance <= 1.1
    assert sum(p.loads) == pytest.approx(2 * len(net.links))
    # a random balanced cut crosses (1 - 1/k) of the cables; contiguous blocks cross 2*k*(1+5)/96
    assert p.cut_fraction <= 2 * machines * 6 / len(net.links) + 1e-9
    assert p.cut_cables == sum(1 for link in net.links if p.assignment[link.a] != p.assignment[link.b])


@pytest.mark.parametrize("method", ENGINES)
def test_machines_load_counts_a_fast_cable_by_its_rate(method: str) -> None:
    # a 4x cable (the switch baseline's ports) loads its ends four times a plain one
    links = (*circulant_network(8, (1,)).links, Link(0, 4, 100.0))
    net = Network(servers=8, switches=0, links=links, routes=None, latency_us=1.0, link_gbps=25.0)  # type: ignore[arg-type]
    p = partition_network(net, 2, method=method)
    assert sum(p.loads) == pytest.approx(2 * 8 + 2 * 4)
    # nodes 0 and 4 carry 6 each, the others 2: machines of 12 each, give or take half a
    # heavy node (counting nodes instead would allow 6 against 18)
    assert all(abs(load - 12) <= 3 for load in p.loads)


def test_machines_auto_falls_back_to_kernighan_lin_without_pymetis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition_module, "pymetis_available", lambda: False)
    p = partition_network(circulant_network(24, (1, 5)), 3)
    assert p.method == "kernighan-lin"
    assert p.imbalance == pytest.approx(1.0)


def test_machines_partition_rejects_bad_counts() -> None:
    with pytest.raises(ValueError, match="machines must be at least 1"):
        partition_graph(4, [(0, 1)], 0)
    with pytest.raises(ValueError, match="a machine would stay empty"):
        partition_graph(4, [(0, 1)], 5)
    with pytest.raises(ValueError, match="partition method"):
        partition_graph(4, [(0, 1)], 2, method="spectral")


def test_machines_single_machine_cuts_nothing() -> None:
    p = partition_network(circulant_network(12, (1, 5)), 1)
    assert p.cut_cables == 0 and p.assignment == (0,) * 12


def test_plan_partition_prints_the_cut(capsys: pytest.CaptureFixture[str]) -> None:
    from topolab.cli import main

    assert main(["plan", "scenarios/topoopt-12.toml", "--partition", "3"]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("partition")]
    assert len(line) == 1
    assert "3 machines (pymetis)" in line[0] and "of 24 cables cross" in line[0]


def test_plan_partition_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from topolab.cli import main

    assert main(["plan", "scenarios/topoopt-12.toml", "--partition", "13"]) == 2
    err = capsys.readouterr().err
    assert "--partition must be between 1 and 12 (the scenario's servers), not 13" in err and "Traceback" not in err


def test_plan_takes_no_machines(capsys: pytest.CaptureFixture[str]) -> None:
    # elsewhere --machines is a list of hosts: here a count would mean something else, so it is
    # no option of plan at all
    from topolab.cli import main

    assert main(["plan", "scenarios/topoopt-12.toml", "--machines", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--machines" in err and "partition" not in err
