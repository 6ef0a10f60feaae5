"""JUnit XML of a measured command, for CI systems to display (``--junit FILE`` of `topolab run`,
`topolab compare` and `topolab collective`; docs/ci.md).

One ``<testsuite>`` per command run, in a ``<testsuites>`` root, in the schema CI systems read
(Jenkins' and GitLab's JUnit, GitHub actions that publish JUnit): ``testsuites`` and
``testsuite`` with ``name``, ``tests``, ``failures``, ``errors``, ``skipped`` and ``time``;
``testcase`` with ``classname``, ``name`` and ``time``; ``failure``, ``error`` and
``skipped`` with ``message`` and ``type``. One test case per check a run already makes:

- ``every iteration verified``: one case for all the timed iterations of a run (its count in
  ``system-out``), so the case's name stays the same from run to run and a CI's history of it
  means something; a failure names the first iteration that failed and its first mismatch;
- ``prediction within tolerance``: |predicted - measured| / measured of the median iteration
  against the scenario's ``run.tolerance`` (the same test as `topolab run`'s exit code 3);
  a failure gives measured, predicted, error and tolerance;
- ``nothing left on the machine``: the network's teardown ended every host shell, so the run's
  state file is gone from the run folder (`emulator.net.EmulatedNetwork.stop` keeps it, for
  `topolab clean`, only when a host shell would not end; over several machines a teardown that
  failed fails the run instead).

A run that failed (`contract.errors.RunError`) still gets its report: a failed verification
is that case's ``failure``, any other cause its ``error`` (the run's one line), and the checks
it never reached are ``skipped``. Times are seconds of this machine's clock. The
file is written with `contract.files.write_file`, its path checked first by
`topolab.common.options.check_output_file`; the command's exit code is the same with or without it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from contract.errors import UsageError
from contract.files import write_file

from ..common.options import check_output_file
from .collective_results import PhaseResult, SizeResult, format_size
from .journal import RESULTS_FILE, read_results
from .run_results import RunResults, relative_error

VERIFIED = "every iteration verified"
WITHIN_TOLERANCE = "prediction within tolerance"
NOTHING_LEFT = "nothing left on the machine"

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
"""Characters XML 1.0 cannot hold (control characters a worker's message might carry)."""


def add_junit_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--junit",
        metavar="FILE",
        help="also write JUnit XML for a CI system to display: a test case per check (every iteration verified, "
        "the prediction within the scenario's run.tolerance, nothing left on the machine); docs/ci.md",
    )


def junit_path(args: argparse.Namespace) -> Path | None:
    """``--junit`` checked before any work (one line naming it, exit 2), or None when not given."""
    return check_output_file(args.junit, "--junit", inputs=(args.scenario,))


@dataclass
class Case:
    """One ``<testcase>``: passed, unless it has a ``failure`` (the check did not hold), an
    ``error`` (the run failed before the check could be made) or is ``skipped``."""

    classname: str
    name: str
    seconds: float = 0.0
    failure: str | None = None
    error: str | None = None
    failure_type: str = ""  # which check: "verification", "tolerance" or "teardown"
    error_type: str = "RunError"
    skipped: str | None = None
    output: str = ""  # <system-out>: the figures behind the verdict


@dataclass
class Suite:
    """One ``<testsuite>``: one command run."""

    name: str
    cases: list[Case] = field(default_factory=list)
    seconds: float = 0.0
    timestamp: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S"))
    properties: dict[str, str] = field(default_factory=dict)


@dataclass
class Measurement:
    """What the checks of one measured thing need (a run, an arm of compare, an algorithm
    and size of collective): its iterations, their verification, its median against its
    prediction."""

    classname: str
    label: str  # put before each case's name ("64M: "), or "" for a run
    iterations: int  # timed iterations recorded
    seconds: float  # their sum, seconds of this machine
    failed: str | None  # the first failed verification: which iteration and its first mismatch
    measured_ms: float | None  # median, real-cluster ms
    predicted_ms: float | None
    error: float | None  # |predicted - measured| / measured
    tolerance: float
    over_tolerance: bool | None  # error > tolerance, None when not measured


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.3g}%"


def of_run(results: RunResults, classname: str) -> Measurement:
    """The checks of a `topolab run` (or an arm of compare): its summary, as its exit code reads it."""
    summ = results.summarize()
    timed = [it for it in results.iterations if not it.warmup]
    failed = next((it for it in results.iterations if not it.verified), None)
    why = None
    if failed is not None:
        which = "a warm-up iteration" if failed.warmup else f"iteration {failed.index}"
        why = f"{which} failed verification: {failed.errors[0] if failed.errors else 'no detail'}"
    return Measurement(
        classname=classname,
        label="",
        iterations=len(timed),
        seconds=sum(it.measured_s for it in timed),
        failed=why,
        measured_ms=summ.median_real_ms,
        predicted_ms=results.predicted.real_ms if results.predicted else None,
        error=summ.error,
        tolerance=results.tolerance,
        over_tolerance=summ.error_over_tolerance,
    )


def of_collective(result: SizeResult, predicted_s: float | None, tolerance: float, classname: str) -> Measurement:
    """The checks of one algorithm and size of `topolab collective` (``predicted_s``: the
    flow-level model's time of its schedule on the cables as built, emulated seconds)."""
    measured = result.time_s if result.times_s else None
    error = relative_error(measured, predicted_s) if measured and predicted_s is not None else None
    return Measurement(
        classname=f"{classname}.{result.algorithm}",
        label=f"{format_size(result.bytes)}: ",
        iterations=len(result.times_s),
        seconds=sum(result.times_s),
        failed=None if result.verified else f"VERIFY FAILED: {'; '.join(result.mismatches[:1]) or 'no detail'}",
        measured_ms=None if measured is None else measured / result.time_scale * 1e3,
        predicted_ms=None if predicted_s is None else predicted_s / result.time_scale * 1e3,
        error=error,
        tolerance=tolerance,
        over_tolerance=None if error is None else error > tolerance,
    )


def of_phase(result: PhaseResult, time_scale: float, tolerance: float, classname: str) -> Measurement:
    """The checks of one routing of `topolab collective --algorithm alltoall`."""
    measured = result.median_s if result.times_s else None
    error = relative_error(measured, result.predicted_s) if measured else None
    return Measurement(
        classname=f"{classname}.alltoall",
        label=f"{result.variant}: ",
        iterations=len(result.times_s),
        seconds=sum(result.times_s),
        failed=None if result.verified else f"VERIFY FAILED: {'; '.join(result.errors[:1]) or 'no detail'}",
        measured_ms=None if measured is None else measured / time_scale * 1e3,
        predicted_ms=result.predicted_s / time_scale * 1e3,
        error=error,
        tolerance=tolerance,
        over_tolerance=None if error is None else error > tolerance,
    )


def measurement_cases(m: Measurement, run_error: str | None = None) -> list[Case]:
    """The verification and tolerance cases of ``m``; ``run_error``: why the run stopped
    early (an ``error`` in the verification case unless a verification failed first)."""
    verified = Case(m.classname, f"{m.label}{VERIFIED}", m.seconds, failure_type="verification")
    if m.failed is not None:
        verified.failure = m.failed
    elif run_error is not None:
        verified.error = run_error
    elif not m.iterations:
        verified.failure = "no timed iteration ran"
    if m.iterations and m.failed is None:
        verified.output = f"{m.iterations} timed iteration(s) verified by every worker"
    tolerance = Case(m.classname, f"{m.label}{WITHIN_TOLERANCE}", failure_type="tolerance")
    if m.measured_ms is None or m.predicted_ms is None or m.error is None:
        tolerance.skipped = "nothing measured to hold the prediction against" if m.predicted_ms else "no prediction"
    else:
        figures = (
            f"measured {m.measured_ms:.3f} ms, predicted {m.predicted_ms:.3f} ms (real-cluster ms, median of "
            f"{m.iterations}): error {_percent(m.error)}, tolerance {_percent(m.tolerance)} (run.tolerance)"
        )
        if m.over_tolerance:
            tolerance.failure = figures
        else:
            tolerance.output = figures
    return [verified, tolerance]


def left_behind(run_dir: str) -> Path | None:
    """This process's state file in ``run_dir`` when a network's teardown kept it (a host
    shell did not end: its namespaces may remain), else None."""
    from emulator.state import RunState

    path = Path(RunState.new(run_dir).path)  # its name only: nothing is written
    return path if path.exists() else None


def nothing_left_case(classname: str, run_dir: str, teardown_s: float | None = None) -> Case:
    """The teardown check: no state file of this run left in ``run_dir``."""
    case = Case(classname, NOTHING_LEFT, teardown_s or 0.0, failure_type="teardown")
    left = left_behind(run_dir)
    if left is None:
        case.output = f"teardown ended every host shell: no state file of this run in {run_dir}"
    else:
        case.failure = (
            f"{left} remains: a host shell did not end at teardown, so its namespaces may remain; "
            f"`topolab clean --run-dir {run_dir}` removes them"
        )
    return case


def run_cases(classname: str, results: RunResults | None, run_dir: str, err: BaseException | None = None) -> list[Case]:
    """The cases of one measured run (`topolab run`, an arm of `topolab compare`): ``results``
    as it ended, or, when it failed (``err``), what it recorded (None: nothing, it failed
    before its network was up); then the teardown check of ``run_dir``."""
    why = None if err is None else str(err)
    if results is None:
        cases = [
            Case(classname, VERIFIED, error=why or "nothing recorded", error_type=type(err).__name__),
            Case(classname, WITHIN_TOLERANCE, skipped="the run failed before it measured an iteration"),
        ]
    else:
        cases = measurement_cases(of_run(results, classname), why)
    return [*cases, nothing_left_case(classname, run_dir, results.emulation.teardown_s if results else None)]


def recorded(out: Path, since: float) -> RunResults | None:
    """What a run that failed recorded in its results folder ``out``: None when nothing there
    was written since ``since`` (`time.time`; an earlier run's results are not this one's)."""
    try:
        if os.stat(out / RESULTS_FILE).st_mtime < since:
            return None
        return read_results(out)
    except (OSError, UsageError):
        return None


def _counts(cases: Sequence[Case]) -> dict[str, str]:
    return {
        "tests": str(len(cases)),
        "failures": str(sum(c.failure is not None for c in cases)),
        "errors": str(sum(c.error is not None and c.failure is None for c in cases)),
        "skipped": str(sum(c.skipped is not None and c.failure is None and c.error is None for c in cases)),
    }


def _text(value: str) -> str:
    return _NOT_XML.sub("\ufffd", value)


def _seconds(value: float) -> str:
    return f"{max(0.0, value):.3f}"


def junit_xml(suites: Sequence[Suite], name: str = "topolab") -> bytes:
    """The JUnit XML document of ``suites`` (UTF-8, with its declaration)."""
    every = [case for suite in suites for case in suite.cases]
    root = ET.Element("testsuites", {"name": _text(name), **_counts(every)})
    root.set("time", _seconds(sum(suite.seconds for suite in suites)))
    for suite in suites:
        element = ET.SubElement(root, "testsuite", {"name": _text(suite.name), **_counts(suite.cases)})
        element.set("time", _seconds(suite.seconds))
        element.set("timestamp", suite.timestamp)
        element.set("hostname", _text(os.uname().nodename))
        if suite.properties:
            properties = ET.SubElement(element, "properties")
            for key, value in suite.properties.items():
                ET.SubElement(properties, "property", name=_text(key), value=_text(value))
        for case in suite.cases:
            testcase = ET.SubElement(
                element, "testcase", classname=_text(case.classname), name=_text(case.name), time=_seconds(case.seconds)
            )
            if case.failure is not None:
                verdict = ET.SubElement(testcase, "failure", message=_text(case.failure), type=_text(case.failure_type))
                verdict.text = _text(case.failure)
            elif case.error is not None:
                verdict = ET.SubElement(testcase, "error", message=_text(case.error), type=_text(case.error_type))
                verdict.text = _text(case.error)
            elif case.skipped is not None:
                ET.SubElement(testcase, "skipped", message=_text(case.skipped), type="skipped")
            if case.output:
                ET.SubElement(testcase, "system-out").text = _text(case.output)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def write_junit(path: Path, suites: Sequence[Suite]) -> None:
    """Write ``suites`` to ``path`` (checked by `junit_path`) and say where on stderr."""
    write_file(path, junit_xml(suites))
    print(f"topolab: JUnit report in {path}", file=sys.stderr)


def write_command_suite(
    path: Path | None, command: str, scenario: str, cases: list[Case], started: float, properties: dict[str, str]
) -> None:
    """``--junit``: the checks of one run of ``topolab <command>`` on the scenario named
    ``scenario`` as one test suite, timed from ``started`` (`time.monotonic`); nothing when
    ``path`` is None (no ``--junit``)."""
    if path is not None:
        suite = Suite(f"topolab {command} {scenario}", cases, time.monotonic() - started, properties=properties)
        write_junit(path, [suite])
