"""``[topology] kind = "file"``: a scenario's network from a cabling file (planner.scenario reads
it, planner.topologies.file_topology plans it). The three formats give the same plan, a TopoOpt
plan written out and read back plans and predicts the same, a graph with no Hamiltonian ring
runs the forest, and every bad file or disagreeing key is one line naming the scenario, the key
and the file's line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

from contract.errors import UsageError
from contract.network import Link
from planner.build import build_plan
from planner.collectives.from_plan import choose_allreduce
from planner.collectives.simulate import simulate_and_verify
from planner.cost.iteration import IterationOptions, iteration_schedule
from planner.scenario import TOPOLOGIES, ScenarioError, load_scenario, with_overrides
from planner.topology.cabling_file import cabling_csv, default_routes, read_cabling
from tests.planner.topology.test_cabling_file import MALFORMED_CSV, MALFORMED_GRAPH, MALFORMED_WHOLE_FILE

REPO = Path(__file__).resolve().parents[3]
SCENARIOS = REPO / "scenarios"
FIXTURES = REPO / "tests" / "fixtures" / "cabling"
HYPERCUBE_FILES = ["hypercube-16.csv", "hypercube-16.json", "hypercube-16.graphml"]
GRAY_CODE = tuple(i ^ (i >> 1) for i in range(16))

DLRM = '[workload]\nmodel = "dlrm"\nbatch_per_server = 128\n[parallelism]\nstrategy = "hybrid"\n'
RESNET = '[workload]\nmodel = "resnet50"\nbatch_per_server = 32\n[parallelism]\nstrategy = "data"\n'


def _scenario(folder: Path, cabling: str | Path, job: str = DLRM, extra: str = "", name: str = "net.toml") -> Path:
    """A scenario file in ``folder`` whose network is the cabling file ``cabling``."""
    path = folder / name
    path.write_text(f'[cluster]\nlink_gbps = 25\n{job}[topology]\nkind = "file"\ncabling = "{cabling}"\n{extra}')
    return path


def _cabling_file(folder: Path, name: str, pairs) -> Path:
    """A CSV of the cables ``pairs``, ports numbered as the emulator numbers interfaces."""
    path = folder / name
    path.write_text(cabling_csv([Link(a, b, 25.0) for a, b in pairs]))
    return path


def _refused(path: Path) -> ScenarioError:
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    assert err.value.exit_code == 2
    return err.value


# ---- the three formats, the shipped scenarios ------------------------------------------------


def test_hypercube_plans_the_same_from_csv_json_and_graphml(tmp_path):
    plans = []
    for name in HYPERCUBE_FILES:
        folder = tmp_path / name.replace(".", "-")
        folder.mkdir()
        plans.append(build_plan(load_scenario(_scenario(folder, FIXTURES / name))))
    assert plans[0].to_dict() == plans[1].to_dict() == plans[2].to_dict()
    plan = plans[0]
    assert (plan.topology, plan.servers, plan.degree, len(plan.links)) == ("file", 16, 4, 32)
    assert all(bin(link.a ^ link.b).count("1") == 1 for link in plan.links)  # one dimension per cable
    assert plan.rings == (GRAY_CODE,) and plan.strides == ()
    hypercube = read_cabling(FIXTURES / "hypercube-16.csv", 25.0)
    assert plan.routes.kind == "table" and plan.routes.table == tuple(map(tuple, default_routes(hypercube).tolist()))
    assert plan.summary.diameter == 4
    choice = choose_allreduce(plan, 1 << 20)
    assert choice.algorithm == "multi-ring" and choice.rings[0][0] == GRAY_CODE  # and its reverse
    assert len(plan.demand.mp) == 240  # DLRM's tables: model-parallel flows routed on the table


def test_shipped_hypercube_scenarios_read_their_cabling_from_their_own_folder(tmp_path, monkeypatch):
    assert (SCENARIOS / "hypercube-16.csv").read_text() == (FIXTURES / "hypercube-16.csv").read_text()
    monkeypatch.chdir(tmp_path)  # the cabling is relative to the scenario's folder, not the current one
    (tmp_path / "hypercube-16.csv").write_text("0,0,1,0\n")  # a decoy in the current folder
    dlrm = load_scenario(SCENARIOS / "hypercube-16.toml")
    resnet = load_scenario(SCENARIOS / "resnet50-hypercube-16.toml")
    for s in (dlrm, resnet):
        assert s.cabling is not None and Path(s.cabling.path) == SCENARIOS / "hypercube-16.csv"
        assert (s.cluster.servers, s.cluster.degree, s.topology.kind) == (16, 4, "file")
    assert (dlrm.workload.model, dlrm.parallelism.strategy) == ("dlrm", "hybrid")
    assert (resnet.workload.model, resnet.parallelism.strategy) == ("resnet50", "data")
    plan = build_plan(resnet)
    assert plan.rings == (GRAY_CODE,) and [len(g.members) for g in plan.demand.allreduce] == [16]


def test_a_missing_rate_takes_link_gbps_and_cables_keep_their_own(tmp_path):
    s = load_scenario(_scenario(tmp_path, FIXTURES / "hypercube-16.csv", extra=""))
    slow = with_overrides(s, cluster={"link_gbps": 10.0})  # the file is read again at the new default
    plan = build_plan(slow)
    assert {(link.a ^ link.b, link.gbps) for link in plan.links} == {(1, 25.0), (2, 25.0), (4, 25.0), (8, 10.0)}
    assert plan.link_gbps == 10.0
    choice = choose_allreduce(plan, 1 << 20)  # cables of different rates: the forest, as on any plan
    assert choice.algorithm.startswith("forest")


# ---- the TopoOpt plan, written out and read back ---------------------------------------------


def _written_back(tmp_path: Path, scenario: Path, plan) -> Path:
    """``scenario`` with its topology replaced by the cabling file of ``plan``'s cables."""
    (tmp_path / "cables.csv").write_text(cabling_csv(plan.links))
    text = scenario.read_text()
    assert 'kind = "topoopt"' in text
    text = text.replace('kind = "topoopt"', 'kind = "file"\ncabling = "cables.csv"')
    for key in ("servers = ", "degree = "):  # the file sets them: leave them to it, as a user would
        text = "\n".join(line for line in text.splitlines() if not line.startswith(key))
    path = tmp_path / scenario.name
    path.write_text(text)
    return path


def test_topoopt12_written_out_and_read_back_plans_and_predicts_the_same(tmp_path):
    from topolab.common.prediction import prepare  # what `topolab predict` and `topolab run` predict with

    scenario = SCENARIOS / "topoopt-12.toml"
    topoopt = load_scenario(scenario)
    original = build_plan(topoopt)
    file = load_scenario(_written_back(tmp_path, scenario, original))
    assert (file.cluster, file.workload, file.parallelism) == (topoopt.cluster, topoopt.workload, topoopt.parallelism)
    plan = build_plan(file)
    assert plan.topology == "file"
    assert plan.links == original.links
    assert plan.rings == original.rings and plan.strides == original.strides == (1, 5)
    assert plan.routes == original.routes and plan.routes.kind == "circulant"
    assert plan.demand == original.demand and plan.placement == original.placement
    assert plan.summary == original.summary
    before, after = prepare(topoopt).predicted["real_ms"], prepare(file).predicted["real_ms"]
    assert after == pytest.approx(before, rel=0, abs=1e-9)


def test_strides_come_back_as_topoopt_wired_them(tmp_path):
    """TopoOpt at 16 servers, degree 8 picks strides 1, 3, 5 and 9 (above n/2): the cables'
    order and direction give them back, so the rings are TopoOpt's, not their reverses."""
    folder = tmp_path / "topoopt"
    folder.mkdir()
    scenario = folder / "topoopt-16.toml"
    scenario.write_text(f'[cluster]\nservers = 16\ndegree = 8\n{RESNET}[topology]\nkind = "topoopt"\n')
    original = build_plan(load_scenario(scenario))
    assert original.strides == (1, 3, 5, 9)
    plan = build_plan(load_scenario(_written_back(tmp_path, scenario, original)))
    assert (plan.strides, plan.rings, plan.routes, plan.demand) == (
        original.strides,
        original.rings,
        original.routes,
        original.demand,
    )


# ---- no Hamiltonian ring: the forest --------------------------------------------------------

PETERSEN = list(nx.petersen_graph().edges())  # 3-regular, yet no Hamiltonian cycle
TREE = [(0, 1), (0, 2), (0, 3), (3, 4), (3, 5)]


@pytest.mark.parametrize(("name", "pairs"), [("petersen", PETERSEN), ("tree", TREE)])
def test_a_graph_without_a_hamiltonian_ring_plans_the_forest(tmp_path, name, pairs):
    _cabling_file(tmp_path, f"{name}.csv", pairs)
    plan = build_plan(load_scenario(_scenario(tmp_path, f"{name}.csv", RESNET)))
    assert plan.rings == () and plan.strides == () and plan.extra["allreduce"] == "forest"
    assert any("no Hamiltonian ring" in note for note in plan.notes)
    nbytes = plan.demand.allreduce[0].bytes
    choice = choose_allreduce(plan, nbytes)
    assert choice.algorithm == "forest trees" and choice.reason.startswith("no Hamiltonian ring over the cables")
    schedule = iteration_schedule(plan, IterationOptions(payload_scale=1e-4))
    assert schedule.params["allreduce"][f"groups of {plan.servers}"]["algorithm"] == "forest trees"
    assert simulate_and_verify(schedule) == []
    cabled = {frozenset(pair) for pair in pairs}
    for rank, program in enumerate(schedule.programs):  # the trees' edges are cables
        for ops in program.values():
            assert all(frozenset((rank, op.peer)) in cabled for op in ops if op.kind == "send")


# ---- the keys and their rules ----------------------------------------------------------------


def test_servers_or_degree_that_disagree_with_the_file_are_one_line(tmp_path):
    cabling = FIXTURES / "hypercube-16.csv"
    path = _scenario(tmp_path, cabling)
    text = path.read_text()
    path.write_text(text.replace("[cluster]\n", "[cluster]\nservers = 12\n"))
    err = _refused(path)
    assert err.key == "cluster.servers"
    assert str(err) == (
        f"{path}: cluster.servers: 12, but the cabling file {cabling} has 16 servers (leave it out: the file sets it)"
    )
    path.write_text(text.replace("[cluster]\n", "[cluster]\ndegree = 3\n"))
    err = _refused(path)
    assert err.key == "cluster.degree" and "has degree 4 (server 0 has 4 cables" in str(err)
    path.write_text(text.replace("[cluster]\n", "[cluster]\nservers = 16\ndegree = 4\n"))  # agreeing: fine
    assert load_scenario(path).cluster.servers == 16
    with pytest.raises(ScenarioError, match="cluster.servers: 12, but the cabling file"):
        with_overrides(load_scenario(path), cluster={"servers": 12})


@pytest.mark.parametrize(
    ("topology", "key", "problem"),
    [
        ('kind = "file"\n', "topology.cabling", 'required for topology.kind = "file"'),
        ('kind = "topoopt"\ncabling = "x.csv"\n', "topology.cabling", 'only applies to topology.kind = "file"'),
        ('kind = "expander"\nroutes = "r.json"\n', "topology.routes", 'only applies to topology.kind = "file"'),
        ('kind = "file"\ncabling = ""\n', "topology.cabling", "expected the path of a file, got ''"),
        ('kind = "file"\ncabling = 3\n', "topology.cabling", "expected str, got int 3"),
        ('kind = "file"\ncabling = "a\\u0000.csv"\n', "topology.cabling", "expected the path of a file"),
        ('kind = "file"\ncabling = "absent.csv"\n', "topology.cabling", "no such cabling file"),
        ('kind = "file"\ncabling = "."\n', "topology.cabling", "is a folder"),
        ('kind = "net"\n', "topology.kind", "'net' is not one of"),
    ],
)
def test_topology_keys_are_checked(tmp_path, topology, key, problem):
    path = tmp_path / "s.toml"
    path.write_text(f"[topology]\n{topology}")
    err = _refused(path)
    assert err.key == key and problem in str(err)


def test_file_is_a_topology_kind_and_other_kinds_drop_the_cabling(tmp_path):
    assert "file" in TOPOLOGIES
    s = load_scenario(_scenario(tmp_path, FIXTURES / "hypercube-16.csv"))
    topoopt = with_overrides(s, topology={"kind": "topoopt"})  # `compare` and `predict --topologies`
    assert topoopt.cabling is None and topoopt.topology.cabling == ""
    assert (topoopt.cluster.servers, topoopt.cluster.degree) == (16, 4)  # the same cluster, TopoOpt's cables
    assert build_plan(topoopt).topology == "topoopt"


# ---- routes files ----------------------------------------------------------------------------


def test_a_routes_file_routes_the_plan(tmp_path):
    hypercube = read_cabling(FIXTURES / "hypercube-16.csv", 25.0)
    table = default_routes(hypercube)
    table[0, 15] = 8  # 0 -> 8 -> ... -> 15 instead of the shortest-path tree's first hop
    table[8, 15] = 9
    table[9, 15] = 11
    table[11, 15] = 15
    (tmp_path / "routes.json").write_text(json.dumps({"next_hop": table.tolist()}))
    plan = build_plan(
        load_scenario(_scenario(tmp_path, FIXTURES / "hypercube-16.csv", extra='routes = "routes.json"\n'))
    )
    assert plan.routes.kind == "table" and plan.path(0, 15) == [0, 8, 9, 11, 15]
    assert any("routes from the scenario's routes file" in note for note in plan.notes)


def test_a_routes_file_over_a_missing_cable_is_one_line(tmp_path):
    table = default_routes(read_cabling(FIXTURES / "hypercube-16.csv", 25.0))
    table[0, 3] = 3  # 0 and 3 differ in two bits: no cable
    (tmp_path / "routes.json").write_text(json.dumps({"next_hop": table.tolist()}))
    path = _scenario(tmp_path, FIXTURES / "hypercube-16.csv", extra='routes = "routes.json"\n')
    err = _refused(path)
    assert err.key == "topology.routes"
    assert str(err) == f"{path}: topology.routes: {tmp_path / 'routes.json'}: pair 0-3: hop 0->3 is not a cable"


# ---- malformed cabling files, through the scenario loader ------------------------------------

MALFORMED = [(name, text, f"{where}: ", problem) for name, text, where, problem in MALFORMED_CSV + MALFORMED_GRAPH] + [
    (name, text, "", problem) for name, text, problem in MALFORMED_WHOLE_FILE
]


@pytest.mark.parametrize(("name", "text", "where", "problem"), MALFORMED, ids=[case[0] for case in MALFORMED])
def test_malformed_cabling_file_is_one_line_naming_scenario_key_file_and_line(tmp_path, name, text, where, problem):
    (tmp_path / name).write_text(text)
    path = _scenario(tmp_path, name)
    err = _refused(path)
    assert isinstance(err, UsageError) and err.key == "topology.cabling"
    assert str(err).startswith(f"{path}: topology.cabling: {tmp_path / name}: {where}")
    assert problem in str(err)


def test_the_corpus_of_malformed_cabling_files_is_large():
    assert len(MALFORMED) >= 15


CLI_CASES = [
    ("port-twice.csv", "0,0,1,0\n0,0,2,0\n1,1,2,1\n", "line 2: port 0 of server 0 is used twice"),
    ("zero-rate.csv", "0,0,1,0,0\n", "line 1: rate 0 Gbps: a cable's rate must be > 0"),
    ("unknown-server.csv", "0,0,1,0\n1,1,x,0\n", "line 2: server 'x' is not a server number"),
    ("disconnected.csv", "0,0,1,0\n2,0,3,0\n", "disconnected"),
    ("yaml.yaml", "cables:\n  - [0, 1]\n", "line 1:"),
]


@pytest.mark.parametrize(("name", "text", "problem"), CLI_CASES, ids=[case[0] for case in CLI_CASES])
def test_malformed_cabling_file_as_a_real_command(tmp_path, name, text, problem):
    (tmp_path / name).write_text(text)
    path = _scenario(tmp_path, name)
    proc = subprocess.run(
        [sys.executable, "-m", "topolab", "plan", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert f"{path}: topology.cabling: {tmp_path / name}: " in proc.stderr and problem in proc.stderr
