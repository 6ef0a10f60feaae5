"""`topolab import`: a PyTorch model or a Chakra trace as an operator-graph file (docs/models.md).

``topolab import examples/models/resnet50.py:build --out resnet50.json`` traces the model
(planner.model.model_import; needs the ``models`` extra), prints what it found (parameters, FLOPs,
operators) and writes the graph, which ``[workload] graph = "resnet50.json"`` then plans
from without torch. A Chakra execution trace (an ``.et`` file or a folder of per-rank
traces) imports the same way (planner.model.chakra). The file is written only once the import
succeeded: bad input leaves nothing behind. ``--out`` never names the model's own source (the
factory's file, the trace, a file of the traces' folder): that mistake is refused before the
model is imported.

Importing a factory runs its file's code as the user who runs ``topolab import`` (no root
needed); the graph file it writes is data, which root commands (``run``, ``train``) then read
without running any code (docs/models.md).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from ..common.options import check_output_file


def add_import_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model",
        help="'file.py:factory' or 'package.module:factory' (a function returning (module, example_inputs)), "
        "or a Chakra execution trace (.et file, or a folder of per-rank traces)",
    )
    parser.add_argument("--out", metavar="FILE", help="write the operator graph (JSON, topolab.opgraph/1) to FILE")


def run_import(args: argparse.Namespace) -> int:
    from contract.plan import Workload
    from planner.model.graph_file import write_graph
    from planner.model.workload_graph import describe_workload, import_source

    out = check_output_file(args.out, "--out", inputs=model_sources(args.model))
    graph = import_source(args.model)
    print(describe_workload(Workload(graph.name, graph=graph)))
    if out is not None:
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
        os.close(fd)
        try:
            write_graph(graph, tmp)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # as a plain open() would create it
            os.replace(tmp, out)
        finally:
            Path(tmp).unlink(missing_ok=True)
        print(f"wrote {out}")
    return 0


def model_sources(model: str) -> tuple[str, ...]:
    """The files ``topolab import MODEL`` reads: the factory's file (``file.py:factory``), the
    trace, or the files of a folder of traces; ``--out`` must be none of them."""
    path = Path(model)
    if path.is_dir():
        return tuple(str(p) for p in sorted(path.iterdir()) if p.is_file())
    if path.exists() or ":" not in model:
        return (model,)
    target = model.rpartition(":")[0]
    return (target,) if target.endswith(".py") else ()
