"""Operator-graph files (``topolab.opgraph/1``, docs/models.md): read with validation, write.

`read_graph` is how ``[workload] graph = "graph.json"`` plans without torch installed: the
file is parsed and checked field by field (`contract.graph.OperatorGraph.from_dict`), and
anything wrong is one `UsageError` line naming the file and the field. `write_graph` is what
``topolab import`` writes.
"""

from __future__ import annotations

import json
from pathlib import Path

from contract.errors import UsageError
from contract.graph import GraphFormatError, OperatorGraph

MAX_GRAPH_BYTES = 256 << 20  # an imported model of 10^5 operators is ~30 MB


def read_graph(path: str | Path) -> OperatorGraph:
    """The operator graph stored in ``path``; a missing, unreadable or invalid file is a
    one-line `UsageError` naming the file and the field."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_GRAPH_BYTES:
            raise UsageError(f"{path}: larger than {MAX_GRAPH_BYTES} bytes: not an operator-graph file")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such operator-graph file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a folder, not an operator-graph file") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 JSON: not an operator-graph file") from None
    except OSError as err:
        raise UsageError(f"{path}: cannot read: {err.strerror}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}: not JSON (line {err.lineno}: {err.msg}): not an operator-graph file") from None
    try:
        return OperatorGraph.from_dict(doc)
    except GraphFormatError as err:
        raise UsageError(f"{path}: {err.field}: {err.problem}") from None


def write_graph(graph: OperatorGraph, path: str | Path) -> None:
    """Write ``graph`` as its JSON document (one operator per line: diffable, still small)."""
    doc = graph.to_dict()
    ops = doc.pop("ops")
    head = json.dumps(doc)[:-1]
    lines = ",\n".join("  " + json.dumps(op) for op in ops)
    Path(path).write_text(f'{head}, "ops": [\n{lines}\n]}}\n', encoding="utf-8")
