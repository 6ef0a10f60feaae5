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
from contract.files import read_capped_text, write_file
from contract.graph import GraphFormatError, OperatorGraph

MAX_GRAPH_BYTES = 256 << 20  # an imported model of 10^5 operators is ~30 MB


def read_graph(path: str | Path) -> OperatorGraph:
    """The operator graph stored in ``path``; a missing, unreadable or invalid file (a
    folder, a FIFO or a device, one over `MAX_GRAPH_BYTES`, JSON nested too deeply, a number
    over the format's maximum) is a one-line `UsageError` naming the file and the field."""
    path = Path(path)
    text = read_capped_text(path, MAX_GRAPH_BYTES, "graph file")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}: not JSON (line {err.lineno}: {err.msg}): not an operator-graph file") from None
    except RecursionError:
        raise UsageError(f"{path}: JSON nested too deeply: not an operator-graph file") from None
    except ValueError as err:  # an integer of more than 4,300 digits (sys.get_int_max_str_digits)
        raise UsageError(f"{path}: not JSON ({str(err).split(':')[0]}): not an operator-graph file") from None
    try:
        return OperatorGraph.from_dict(doc)
    except GraphFormatError as err:
        raise UsageError(f"{path}: {err.field}: {err.problem}") from None


def write_graph(graph: OperatorGraph, path: str | Path) -> None:
    """Write ``graph`` as its JSON document (one operator per line: diffable, still small),
    never through a symbolic link at ``path`` (contract.files.write_file)."""
    doc = graph.to_dict()
    ops = doc.pop("ops")
    head = json.dumps(doc)[:-1]
    lines = ",\n".join("  " + json.dumps(op) for op in ops)
    write_file(path, f'{head}, "ops": [\n{lines}\n]}}\n')
