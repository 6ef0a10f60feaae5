"""`topolab export`: the plan's files for real servers and other tools, each readable by what
reads it (topolab's cabling reader, the MSCCL checker and interpreter, ElementTree for the
SVG and NCCL's graph), each missing one explained in the README, bad flags one line."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from contract.plan import Plan
from planner import build_plan, load_scenario
from planner.collectives.msccl_xml import read_msccl_xml
from planner.topology.cabling_file import read_cabling
from tests.fixtures import msccl_interpreter as interp
from topolab.cli import main
from topolab.export.command import FORMATS, astra_cables, astra_network, nccl_ring

REPO = Path(__file__).resolve().parents[2]
TOPOOPT = REPO / "scenarios" / "topoopt-12.toml"
SWITCH = REPO / "scenarios" / "switch-12.toml"
HIERARCHICAL = REPO / "scenarios" / "hierarchical-12.toml"
RING = REPO / "tests" / "fixtures" / "export" / "ring-8.toml"


@pytest.fixture(scope="module")
def topoopt_export(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "topoopt-12"
    assert main(["export", str(TOPOOPT), "--to", str(out)]) == 0
    return out


def test_cabling_csv_is_the_plans_24_cables_on_4_ports_per_server(topoopt_export):
    plan = build_plan(load_scenario(TOPOOPT))
    cabling = read_cabling(topoopt_export / "cabling.csv", default_gbps=1.0)
    assert len(cabling.cables) == 24
    assert cabling.cables_per_server() == [4] * 12
    assert all(sorted(p for c in cabling.cables for s, p in ((c.a, c.port_a), (c.b, c.port_b)) if s == v)
               == [0, 1, 2, 3] for v in range(12))  # fmt: skip
    assert cabling.links() == tuple(plan.links)  # the same cables, in order, at their rates


def test_plan_json_is_the_plan(topoopt_export):
    plan = build_plan(load_scenario(TOPOOPT))
    assert Plan.from_json((topoopt_export / "plan.json").read_text()) == plan


def test_msccl_allreduce_passes_the_checker_and_sums(topoopt_export):
    path = topoopt_export / "msccl" / "allreduce.xml"
    algo = read_msccl_xml(path, strict=True)
    assert algo.coll == "allreduce" and algo.ngpus == 12
    xml = path.read_text()
    result = interp.run(xml, interp.random_inputs(xml, chunk=3), chunk=3)
    expected, got = interp.expected_outputs(result), interp.outputs(result)
    assert all(np.array_equal(got[g], expected[g]) for g in range(12))
    assert {p.name for p in (topoopt_export / "msccl").iterdir()} == {
        "allreduce.xml", "allgather.xml", "reducescatter.xml", "alltoall.xml"
    }  # fmt: skip


def test_svg_is_a_valid_svg_drawing_every_cable(topoopt_export):
    root = ET.parse(topoopt_export / "cabling.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    lines = [g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("id", "").startswith("line2d_")]
    assert len(lines) == 24 + 1  # every cable, and the legend's one rate
    assert (
        "25 Gbit/s" in (topoopt_export / "cabling.svg").read_text()
    )  # the legend (matplotlib keeps text as a comment)


def test_no_nccl_graph_for_four_rings_and_the_readme_says_why(topoopt_export):
    assert not (topoopt_export / "nccl").exists()
    assert not (topoopt_export / "astra-sim").exists()
    readme = (topoopt_export / "README.md").read_text()
    assert "No `nccl/graph.xml`: the plan's AllReduce runs 4 rings at once" in readme
    assert "No `astra-sim/network.yml`" in readme
    for name in ("cabling.csv", "cabling.svg", "plan.json", "msccl/allreduce.xml"):
        assert f"`{name}`" in readme


def test_a_single_ring_through_a_switch_gets_nccls_graph_and_astra_sims_switch(tmp_path):
    out = tmp_path / "switch"
    assert main(["export", str(SWITCH), "--to", str(out), "--formats", "nccl,astra-sim"]) == 0
    graphs = ET.parse(out / "nccl" / "graph.xml").getroot()
    assert graphs.tag == "graphs" and graphs.get("version") == "1"
    (graph,) = graphs
    assert (graph.get("id"), graph.get("pattern")) == ("0", "4")  # the ring graph
    channels = list(graph)
    assert len(channels) == int(graph.get("nchannels"))
    for channel in channels:
        assert [e.tag for e in channel] == ["net", "gpu", "net"]
        assert [e.get("dev") for e in channel if e.tag == "net"] == ["0x0", "0x0"]  # one port into the switch
    plan = build_plan(load_scenario(SWITCH))
    order = [
        int(line) for line in (out / "nccl" / "rank-order.txt").read_text().splitlines() if not line.startswith("#")
    ]
    assert order == list(plan.rings[0])
    yml = (out / "astra-sim" / "network.yml").read_text()
    assert "topology: [ Switch ]" in yml and "npus_count: [ 12 ]" in yml
    assert "bandwidth: [ 11.641532 ]" in yml  # 100 Gbit/s in GB/s of 2^30 bytes
    assert not (out / "cabling.csv").exists() and not (out / "msccl").exists()  # only the formats asked


def test_nccl_ring_enters_and_leaves_by_the_cables_to_its_neighbours(monkeypatch):
    from planner.collectives import from_plan

    plan = build_plan(load_scenario(RING))
    assert isinstance(nccl_ring(plan), str)  # the ring in both directions: not one NCCL states
    one_ring = from_plan.AllReduceChoice("ring", "one ring", 8, ((tuple(range(8)),),), (None,))
    monkeypatch.setattr(from_plan, "choose_allreduce", lambda *args, **kwargs: one_ring)
    ring = nccl_ring(plan)
    assert not isinstance(ring, str) and ring.order == tuple(range(8))
    for s in range(8):  # port j of s is its j-th cable in plan order; the ring leaves to s+1, enters from s-1
        cables = [{link.a, link.b} for link in plan.links if s in (link.a, link.b)]
        assert ring.nic_out[s] == cables.index({s, (s + 1) % 8})
        assert ring.nic_in[s] == cables.index({s, (s - 1) % 8})


@pytest.mark.parametrize(
    ("scenario", "topology", "npus"),
    [(RING, ("Ring",), (8,)), (HIERARCHICAL, ("FullyConnected", "Ring"), (4, 3)), (SWITCH, ("Switch",), (12,))],
)
def test_astra_sim_states_rings_switches_and_dimensions_with_the_plans_cables(scenario, topology, npus):
    plan = build_plan(load_scenario(scenario))
    net = astra_network(plan)
    assert not isinstance(net, str)
    assert (net.topology, net.npus) == (topology, npus)
    built, _ = astra_cables(net)
    direct = Counter()
    for link in plan.links:
        if max(link.a, link.b) < plan.servers:
            direct[(min(link.a, link.b), max(link.a, link.b))] += link.gbps
    assert built.keys() == direct.keys()
    assert all(built[k] == pytest.approx(direct[k]) for k in direct)


def test_astra_sim_refuses_a_circulant():
    why = astra_network(build_plan(load_scenario(TOPOOPT)))
    assert isinstance(why, str) and "Ring, FullyConnected, Switch" in why


def test_formats_choose_the_files(tmp_path):
    out = tmp_path / "plan-only"
    assert main(["export", str(TOPOOPT), "--to", str(out), "--formats", "plan"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "plan.json"]


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--formats", "cabling,hostfile"], "'hostfile' is not one of"),
        (["--formats", ""], "is not one of"),
        ([], "--to"),
    ],
)
def test_bad_flags_are_one_line_exit_2(tmp_path, capsys, argv, fragment):
    args = ["export", str(TOPOOPT)] + (["--to", str(tmp_path / "out")] if argv else []) + argv
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing written before the flags are checked


def test_to_a_file_or_a_folder_in_use_is_one_line_exit_2(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert main(["export", str(TOPOOPT), "--to", str(a_file)]) == 2
    assert "not a folder" in capsys.readouterr().err
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    assert main(["export", str(TOPOOPT), "--to", str(used)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force" in err
    assert main(["export", str(TOPOOPT), "--to", str(used), "--formats", "plan", "--force"]) == 0
    assert (used / "keep.txt").read_text() == "mine" and (used / "plan.json").exists()


def test_every_format_has_a_writer():
    from topolab.export.command import WRITERS

    assert tuple(WRITERS) == FORMATS


def test_to_inside_a_world_writable_folder_is_refused(tmp_path, capsys):
    """The export may run as root: it writes only into folders root may own (docs: the
    options' folder rules), so a folder anyone may swap files in is refused."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # no sticky bit
    assert main(["export", str(TOPOOPT), "--to", str(shared / "out"), "--formats", "plan"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--to" in err and "writable by other users" in err
    assert not (shared / "out").exists()
