"""MSCCL XML out: a plan's collectives written from their schedule programs, checked by
msccl-executor's parser rules (topolab's reader, strict), run by a numpy interpreter of the
XML that knows nothing of the exporter (tests/fixtures/msccl_interpreter.py), and read back
into a schedule that moves the same bytes per rank as the plan's own."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from contract.schedule import ScheduleBuilder
from planner import build_plan, load_scenario
from planner.collectives.from_plan import allreduce_schedule, choose_allreduce
from planner.collectives.hierarchical import PIPELINE_CHUNKS, chunk_weights, hierarchical_allreduce
from planner.collectives.msccl_export import (
    MscclExportError,
    alltoall_msccl,
    integer_shares,
    plan_allreduce,
    plan_msccl_exports,
    plan_ring_half,
    schedule_to_msccl,
    share_efficiency,
)
from planner.collectives.msccl_xml import MAX_CHANNELS, MAX_STEPS, read_msccl_xml, translate
from planner.collectives.rings import ring_allreduce
from tests.fixtures import msccl_interpreter as interp

REPO = Path(__file__).resolve().parents[3]
TOPOOPT = REPO / "scenarios" / "topoopt-12.toml"
SLOW = REPO / "tests" / "fixtures" / "export" / "topoopt-12-slow.toml"  # three 5 Gbit/s cables: the forest
HIERARCHICAL = REPO / "scenarios" / "hierarchical-12.toml"


def _plan(path: Path):
    return build_plan(load_scenario(path))


def _computes(xml: str, seeds=range(3), out_of_place: bool = False) -> bool:
    """Does the interpreter find the collective's result, in place (and out of place: the same
    XML with ``inplace="0"``, so the input and output are separate buffers)?"""
    if out_of_place:
        xml = xml.replace('inplace="1"', 'inplace="0"', 1)
    for seed in seeds:
        result = interp.run(xml, interp.random_inputs(xml, chunk=2, seed=seed), chunk=2, seed=seed)
        expected, got = interp.expected_outputs(result), interp.outputs(result)
        if not all(np.array_equal(got[g], expected[g]) for g in expected):
            return False
    return True


def _read_back(tmp_path: Path, xml: str):
    path = tmp_path / "algo.xml"
    path.write_text(xml)
    return read_msccl_xml(path, strict=True)


# ---- the plan's AllReduce ------------------------------------------------------------------
def test_topoopt12_allreduce_is_the_plans_four_rings_checked_summed_and_read_back(tmp_path):
    plan = _plan(TOPOOPT)
    export = plan_allreduce(plan)
    xml = export.xml
    assert not xml.lstrip().startswith("<?xml")  # msccl-executor's first node must be <algo>
    head = xml.splitlines()[0]
    for attr in ("outofplace", "minBytes", "maxBytes"):
        assert f' {attr}="' in head
    algo = _read_back(tmp_path, xml)  # strict: the executor's rules, send/receive matching, no cycle
    assert algo.coll == "allreduce" and algo.ngpus == 12
    # one channel per ring, every ring the plan's: GPU 0's threadblocks send to its successors
    # on the plan's stride rings, both directions
    rings = choose_allreduce(plan, 64 << 20).rings[0]
    assert export.nchannels == len(rings) == 4
    successors = {ring[(ring.index(0) + 1) % 12] for ring in rings}
    assert {tb.send for tb in algo.gpus[0].tbs} == successors == {1, 11, 5, 7}
    assert max(len(tb.steps) for g in algo.gpus for tb in g.tbs) == export.steps <= MAX_STEPS
    assert export.nchunksperloop == 48  # 4 rings x 12 members, a chunk each
    assert _computes(xml) and _computes(xml, out_of_place=True)
    nbytes = 48 * 4 * 1024
    native = allreduce_schedule(plan, choose_allreduce(plan, nbytes), nbytes)
    assert translate(algo, 12, nbytes).bytes_sent() == native.bytes_sent()


def test_a_wrong_exporter_would_be_caught_by_the_interpreter():
    """The interpreter check is not vacuous: a reduce that forgets to keep its sum is wrong."""
    xml = plan_allreduce(_plan(TOPOOPT)).xml
    broken = xml.replace('type="rrcs"', 'type="rrs"', 1)
    assert broken != xml and not _computes(broken, seeds=[0])


def test_forest_trees_on_heterogeneous_cables(tmp_path):
    plan = _plan(SLOW)
    export = plan_allreduce(plan)
    assert export.algorithm.startswith("forest trees")
    assert any("whole chunks" in note for note in export.notes)
    algo = _read_back(tmp_path, export.xml)
    assert _computes(export.xml) and _computes(export.xml, out_of_place=True)
    nbytes = export.unit_bytes * 64
    assert translate(algo, 12, nbytes).bytes_sent() == export.schedule_at(nbytes).bytes_sent()
    # the trees' shares are whole chunks: within 2% of the forest's own bytes per rank
    native = allreduce_schedule(plan, choose_allreduce(plan, nbytes), nbytes)
    assert sum(translate(algo, 12, nbytes).bytes_sent()) == pytest.approx(sum(native.bytes_sent()), rel=0.02)


def test_rate_weighted_rings_keep_the_plans_split(tmp_path):
    plan = _plan(SLOW)
    export = plan_allreduce(plan, algorithm="topoopt")
    assert export.algorithm.startswith("weighted multi-ring")
    _read_back(tmp_path, export.xml)
    assert _computes(export.xml, seeds=[0])
    assert "100.0% of the rate" in " ".join(export.notes)  # 5, 5, 25, 25 Gbit/s: 1, 1, 5, 5 chunks


def test_hierarchical_allreduce_dimension_by_dimension(tmp_path):
    plan = _plan(HIERARCHICAL)
    export = plan_allreduce(plan)
    assert export.algorithm.startswith("hierarchical")
    algo = _read_back(tmp_path, export.xml)
    assert _computes(export.xml) and _computes(export.xml, out_of_place=True)
    taper = sum(chunk_weights(PIPELINE_CHUNKS))  # the native schedule pipelines tapered chunks
    nbytes = export.unit_bytes * taper  # whole chunks of the export in every one of them
    native = allreduce_schedule(plan, choose_allreduce(plan, nbytes), nbytes)
    assert translate(algo, 12, nbytes).bytes_sent() == native.bytes_sent()
    assert (
        native.bytes_sent() == hierarchical_allreduce(plan.extra["dims"], plan.extra["blocks"], nbytes, 1).bytes_sent()
    )


# ---- the other collectives -----------------------------------------------------------------
@pytest.mark.parametrize("coll", ["allgather", "reducescatter"])
def test_ring_halves_over_the_plans_rings(tmp_path, coll):
    plan = _plan(TOPOOPT)
    export = plan_ring_half(plan, coll)
    algo = _read_back(tmp_path, export.xml)
    assert algo.coll == coll
    assert _computes(export.xml) and _computes(export.xml, out_of_place=True)
    nbytes = export.unit_bytes * 8
    assert translate(algo, 12, nbytes).bytes_sent() == export.schedule_at(nbytes).bytes_sent()


def test_alltoall_where_the_plan_has_one(tmp_path):
    exports = plan_msccl_exports(_plan(TOPOOPT))  # DLRM: an embedding exchange between every pair
    export = exports["alltoall"]
    assert not isinstance(export, str)
    algo = _read_back(tmp_path, export.xml)
    assert _computes(export.xml) and _computes(export.xml, out_of_place=True)
    assert (
        translate(algo, 12, export.unit_bytes * 4).bytes_sent()
        == export.schedule_at(export.unit_bytes * 4).bytes_sent()
    )
    hierarchical = plan_msccl_exports(_plan(HIERARCHICAL))  # data parallel, no rings
    assert "no all-to-all" in hierarchical["alltoall"] and "not rings" in hierarchical["allgather"]


def test_alltoall_spreads_peers_over_channels():
    export = alltoall_msccl(70)
    assert export.nchannels == 3  # no channel holds more than 32 threadblocks of a GPU
    chans = [
        int(c) for c in re.findall(r'<tb id="\d+" send="\d+" recv="\d+" chan="(\d+)"', export.xml.split("</gpu>")[0])
    ]
    assert max(chans.count(c) for c in set(chans)) <= 32


# ---- the converter -------------------------------------------------------------------------
def test_a_long_ring_is_cut_into_phases_on_channels_of_their_own(tmp_path):
    export = schedule_to_msccl(ring_allreduce(40, 40 * 4), "allreduce", "ring40")
    assert export.steps <= MAX_STEPS < 2 * 39  # one threadblock would hold 78 steps
    assert export.nchannels == 2 and "2 phases" in " ".join(export.notes)
    _read_back(tmp_path, export.xml)
    assert _computes(export.xml, seeds=[0])


def test_integer_shares():
    units, efficiency = integer_shares([25.0, 25.0, 25.0])
    assert units == (1, 1, 1) and efficiency == pytest.approx(1.0)
    units, efficiency = integer_shares([5.0, 25.0])
    assert units == (1, 5) and efficiency == pytest.approx(1.0)
    units, efficiency = integer_shares([1.0, 1.5])  # 2 : 3 is the first split within 1%
    assert units == (2, 3) and efficiency == pytest.approx(1.0)
    assert share_efficiency([1, 1], [1.0, 3.0]) == pytest.approx(0.5)  # the slow path holds half the bytes


def test_what_msccl_cannot_state_is_one_line():
    b = ScheduleBuilder(2, "with compute")
    b.buffer("grad", 8)
    b.compute(0, "compute", 0.1)
    b.send(0, "s", 1, "grad", 0, 8, 1)
    b.recv(1, "s", 0, "grad", 0, 8, 1, "copy")
    with pytest.raises(MscclExportError, match="compute op"):
        schedule_to_msccl(b.build(), "allreduce")
    with pytest.raises(MscclExportError, match="not 'bcast'"):
        schedule_to_msccl(ring_allreduce(4, 16), "bcast")


@pytest.mark.slow
def test_128_server_allreduce_stays_within_the_executors_caps():
    plan = _plan(REPO / "scenarios" / "resnet50-128.toml")
    export = plan_allreduce(plan)  # read back by the executor's rules (strict) before it is returned
    steps = [int(s) for s in re.findall(r'<step s="(\d+)"', export.xml)]
    assert max(steps) < MAX_STEPS and export.steps <= MAX_STEPS
    assert export.nchannels <= MAX_CHANNELS
    assert export.nchunksperloop == 8 * 128  # 8 rings of 128, a chunk per member
    assert export.total_steps == len(steps)


def test_1024_server_rings_are_refused_at_once_in_one_line(tmp_path):
    text = (REPO / "scenarios" / "resnet50-128.toml").read_text().replace("servers = 128", "servers = 1024")
    (tmp_path / "r1024.toml").write_text(text)
    plan = _plan(tmp_path / "r1024.toml")
    with pytest.raises(MscclExportError, match=r"2046 messages per connection need 33 channels per ring"):
        plan_allreduce(plan)  # refused before a program of 16 million ops is built
