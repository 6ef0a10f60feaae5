"""A run's iterations on disk as they are measured: ``iterations.jsonl`` beside results.json.

One JSON object a line, flushed and fsynced after each, so a run killed by SIGKILL (which
no handler sees) still leaves every iteration it finished. `read_journal` skips a last line
cut short by the kill.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import TracebackType
from typing import Any

RESULTS_FILE = "results.json"
ITERATIONS_FILE = "iterations.jsonl"


class IterationJournal:
    """Append-only JSON lines file, durable line by line; truncated when opened."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file = self.path.open("w", encoding="utf-8")

    def append(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> IterationJournal:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def read_journal(path: Path) -> list[dict[str, Any]]:
    """The complete records of ``path`` (none if it is missing)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:  # the line a kill cut short
            break
    return records
