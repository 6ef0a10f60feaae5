"""``--junit FILE`` of run, collective and compare: JUnit XML a CI system displays, read back
with junitparser (a maintained JUnit parser, not our writer's own reading of it): a test case
per check (every iteration verified, the prediction within tolerance, nothing left on the
machine), the counts a parser recounts, the failure message with its figures.

The writer's cases come from results built with the types `topolab run` writes
(tests/fixtures/sample_results.py); the root tests run the real commands on the smoke scenario."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from junitparser import Error, Failure, JUnitXml, Skipped

from contract.errors import RunError
from tests.fixtures.sample_results import SMOKE, smoke_results
from topolab.cli import main
from topolab.results.collective_results import PhaseResult, SizeResult
from topolab.results.journal import write_results_file
from topolab.results.junit import (
    NOTHING_LEFT,
    VERIFIED,
    WITHIN_TOLERANCE,
    Suite,
    measurement_cases,
    nothing_left_case,
    of_collective,
    of_phase,
    recorded,
    run_cases,
    write_junit,
)

REPO = Path(__file__).resolve().parents[2]
CLASS = "topolab.run.smoke-12"


def _write_and_read(tmp_path: Path, cases, name: str = "topolab run smoke-12") -> JUnitXml:
    path = tmp_path / "junit.xml"
    write_junit(path, [Suite(name, cases, 1.5, properties={"scenario": SMOKE})])
    return JUnitXml.fromfile(str(path))


def _counts(xml) -> tuple[int, int, int, int]:
    return (xml.tests, xml.failures, xml.errors, xml.skipped)


def _recounted(xml: JUnitXml) -> tuple[int, int, int, int]:
    """The counts junitparser computes from the cases themselves (what the attributes must say)."""
    for suite in xml:
        suite.update_statistics()
    xml.update_statistics()
    return _counts(xml)


def _cases(xml: JUnitXml) -> dict[tuple[str, str], object]:
    return {(case.classname, case.name): case for suite in xml for case in suite}


def test_a_passing_run_is_three_passed_cases(tmp_path, capsys):
    results = smoke_results("complete", [2.05, 2.0, 2.1], 2.0, tolerance=0.1)
    xml = _write_and_read(tmp_path, run_cases(CLASS, results, str(tmp_path / "run")))
    (suite,) = list(xml)
    assert suite.name == "topolab run smoke-12" and suite.time == pytest.approx(1.5)  # as written
    assert _counts(xml) == (3, 0, 0, 0) == _recounted(xml)
    assert {p.name: p.value for p in suite.properties()} == {"scenario": SMOKE}
    assert [(c.classname, c.name) for c in suite] == [
        (CLASS, VERIFIED),
        (CLASS, WITHIN_TOLERANCE),
        (CLASS, NOTHING_LEFT),
    ]
    assert all(case.is_passed for case in suite)
    verified, tolerance, _ = list(suite)
    assert verified.system_out == "3 timed iteration(s) verified by every worker"
    assert "measured 2.050 ms, predicted 2.000 ms" in tolerance.system_out
    assert "JUnit report in" in capsys.readouterr().err


def test_a_prediction_over_its_tolerance_is_a_failing_case_with_its_figures(tmp_path):
    results = smoke_results("complete", [2.6, 2.6, 2.6], 2.0, tolerance=0.1)
    assert results.summarize().error_over_tolerance  # what makes `topolab run` exit 3
    xml = _write_and_read(tmp_path, run_cases(CLASS, results, str(tmp_path / "run")))
    assert _counts(xml) == (3, 1, 0, 0) == _recounted(xml)
    case = _cases(xml)[(CLASS, WITHIN_TOLERANCE)]
    (failure,) = case.result
    assert isinstance(failure, Failure) and failure.type == "tolerance"
    assert failure.message == (
        "measured 2.600 ms, predicted 2.000 ms (real-cluster ms, median of 3): error 23.1%, tolerance 10% (run.tolerance)"
    )
    assert _cases(xml)[(CLASS, VERIFIED)].is_passed and _cases(xml)[(CLASS, NOTHING_LEFT)].is_passed


def test_a_failed_verification_names_the_iteration_and_its_first_mismatch(tmp_path):
    results = smoke_results("failed", [2.0, 2.0], 2.0)
    results.iterations[1] = replace(results.iterations[1], verified=False, errors=["rank 3: ar0 chunk 2 differs"])
    err = RunError("iteration 2 failed verification: ['rank 3: ar0 chunk 2 differs']")
    xml = _write_and_read(tmp_path, run_cases(CLASS, results, str(tmp_path / "run"), err))
    (failure,) = _cases(xml)[(CLASS, VERIFIED)].result
    assert isinstance(failure, Failure) and failure.type == "verification"
    assert failure.message == "iteration 1 failed verification: rank 3: ar0 chunk 2 differs"
    assert _counts(xml)[1] == 1 == _recounted(xml)[1]


def test_a_run_that_failed_before_recording_anything_is_an_error_case(tmp_path):
    err = RunError("host h3: its shell did not start")
    xml = _write_and_read(tmp_path, run_cases(CLASS, None, str(tmp_path / "run"), err))
    assert _counts(xml) == (3, 0, 1, 1) == _recounted(xml)  # the same three cases as a run that ends
    (error,) = _cases(xml)[(CLASS, VERIFIED)].result
    assert isinstance(error, Error) and error.type == "RunError" and error.message == str(err)
    (skipped,) = _cases(xml)[(CLASS, WITHIN_TOLERANCE)].result
    assert isinstance(skipped, Skipped)


def test_a_state_file_the_teardown_kept_fails_the_nothing_left_case(tmp_path):
    from emulator.state import RunState

    state = RunState.new(str(tmp_path))  # what stop() keeps when a host shell would not end
    state.save()
    left = nothing_left_case(CLASS, str(tmp_path))
    assert left.failure_type == "teardown"
    assert left.failure is not None and f"topolab clean --run-dir {tmp_path}" in left.failure
    state.remove()
    assert nothing_left_case(CLASS, str(tmp_path)).failure is None


def test_collective_has_a_case_per_algorithm_and_size_for_each_check(tmp_path):
    size = 4 << 20
    ring = SizeResult("ring", size, 12, [1.0, 1.2, 1.1], 0.5, True, time_scale=250.0)
    topoopt = SizeResult("topoopt", size, 12, [0.5, 0.5], 0.25, False, 250.0, ["rank 1: chunk 0 differs"])
    cls = "topolab.collective.smoke-12"
    cases = [
        *measurement_cases(of_collective(ring, 1.0, 0.05, cls)),  # median 1.1 s: 9.1% off
        *measurement_cases(of_collective(topoopt, 0.5, 0.05, cls)),
        *measurement_cases(of_collective(replace(ring, bytes=2 * size), None, 0.05, cls)),  # no prediction: skipped
    ]
    xml = _write_and_read(tmp_path, cases, "topolab collective smoke-12")
    assert _counts(xml) == (6, 2, 0, 1) == _recounted(xml)
    by_case = _cases(xml)
    (over,) = by_case[(f"{cls}.ring", f"4M: {WITHIN_TOLERANCE}")].result
    assert over.message.startswith("measured 4.400 ms, predicted 4.000 ms (real-cluster ms, median of 3): error 9.09%")
    (wrong,) = by_case[(f"{cls}.topoopt", f"4M: {VERIFIED}")].result
    assert wrong.message == "VERIFY FAILED: rank 1: chunk 0 differs"
    assert by_case[(f"{cls}.topoopt", f"4M: {WITHIN_TOLERANCE}")].is_passed
    skipped = [case for suite in xml for case in suite if case.result and isinstance(case.result[0], Skipped)]
    assert [case.name for case in skipped] == [f"8M: {WITHIN_TOLERANCE}"]


def test_alltoall_has_a_case_per_routing_for_each_check(tmp_path):
    planned = PhaseResult("planned", predicted_s=2.0, bound_s=1.8, times_s=[2.1, 2.2, 2.0])
    single = PhaseResult("single", predicted_s=2.0, bound_s=1.8, times_s=[3.0, 3.0, 3.0])
    cls = "topolab.collective.topoopt-12"
    cases = [c for r in (planned, single) for c in measurement_cases(of_phase(r, 1000.0, 0.25, cls))]
    xml = _write_and_read(tmp_path, cases, "topolab collective topoopt-12")
    assert _counts(xml) == (4, 1, 0, 0) == _recounted(xml)
    (over,) = _cases(xml)[(f"{cls}.alltoall", f"single: {WITHIN_TOLERANCE}")].result
    assert over.message.startswith("measured 3.000 ms, predicted 2.000 ms")


def test_text_xml_cannot_hold_still_gives_a_document_a_parser_reads(tmp_path):
    results = smoke_results("failed", [2.0], 2.0)
    results.iterations[0] = replace(results.iterations[0], verified=False, errors=["rank 0: \x00\x1b[31mbad\x07"])
    xml = _write_and_read(tmp_path, run_cases(CLASS, results, str(tmp_path / "run")))
    (failure,) = _cases(xml)[(CLASS, VERIFIED)].result
    assert failure.message == "iteration 0 failed verification: rank 0: \ufffd\ufffd[31mbad\ufffd"


def test_a_failed_run_reports_what_it_recorded_not_an_earlier_runs_results(tmp_path):
    write_results_file(smoke_results("failed", [2.0], 2.0), tmp_path)
    os.utime(tmp_path / "results.json", (1_000_000, 1_000_000))
    assert recorded(tmp_path, since=2_000_000) is None  # written before this run started
    assert recorded(tmp_path, since=500_000).iterations[0].measured_real_ms == pytest.approx(2.0)
    assert recorded(tmp_path / "nothing-here", since=0) is None


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (
            ["run", SMOKE, "--junit", "/nonexistent-topolab-dir/out.xml"],
            "folder /nonexistent-topolab-dir does not exist",
        ),
        (["collective", SMOKE, "--junit", SMOKE], "is the input file"),
        (["compare", SMOKE, "--junit", " "], "empty file name"),
    ],
)
def test_the_junit_file_is_checked_before_any_work(argv, problem, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("topolab: --junit") and problem in err


def _topolab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "topolab", *args], cwd=REPO, capture_output=True, text=True, timeout=55
    )


@pytest.mark.root
def test_smoke_run_writes_junit_a_parser_reads(tmp_path):
    out_xml, run_dir = tmp_path / "out.xml", tmp_path / "run"
    proc = _topolab(
        "run",
        SMOKE,
        "--junit",
        str(out_xml),
        "--iterations",
        "2",
        "--run-dir",
        str(run_dir),
        "--out",
        str(tmp_path / "r"),
    )
    assert proc.returncode in (0, 3), proc.stderr[-2000:]
    xml = JUnitXml.fromfile(str(out_xml))
    assert _counts(xml)[0] == 3 and _counts(xml) == _recounted(xml)
    (suite,) = list(xml)
    assert suite.name == "topolab run smoke-12" and suite.time > 0
    cases = _cases(xml)
    assert cases[(CLASS, VERIFIED)].is_passed
    assert cases[(CLASS, VERIFIED)].system_out == "2 timed iteration(s) verified by every worker"
    assert cases[(CLASS, NOTHING_LEFT)].is_passed and not list(run_dir.glob("run-*.json"))
    # the tolerance case says what the exit code says (3: verified, but the prediction missed)
    assert cases[(CLASS, WITHIN_TOLERANCE)].is_passed == (proc.returncode == 0)


@pytest.mark.root
def test_a_run_whose_prediction_misses_its_tolerance_has_a_failing_case(tmp_path):
    text, n = re.subn(r"(?m)^tolerance\s*=.*$", "tolerance = 0.0", (REPO / SMOKE).read_text())
    assert n == 1
    tight = tmp_path / "smoke-tight.toml"  # a measured median never equals its prediction to the last bit
    tight.write_text(text)
    out_xml = tmp_path / "out.xml"
    proc = _topolab(
        "run", str(tight), "--junit", str(out_xml), "--iterations", "1", "--run-dir", str(tmp_path / "run"),
        "--out", str(tmp_path / "r"),
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-2000:]
    xml = JUnitXml.fromfile(str(out_xml))
    assert _counts(xml) == (3, 1, 0, 0) == _recounted(xml)
    (failure,) = _cases(xml)[("topolab.run.smoke-tight", WITHIN_TOLERANCE)].result
    assert isinstance(failure, Failure)
    assert re.fullmatch(
        r"measured \d+\.\d{3} ms, predicted \d+\.\d{3} ms \(real-cluster ms, median of 1\): "
        r"error [\d.e+-]+%, tolerance 0% \(run\.tolerance\)",
        failure.message,
    ), failure.message


@pytest.mark.root
def test_a_run_that_fails_still_writes_its_report_with_the_cause(tmp_path):
    out_xml, run_dir = tmp_path / "out.xml", tmp_path / "run"
    proc = _topolab(
        "run", SMOKE, "--cable-down", "0-1@0", "--no-reroute", "--junit", str(out_xml), "--run-dir", str(run_dir),
        "--out", str(tmp_path / "r"),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    xml = JUnitXml.fromfile(str(out_xml))
    assert _counts(xml) == (3, 0, 1, 1) == _recounted(xml)
    (error,) = _cases(xml)[(CLASS, VERIFIED)].result
    assert isinstance(error, Error) and error.message.startswith("cable h0-h1 went down before iteration 0")
    assert error.message in proc.stderr  # the run's own last line
    assert _cases(xml)[(CLASS, NOTHING_LEFT)].is_passed and not list(run_dir.glob("run-*.json"))


@pytest.mark.root
def test_collective_junit_has_a_case_per_algorithm_and_size(tmp_path):
    out_xml = tmp_path / "out.xml"
    proc = _topolab(
        "collective", SMOKE, "--algorithm", "ring,topoopt", "--bytes", "1M", "--repeat", "1",
        "--junit", str(out_xml), "--run-dir", str(tmp_path / "run"), "--out", str(tmp_path / "c"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    xml = JUnitXml.fromfile(str(out_xml))
    assert xml.tests == 5 and _counts(xml) == _recounted(xml)
    cls = "topolab.collective.smoke-12"
    assert set(_cases(xml)) == {
        *((f"{cls}.{alg}", f"1M: {check}") for alg in ("ring", "topoopt") for check in (VERIFIED, WITHIN_TOLERANCE)),
        (cls, NOTHING_LEFT),
    }
    assert all(_cases(xml)[(f"{cls}.{alg}", f"1M: {VERIFIED}")].is_passed for alg in ("ring", "topoopt"))
