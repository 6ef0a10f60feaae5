"""The results documents (topolab.results.run_results, topolab.results.collective_results): what they write is
what they read, byte counts are integers, and a format this topolab does not know is one
line naming the file and the format, exit 2."""

from __future__ import annotations

import json

import pytest

from contract.errors import UsageError
from tests.fixtures.sample_results import smoke_results
from topolab.cli import main
from topolab.results.collective_results import (
    ALLTOALL_FORMAT,
    COLLECTIVE_FORMAT,
    AlltoallResults,
    CollectiveEmulation,
    CollectiveResults,
    PhaseResult,
    SizeResult,
)
from topolab.results.journal import read_results, write_results_file
from topolab.results.run_report import report_section
from topolab.results.run_results import (
    RESULTS_FORMAT,
    AppliedFault,
    Iteration,
    LinkBytes,
    Measured,
    Prediction,
    RunResults,
    check_format,
)


def _through_json(doc: dict) -> dict:
    return json.loads(json.dumps(doc))


def test_results_read_back_as_written(tmp_path):
    results = smoke_results("complete", [2.0, 2.2, 2.1], 2.05, [LinkBytes(0, 1, 1000)])
    results.measured = Measured([LinkBytes(0, 1, 1090)])
    results.faults = [AppliedFault(1, "h0-h1", 0, "down", 0.0, True, 0.02, 2.3, 0.575)]
    for k, it in enumerate(results.iterations):
        it.faults_before, it.predicted_real_ms = int(k >= 1), 2.05 + k
    doc = _through_json(results.to_dict())
    assert doc["format"] == RESULTS_FORMAT
    read_back = RunResults.from_dict(doc)
    assert _through_json(read_back.to_dict()) == doc
    assert read_back.faults == results.faults  # typed again, field by field
    assert "- before iteration 1: cable h0-h1 down, rerouted" in report_section(read_back)
    # the keys the report and the tests of a real run read
    assert {"status", "scenario", "plan", "emulation", "iterations", "schedule", "predicted", "summary"} <= set(doc)
    assert doc["summary"]["iterations"] == 3 and doc["summary"]["median_real_ms"] == pytest.approx(2.1)
    assert [ph["iterations"] for ph in doc["fault_phases"]] == [[0], [1, 2]]
    assert "measured_slowdown" not in doc["fault_phases"][0] and doc["fault_phases"][1]["predicted_slowdown"] > 1
    write_results_file(results, tmp_path)
    assert _through_json(read_results(tmp_path).to_dict()) == doc


def test_emulation_facts_are_the_built_networks_and_stay_flat():
    results = smoke_results("running", [], 2.0)
    planned = results.emulation.time_scale
    built = {"build_s": 1.5, "time_scale": planned * 2, "mtu": 1450, "netem": True, "tunnels": 12}
    results.emulation.add_network(built, netem=False)
    doc = results.to_dict()["emulation"]
    assert doc["build_s"] == 1.5 and doc["tunnels"] == 12
    # the network as built decides its time scale and MTU (over machines: the tunnels' 1450)
    assert doc["time_scale"] == results.emulation.time_scale == planned * 2
    assert doc["mtu"] == results.emulation.mtu == 1450
    assert doc["netem"] is False
    assert RunResults.from_dict(_through_json(results.to_dict())).emulation == results.emulation


def test_byte_counts_are_integers():
    # the predictor sums flow fragments in floating point; the counters divide by iterations
    predicted = Prediction.from_dict(
        {
            "emulated_s": 0.5,
            "real_ms": 2.0,
            "alpha_s": 0.0,
            "op_overhead_s": 0.0,
            "model_seconds": 0.0,
            "link_bytes": [{"src": 0, "dst": 1, "bytes": 109999999.99999999}],
            "relayed_link_bytes": [{"src": 0, "dst": 1, "bytes": 60255.99999999995}],
        }
    )
    assert predicted.link_bytes == [LinkBytes(0, 1, 110000000)]
    rows = predicted.to_dict()["link_bytes"] + predicted.to_dict()["relayed_link_bytes"]
    assert [type(row["bytes"]) for row in rows] == [int, int]
    assert predicted.relayed_link_bytes[0].bytes == 60256


def test_a_killed_runs_journal_is_read_with_its_results(tmp_path):
    write_results_file(smoke_results("running", [], 2.0), tmp_path)
    kept = smoke_results("running", [2.0, 3.0], 2.0).iterations
    lines = "".join(json.dumps(it.to_dict()) + "\n" for it in kept)
    (tmp_path / "iterations.jsonl").write_text(lines + '{"index": 2, "meas')
    results = read_results(tmp_path)
    assert results.status == "incomplete" and results.iterations == kept
    assert isinstance(results.iterations[0], Iteration)


@pytest.mark.parametrize(
    ("fmt", "fragment"),
    [
        ("topolab.results/2", "is newer than this topolab reads (topolab.results/1)"),
        ("topolab.collective/1", "not the results of topolab collective"),  # a run's, relabelled
        ("topolab.collective/2", "is newer than this topolab reads (topolab.collective/1)"),
        ("topolab.results/x", "is not one this topolab reads"),
        (None, "format None is not one this topolab reads"),
    ],
)
def test_report_of_an_unknown_or_newer_format_is_one_line_exit_2(tmp_path, capsys, fmt, fragment):
    doc = smoke_results("complete", [2.0], 2.0).to_dict()
    doc["format"] = fmt
    (tmp_path / "results.json").write_text(json.dumps(doc))
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(tmp_path / "results.json") in err and fragment in err, err
    assert not (tmp_path / "report.md").exists()


def test_results_missing_a_part_are_one_line_exit_2(tmp_path, capsys):
    doc = smoke_results("complete", [2.0], 2.0).to_dict()
    del doc["emulation"]
    (tmp_path / "results.json").write_text(json.dumps(doc))
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a topolab run's results" in err and "emulation" in err, err


def test_an_older_version_of_a_format_is_read():
    check_format({"format": "topolab.results/1"}, "topolab.results/3", "x.json")
    with pytest.raises(UsageError, match="x.json: format 'topolab.results/4' is newer"):
        check_format({"format": "topolab.results/4"}, "topolab.results/3", "x.json")


def test_collective_documents_read_back_and_check_their_format():
    emulation = CollectiveEmulation(100.0, 9000, 250.0, 0.993, 400e6, 397e6, False)
    row = SizeResult("ring", 1 << 20, 12, [0.5, 0.4], 0.25, True, 250.0, cpu_s=[0.1, 0.1])
    doc = CollectiveResults("topoopt-12", "topoopt", 12, 4, emulation, 2, 1 << 20, None, 3.5, "# header", [row])
    d = _through_json(doc.to_dict())
    assert d["format"] == COLLECTIVE_FORMAT and d["segment_bytes"] == "auto"
    assert CollectiveResults.from_dict(d) == doc
    alltoall = AlltoallResults("topoopt-12", 132, 110000000, 3.2, 100.0, 250.0, [PhaseResult("single", 1.0, 0.9)])
    a = _through_json(alltoall.to_dict())
    assert a["format"] == ALLTOALL_FORMAT and a["algorithm"] == "alltoall" and a["bytes"] == 110000000
    assert AlltoallResults.from_dict(a) == alltoall
    with pytest.raises(UsageError, match="out/results.json: format 'topolab.collective/2' is newer"):
        CollectiveResults.from_dict(dict(d, format="topolab.collective/2"), "out/results.json")
    with pytest.raises(UsageError, match="is not one this topolab reads"):
        AlltoallResults.from_dict(d)


def test_alltoall_bytes_are_the_whole_items_the_workers_move():
    from planner import build_plan, load_scenario
    from topolab.collective.routing_phase import phase_bytes, phase_schedule, phase_traffic

    scenario = load_scenario("scenarios/topoopt-12.toml")
    plan = build_plan(scenario)
    traffic = phase_traffic(plan, scenario)
    factor = 3.3
    nbytes = phase_bytes(traffic, factor)
    assert isinstance(nbytes, int) and nbytes % 4 == 0
    assert nbytes == sum(phase_schedule(plan, traffic, factor).bytes_sent())


def test_cpu_load_and_the_cpu_bound_line():
    """The workers' CPU seconds of each iteration over its time and the cores: the median is
    the run's CPU load, and above CPU_BOUND_LOAD the run says in one line that it was CPU-bound,
    in the report too."""
    from topolab.results.run_report import render_markdown
    from topolab.results.run_results import CPU_BOUND_LOAD

    results = smoke_results("complete", [2.0, 2.0, 4.0], 2.0, [LinkBytes(0, 1, 1000)])
    cores = results.environment.cpus
    assert results.summarize().cpu_load is None and results.cpu_bound_note() is None  # not recorded
    for it, load in zip(results.iterations, [0.1, 0.3, 0.2]):
        it.worker_cpu_s = load * cores * it.measured_s
    summ = results.summarize()
    assert summ.cpu_load == pytest.approx(0.2) and summ.cpu_bound is False
    assert results.cpu_bound_note() is None
    for it in results.iterations:
        it.worker_cpu_s = it.measured_s * cores * (CPU_BOUND_LOAD + 0.05)
    note = results.cpu_bound_note()
    assert results.summarize().cpu_bound and note is not None and "CPU-bound" in note and "\n" not in note
    assert note in render_markdown(results)
    assert RunResults.from_dict(_through_json(results.to_dict())).summarize() == results.summarize()


def test_the_report_puts_the_workers_cpu_beside_what_the_rate_was_chosen_for():
    """The report's CPU line gives the median CPU seconds of an iteration and, when the run
    recorded the CPU demand its rate was chosen or checked with (`topolab.run.time_dilation`),
    that estimate beside it."""
    from topolab.results.run_report import render_markdown
    from topolab.run.machine_probe import MachineCost
    from topolab.run.time_dilation import choose

    results = smoke_results("complete", [2.0, 2.0, 4.0], 2.0, [LinkBytes(0, 1, 1000)])
    cores = results.environment.cpus
    for it, load in zip(results.iterations, [0.1, 0.3, 0.2]):
        it.worker_cpu_s = load * cores * it.measured_s
    cpu_s = sorted(it.worker_cpu_s for it in results.iterations)[1]
    line = next(x for x in render_markdown(results).splitlines() if "CPU-s an iteration" in x)
    assert f"{cpu_s:.3g} CPU-s an iteration" in line and "checked against" not in line  # no dilation recorded
    cost = MachineCost(op_cpu_s=50e-6, byte_cpu_s=1e-9, cores=cores, key="test", probe_s=0.0)
    dilation = choose(
        ranks=12,
        ops=1000,
        bytes_sent=10**8,
        buffer_bytes=2**20,
        predicted_s=1.0,
        link_mbps=100.0,
        payload_scale=1.0,
        cost=cost,
        auto=True,
        available=2**40,
    )
    results.emulation.dilation = dilation.to_dict()
    line = next(x for x in render_markdown(results).splitlines() if "CPU-s an iteration" in x)
    assert f"checked against: ~{dilation.cpu_demand_s:.3g} CPU-s, {dilation.cpu_load:.0%}" in line
    assert f"(measured {cpu_s / dilation.cpu_demand_s:.2f}x)" in line
