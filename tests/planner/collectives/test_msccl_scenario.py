"""MSCCL XML in a scenario: ``[collectives] allreduce = "msccl:FILE"`` read when the scenario
is loaded, recorded by the plan, run by every full-group bucket of the iteration and replayed
by the predictor; and `msccl_schedule`, the XML on a plan as `topolab collective` runs it.

The shipped scenario (scenarios/msccl-ring-8.toml) runs ResNet-50 data parallel on 8 servers
cabled as a ring; its XMLs are copies of tests/fixtures/msccl's hand-written rings."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from contract.errors import UsageError
from contract.plan import Plan
from planner import build_plan, load_scenario, parse_scenario
from planner.collectives.from_plan import allreduce_for_plan, choose_allreduce, msccl_choice, msccl_schedule
from planner.collectives.simulate import simulate_and_verify
from planner.cost.iteration import IterationOptions, iteration_schedule
from planner.cost.iteration_prediction import predict_iteration
from planner.cost.predict import plan_network, predict
from planner.scenario import ScenarioError, with_overrides
from topolab.common.phases import phase_of

REPO = Path(__file__).resolve().parents[3]
SCENARIO = REPO / "scenarios" / "msccl-ring-8.toml"
FIXTURES = REPO / "tests" / "fixtures" / "msccl"
RING8 = FIXTURES / "ring_allreduce_8.xml"
RING8_BIDIR = FIXTURES / "ring_allreduce_8_bidirectional.xml"
RING4 = FIXTURES / "ring_allreduce_4.xml"
ALLGATHER8 = FIXTURES / "ring_allgather_8.xml"
SMALL = IterationOptions(payload_scale=1e-3)
SENDS_PER_RING = 2 * (8 - 1)  # reduce-scatter and all-gather, one chunk a step


def _scenario(tmp_path: Path, xml: Path | str | None, servers: int = 8, extra: str = "", name: str = "s") -> Path:
    """An 8-server ring scenario (ResNet-50, data parallel) in ``tmp_path`` whose AllReduce
    is the XML ``xml`` (copied beside it; None: no [collectives])."""
    text = (
        f'[cluster]\nservers = {servers}\ndegree = 2\n[workload]\nmodel = "resnet50"\nbatch_per_server = 32\n'
        '[parallelism]\nstrategy = "data"\n[topology]\nkind = "ring"\n'
    )
    if xml is not None:
        if isinstance(xml, Path):
            shutil.copy(xml, tmp_path / xml.name)
            xml = xml.name
        text += f'[collectives]\nallreduce = "msccl:{xml}"\n'
    path = tmp_path / f"{name}.toml"
    path.write_text(text + extra)
    return path


def _ar_streams(schedule) -> set[str]:
    return {name for p in schedule.programs for name in p.streams if phase_of(name) == "AllReduce"}


# ---- the scenario ------------------------------------------------------------------------
def test_the_shipped_scenario_reads_its_xml():
    s = load_scenario(SCENARIO)
    assert s.collectives.allreduce == "msccl:msccl/ring_allreduce_8.xml"
    assert s.msccl is not None and s.msccl.algorithm.name == "allreduce_ring_8gpus"
    assert Path(s.msccl.path) == SCENARIO.parent / "msccl" / "ring_allreduce_8.xml"  # the scenario's folder
    for name in ("ring_allreduce_8.xml", "ring_allreduce_8_bidirectional.xml"):  # what the tests check
        assert (SCENARIO.parent / "msccl" / name).read_bytes() == (FIXTURES / name).read_bytes()


def test_every_full_group_bucket_runs_the_xml_and_verifies():
    """ResNet-50's gradients in DDP buckets: each is the XML's ring (stream ar.msccl.tb0,
    14 sends a bucket), checked as an AllReduce of all 8 servers over its whole region."""
    plan = build_plan(load_scenario(SCENARIO))
    sched = iteration_schedule(plan, SMALL)
    assert _ar_streams(sched) == {"ar.msccl.tb0"}
    assert sched.params["allreduce"]["groups of 8"]["algorithm"] == "msccl"
    assert "ring_allreduce_8.xml" in sched.params["allreduce"]["groups of 8"]["why"]
    buckets = sched.params["buckets"]
    assert buckets > 1 and len(sched.checks) == buckets
    offset = 0
    for check in sched.checks:  # contiguous regions of whole chunks (8 a bucket)
        assert check.kind == "allreduce" and check.groups == [list(range(8))]
        assert check.offset == offset and check.length % (8 * 4) == 0
        offset += check.length
    assert sched.buffers["grad"].bytes == offset
    for program in sched.programs:
        sends = [op for op in program["ar.msccl.tb0"] if op.kind == "send"]
        assert len(sends) == SENDS_PER_RING * buckets
    assert simulate_and_verify(sched) == []
    assert simulate_and_verify(sched, seed=7) == []


def test_the_plan_alone_runs_the_xml(tmp_path):
    """The plan records the XML's text: written out, read back, with the file gone, it
    builds the same iteration."""
    plan = build_plan(load_scenario(_scenario(tmp_path, RING8)))
    (tmp_path / RING8.name).unlink()
    again = Plan.from_json(plan.to_json())
    assert iteration_schedule(again, SMALL).to_dict() == iteration_schedule(plan, SMALL).to_dict()
    assert "ar.msccl.tb0" in _ar_streams(iteration_schedule(again, SMALL))


def test_the_xml_predicts_as_topolabs_own_rings(tmp_path):
    """The 2-channel XML (a ring each way) is what topolab's AllReduce runs on a ring: the
    same iteration within 3%; the 1-channel ring moves the same bytes over half the cables'
    directions, so its AllReduce takes about twice as long."""
    own = predict_iteration(build_plan(load_scenario(_scenario(tmp_path, None, name="own"))))[1]
    bidir_plan = build_plan(load_scenario(_scenario(tmp_path, RING8_BIDIR, name="bidir")))
    sched, bidir = predict_iteration(bidir_plan)
    assert _ar_streams(sched) == {"ar.msccl.tb0", "ar.msccl.tb1"}
    assert bidir.seconds == pytest.approx(own.seconds, rel=0.03)
    one = predict_iteration(build_plan(load_scenario(_scenario(tmp_path, RING8, name="one"))))[1]
    assert 1.6 < one.seconds / own.seconds < 2.2


def test_coset_groups_keep_the_plans_own_allreduce():
    """Hybrid ResNet-50 (mp_degree 2): the full group's buckets run the XML, the groups of 4
    their rings; every check holds."""
    s = with_overrides(load_scenario(SCENARIO), parallelism={"strategy": "hybrid", "mp_degree": 2})
    sched = iteration_schedule(build_plan(s), SMALL)
    algorithms = sched.params["allreduce"]
    assert algorithms["groups of 8"]["algorithm"] == "msccl"
    assert algorithms["groups of 4"]["algorithm"] == "multi-ring"
    assert {"ar.msccl.tb0", "ar0"} <= _ar_streams(sched)
    assert simulate_and_verify(sched) == []


def test_gpus_per_server_maps_several_gpus_to_a_server(tmp_path):
    """The 8-GPU ring on 4 servers of 2 GPUs: a stream per GPU and threadblock, only the hops
    between servers move bytes, every bucket verified."""
    path = _scenario(tmp_path, RING8, servers=4, extra="gpus_per_server = 2\n")
    s = load_scenario(path)
    assert s.msccl is not None and s.msccl.gpus_per_server == 2
    sched = iteration_schedule(build_plan(s), SMALL)
    assert _ar_streams(sched) == {"ar.msccl.gpu0.tb0", "ar.msccl.gpu1.tb0"}
    peers = {(r, op.peer) for r, p in enumerate(sched.programs) for ops in p.values() for op in ops if op.peer >= 0}
    assert peers == {(r, (r + d) % 4) for r in range(4) for d in (1, -1)}
    assert simulate_and_verify(sched) == []


def test_overrides_keep_the_xml_and_check_it_again():
    s = load_scenario(SCENARIO)
    switch = with_overrides(s, topology={"kind": "switch"})
    assert switch.msccl is not None and switch.msccl.text == s.msccl.text
    assert "ar.msccl.tb0" in _ar_streams(iteration_schedule(build_plan(switch), SMALL))
    with pytest.raises(ScenarioError, match=r"ngpus=8, but cluster\.servers \(12\) x collectives\.gpus_per_server"):
        with_overrides(s, cluster={"servers": 12, "degree": 2})
    auto = with_overrides(s, drop=[("collectives", "allreduce")])
    assert auto.msccl is None and _ar_streams(iteration_schedule(build_plan(auto), SMALL)) == {"ar0", "ar1"}


# ---- refused when the scenario is loaded ---------------------------------------------------
def _local_reduction_xml() -> str:
    """3 GPUs, 1 chunk: each passes its chunk on twice, then adds what it got locally (a
    local reduction of two partial sums: computes its AllReduce, but not as topolab's ops)."""
    head = (
        '<algo name="local_re" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="3" coll="allreduce" '
        'inplace="1" outofplace="0" minBytes="0" maxBytes="0">'
    )
    steps = [("s", "i", 0, "i", 0), ("rcs", "i", 0, "s", 0), ("r", "i", 0, "s", 1), ("re", "s", 0, "i", 0)]
    steps.append(("re", "s", 1, "i", 0))
    lines = [head]
    for g in range(3):
        lines.append(f'  <gpu id="{g}" i_chunks="1" o_chunks="1" s_chunks="2">')
        lines.append(f'    <tb id="0" send="{(g + 1) % 3}" recv="{(g - 1) % 3}" chan="0">')
        for i, (t, sb, so, db, do) in enumerate(steps):
            lines.append(
                f'      <step s="{i}" type="{t}" srcbuf="{sb}" srcoff="{so}" dstbuf="{db}" dstoff="{do}" '
                'cnt="1" depid="-1" deps="-1" hasdep="0"/>'
            )
        lines += ["    </tb>", "  </gpu>"]
    return "\n".join([*lines, "</algo>"]) + "\n"


def test_bad_values_are_one_line_naming_the_key(tmp_path):
    cases = {
        '[collectives]\nallreduce = "ring"\n': r'collectives\.allreduce: \'ring\' is not "auto" or "msccl:FILE\.xml"',
        '[collectives]\nallreduce = "msccl:"\n': r"collectives\.allreduce: 'msccl:': expected msccl:FILE",
        "[collectives]\ngpus_per_server = 2\n": r'collectives\.gpus_per_server: only applies with collectives\.allreduce = "msccl:FILE\.xml"',
        "[collectives]\nallreduce = 3\n": r"collectives\.allreduce: expected str, got int 3",
        "[collectives]\nwho = 3\n": r"collectives\.who: unknown key \(known: allreduce, gpus_per_server\)",
    }
    for text, match in cases.items():
        path = tmp_path / "bad.toml"
        path.write_text(text)
        with pytest.raises(ScenarioError, match=match):
            load_scenario(path)
    assert load_scenario(_scenario(tmp_path, None)).msccl is None  # no [collectives]: the plan's own


def test_xmls_topolab_cannot_run_as_the_allreduce_are_refused(tmp_path):
    """An allgather is no AllReduce; a local reduction of partial sums does not translate:
    both refused at load, naming the file (and the step)."""
    with pytest.raises(ScenarioError, match=r"collectives\.allreduce: .*ring_allgather_8\.xml: coll='allgather'"):
        load_scenario(_scenario(tmp_path, ALLGATHER8))
    (tmp_path / "local.xml").write_text(_local_reduction_xml())
    with pytest.raises(
        ScenarioError, match=r"collectives\.allreduce: .*local\.xml: gpu 0 tb 0 step 3: a local reduction \(re\)"
    ):
        load_scenario(_scenario(tmp_path, "local.xml", servers=3))


def _malformed(tmp_path: Path) -> str:
    """ring_allreduce_8.xml with gpu 2's step 4 reading chunk 9 of 8."""
    text = RING8.read_text()
    gpu2 = text.index('<gpu id="2"')
    step4 = text.index('<step s="4"', gpu2)
    end = text.index("/>", step4)
    bad = text[step4:end].replace('srcoff="6"', 'srcoff="9"').replace('dstoff="6"', 'dstoff="9"')
    assert bad != text[step4:end]
    (tmp_path / "malformed.xml").write_text(text[:step4] + bad + text[end:])
    return "malformed.xml"


@pytest.mark.parametrize(
    "case, fragment",
    [
        (
            "mismatched",
            r"ring_allreduce_8.xml: ngpus=8, but cluster.servers (12) x collectives.gpus_per_server (1) = 12",
        ),
        ("malformed", "malformed.xml: gpu 2 tb 0 step 4: "),
        ("missing", "nowhere.xml: no such MSCCL XML file"),
    ],
)
def test_bad_xml_is_one_line_at_load_via_topolab_plan(tmp_path, case, fragment):
    xml = {"mismatched": RING8, "malformed": _malformed(tmp_path), "missing": "nowhere.xml"}[case]
    path = _scenario(tmp_path, xml, servers=12 if case == "mismatched" else 8)
    out = subprocess.run(
        [sys.executable, "-m", "topolab", "plan", str(path)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith(f"topolab: {path}: collectives.allreduce: {tmp_path}/"), lines[0]
    assert fragment in lines[0], lines[0]


# ---- msccl_schedule: the XML on a plan, as `topolab collective --algorithm msccl:FILE` ---------
def test_msccl_schedule_predicts_as_topolabs_own_ring():
    """On the 8-server ring: the 1-channel XML as topolab's ring, the 2-channel XML as the
    plan's two rings (topoopt), within 3%; both verify."""
    plan = build_plan(load_scenario(SCENARIO))
    network = plan_network(plan)
    nbytes = 16 << 20
    for xml, own in ((RING8, "ring"), (RING8_BIDIR, "topoopt")):
        sched = msccl_schedule(plan, str(xml), nbytes)
        native = allreduce_for_plan(plan, own, nbytes)
        assert sched.bytes_sent() == native.bytes_sent()
        mine, theirs = predict(sched, network).seconds, predict(native, network).seconds
        assert mine == pytest.approx(theirs, rel=0.03), (xml.name, mine, theirs)
        assert "ring_allreduce_8" in sched.params["why"]
        assert simulate_and_verify(msccl_schedule(plan, str(xml), 1 << 16)) == []
    same = choose_allreduce(plan, nbytes, algorithm=f"msccl:{RING8}")  # the name the command line gives
    assert same.algorithm == "msccl" and same.shape == "msccl" and same.msccl is not None


def test_msccl_schedule_on_a_larger_plan_uses_its_first_servers():
    """smoke-12's plan: the 8-GPU ring on servers 0..7, 8..11 idle; 2 GPUs per server on
    servers 0..3; an allgather XML runs with its copy checks; too many GPUs is one line."""
    plan = build_plan(load_scenario(REPO / "scenarios" / "smoke-12.toml"))
    sched = msccl_schedule(plan, str(RING8), 1 << 16)
    assert sched.ranks == 12 and sched.checks[0].groups == [list(range(8))]
    assert all(p.op_count == 0 for p in sched.programs[8:]) and simulate_and_verify(sched) == []
    paired = msccl_schedule(plan, str(RING8), 1 << 16, gpus_per_server=2)
    assert paired.checks[0].groups == [list(range(4))] and simulate_and_verify(paired) == []
    gather = msccl_schedule(plan, str(ALLGATHER8), 1 << 16)
    assert gather.checks and {c.kind for c in gather.checks} == {"copy"} and simulate_and_verify(gather) == []
    small = build_plan(load_scenario(REPO / "scenarios" / "train-4.toml"))
    with pytest.raises(
        UsageError, match=r"ring_allreduce_8\.xml: ngpus=8 at 1 GPU per server needs 8 servers; the plan has 4"
    ):
        msccl_choice(small, str(RING8))
    with pytest.raises(UsageError, match=r"ngpus=4 is not a multiple of 3 GPUs per server"):
        msccl_choice(small, str(RING4), gpus_per_server=3)
    with pytest.raises(UsageError, match=r"nowhere\.xml: no such MSCCL XML file"):
        msccl_schedule(small, "nowhere.xml", 1 << 16)


def test_a_recorded_xml_must_span_the_plan():
    """A plan whose record does not match its servers (edited by hand) is refused in one line."""
    plan = build_plan(load_scenario(SCENARIO))
    wrong = Plan.from_dict({**plan.to_dict(), "extra": {**plan.extra, "msccl_allreduce": {
        "file": "four.xml", "gpus_per_server": 1, "xml": RING4.read_text()}}})  # fmt: skip
    with pytest.raises(UsageError, match=r"four\.xml: ngpus=4, but the plan's 8 servers x 1 GPU per server = 8"):
        iteration_schedule(wrong, SMALL)


def test_parse_scenario_resolves_against_the_current_folder_without_a_file(tmp_path, monkeypatch):
    """A scenario parsed from data (no file) names its XML relative to the current folder,
    as every file key (planner.model.paths)."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(RING8, tmp_path / "r.xml")
    data = {"cluster": {"servers": 8, "degree": 2}, "topology": {"kind": "ring"}}
    s = parse_scenario({**data, "collectives": {"allreduce": "msccl:r.xml"}})
    assert s.msccl is not None and s.msccl.path == "r.xml"


@pytest.mark.timeout(120)
def test_the_iteration_runs_and_verifies_on_workers():
    """The shipped scenario's iteration (transfers 1000x smaller) on real workers over
    loopback: every bucket's XML AllReduce verified."""
    from workers.coordinator import run_schedule

    sched = iteration_schedule(build_plan(load_scenario(SCENARIO)), SMALL)
    results = run_schedule(sched.to_dict(), iterations=1, chunk_bytes=64 << 10)
    assert len(results) == 1 and results[0].ok, results[0].mismatches[:3]
    assert len(results[0].ranks) == 8 and all(r["ok"] for r in results[0].ranks)
