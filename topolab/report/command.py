"""`topolab report DIR`: render the report of any results folder topolab writes.

What the folder holds says what it is: ``compare.json`` (`topolab compare`: compare.md and
compare.png, each arm's own folder reported too), ``sweep.json`` (`topolab sweep`: sweep.txt
and sweep.png), or ``results.json`` of `topolab run` (report.md and plots, also of a killed
run, marked incomplete), of `topolab collective` (nccl-tests.txt, table.txt, busbw.png and
report.md) or of its all-to-all phase (table.txt and report.md). A results.json of an unknown
or newer format is one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from contract.errors import UsageError
from contract.files import FileInputError, read_capped_text, write_file

from ..common.options import check_output_dir
from ..results.journal import RESULTS_FILE, read_results
from ..results.run_results import MAX_RESULTS_BYTES


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "results_dir",
        metavar="DIR",
        help="a results folder of topolab run, compare, collective or sweep",
    )


def _read_json(path: Path, label: str) -> dict[str, Any]:
    try:
        doc = json.loads(read_capped_text(path, MAX_RESULTS_BYTES, "results document"))
    except FileInputError as err:
        raise UsageError(f"{label}: {err}") from None
    except (ValueError, RecursionError) as err:
        raise UsageError(f"{label}: {path.name} is not readable JSON: {err}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{label}: {path.name} is not a topolab document")
    return doc


def report_run(folder: Path, label: str) -> str:
    from ..results.run_report import write_report

    results = read_results(folder, label)
    check_output_dir(folder, "DIR")
    report = write_report(results, folder)
    its = results.summarize().iterations
    return f"report: {report} ({results.status}, {its} iteration{'s' if its != 1 else ''})"


def report_compare(folder: Path, label: str) -> str:
    from ..results.comparison import write_compare

    doc = _read_json(folder / "compare.json", label)
    arms = [row["topology"] for row in doc.get("rows", [])]
    for arm in arms:
        if (folder / arm / RESULTS_FILE).is_file():
            report_run(folder / arm, f"{label}/{arm}")
    try:
        write_compare(folder, doc)
    except (KeyError, TypeError) as err:
        raise UsageError(f"{label}: compare.json is not a comparison ({type(err).__name__}: {err})") from None
    return f"report: {folder / 'compare.md'} (compare of {', '.join(arms)})"


def report_sweep(folder: Path, label: str) -> str:
    from ..results.sweep_report import write_sweep

    doc = _read_json(folder / "sweep.json", label)
    try:
        _, written = write_sweep(folder, doc)
    except (KeyError, TypeError) as err:
        raise UsageError(f"{label}: sweep.json is not a sweep ({type(err).__name__}: {err})") from None
    return f"report: {', '.join(str(p) for p in written[1:])} (sweep of {len(doc['rows'])} cells)"


def report_collective(folder: Path, label: str, doc: dict[str, Any]) -> str:
    source = str(folder / RESULTS_FILE)
    try:
        return _report_collective(folder, doc, source)
    except (KeyError, TypeError, ValueError) as err:
        raise UsageError(f"{source}: not the results of topolab collective ({type(err).__name__}: {err})") from None


def _report_collective(folder: Path, doc: dict[str, Any], source: str) -> str:
    from ..results.collective_results import (
        ALLTOALL_FORMAT,
        AlltoallResults,
        CollectiveResults,
        format_phase_table,
        write_collective_report,
    )

    if str(doc.get("format", "")).startswith(ALLTOALL_FORMAT.split("/")[0] + "/"):
        phase = AlltoallResults.from_dict(doc, source)
        table = format_phase_table(phase.results, f"{phase.scenario}: all-to-all phase, emulated seconds")
        write_file(folder / "table.txt", table + "\n")
        report = folder / "report.md"
        write_file(report, f"# {phase.scenario}: one all-to-all phase per routing\n\n```\n{table}\n```\n")
        return f"report: {report} (all-to-all, {len(phase.results)} routings)"
    runs = CollectiveResults.from_dict(doc, source)
    return f"report: {write_collective_report(folder, runs)} (collective, {len(runs.results)} measurements)"


def run_report(args: argparse.Namespace) -> int:
    from ..results.collective_results import ALLTOALL_FORMAT, COLLECTIVE_FORMAT

    folder = Path(args.results_dir)
    label = f"DIR {args.results_dir!r}"
    if not folder.is_dir():
        raise UsageError(f"{label}: no such folder")
    if (folder / "compare.json").is_file():
        line = report_compare(folder, label)
    elif (folder / "sweep.json").is_file():
        line = report_sweep(folder, label)
    else:
        path = folder / RESULTS_FILE
        doc = _read_json(path, label) if path.is_file() else {}
        kinds = tuple(f.split("/")[0] + "/" for f in (COLLECTIVE_FORMAT, ALLTOALL_FORMAT))
        if str(doc.get("format", "")).startswith(kinds):
            line = report_collective(folder, label, doc)
        else:
            line = report_run(folder, label)
    print(line)
    return 0
