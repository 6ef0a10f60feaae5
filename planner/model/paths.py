"""Where a scenario's file keys point: one rule for every one of them.

``[workload] model = "file.py:factory"``, ``graph`` and ``chakra``, ``[topology] cabling``
and ``routes``, and ``[collectives] allreduce = "msccl:FILE"`` name files; a relative path is relative to the scenario's folder
(`scenario_folder`), and only to it: never to the current folder, never a second place tried
when the first has no such file. The same scenario then names the same files from wherever it
is run, and a file dropped in the current folder is never picked up instead (a model file is
code: docs/scenarios.md). A command-line argument (``topolab import MODEL``) is relative to
the current folder, as every command line is.
"""

from __future__ import annotations

from pathlib import Path


def resolve_path(name: str | Path, base: Path) -> Path:
    """``name`` relative to ``base`` (the scenario's folder), whether or not it exists there."""
    path = Path(name)
    return path if path.is_absolute() else base / path


def scenario_folder(source: str) -> Path:
    """The folder of the scenario file ``source`` (the base of its relative paths); the current
    folder for a scenario that is no file (``"<scenario>"``, parsed from data)."""
    return Path(source).parent if source and not source.startswith("<") else Path()
