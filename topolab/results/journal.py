"""A run's results folder on disk: results.json and, beside it, ``iterations.jsonl``, the
iterations as they are measured.

One JSON object a line, flushed and fsynced after each, so a run killed by SIGKILL (which
no handler sees) still leaves every iteration it finished. `read_journal` skips a last line
cut short by the kill; `read_results` reads a folder back (format checked, the journal's
iterations added, a run that never finished marked incomplete).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import TracebackType

from contract.errors import UsageError
from contract.files import FileInputError, open_for_append, read_capped_text, write_file

from ..common.options import make_output_dir
from .run_results import MAX_RESULTS_BYTES, RESULTS_FORMAT, Iteration, RunResults, check_format, recover

RESULTS_FILE = "results.json"
ITERATIONS_FILE = "iterations.jsonl"


class IterationJournal:
    """Append-only JSON lines file, durable line by line; truncated when opened."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file = os.fdopen(open_for_append(self.path), "w", encoding="utf-8")

    def append(self, record: Iteration) -> None:
        self._file.write(json.dumps(record.to_dict()) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> IterationJournal:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def read_journal(path: Path) -> list[Iteration]:
    """The complete records of ``path`` (none if it is missing)."""
    if not os.path.lexists(path):
        return []
    lines = read_capped_text(path, MAX_RESULTS_BYTES, "journal").splitlines()
    records = []
    for line in lines:
        try:
            records.append(Iteration.from_dict(json.loads(line)))
        except ValueError:  # the line a kill cut short
            break
    return records


def write_results_file(results: RunResults, out_dir: Path) -> Path:
    """results.json in ``out_dir`` (created if missing); returns its path."""
    make_output_dir(out_dir)
    path = out_dir / RESULTS_FILE
    write_file(path, json.dumps(results.to_dict(), indent=1))
    return path


def read_results(folder: Path, name: str | None = None) -> RunResults:
    """The results in ``folder`` with the iterations its journal adds. What is not a results
    folder of this topolab is a one-line `UsageError` naming ``name`` (the argument the
    folder came from; default: the folder), or the file and its format."""
    label = name or str(folder)
    path = Path(folder) / RESULTS_FILE
    if not os.path.lexists(path):
        raise UsageError(f"{label}: no {RESULTS_FILE} in it (not a results folder of topolab run)")
    try:
        doc = json.loads(read_capped_text(path, MAX_RESULTS_BYTES, "results document"))
    except FileInputError as err:
        raise UsageError(f"{label}: {err}") from None
    except (ValueError, RecursionError) as err:
        raise UsageError(f"{label}: {RESULTS_FILE} is not valid JSON: {err}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{label}: {RESULTS_FILE} is not a topolab run's results")
    check_format(doc, RESULTS_FORMAT, str(path))
    try:
        results = RunResults.from_dict(doc)
        journal = read_journal(Path(folder) / ITERATIONS_FILE)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise UsageError(f"{path}: not a topolab run's results ({type(err).__name__}: {err})") from None
    return recover(results, journal)
