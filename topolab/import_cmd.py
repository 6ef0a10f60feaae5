"""`topolab import`: a PyTorch model or a Chakra trace as an operator-graph file (docs/models.md).

``topolab import examples/models/resnet50.py:build --out resnet50.json`` traces the model
(planner.model.model_import; needs the ``models`` extra), prints what it found (parameters, FLOPs,
operators) and writes the graph, which ``[workload] graph = "resnet50.json"`` then plans
from without torch. A Chakra execution trace (an ``.et`` file or a folder of per-rank
traces) imports the same way (planner.model.chakra). The file is written only once the import
succeeded: bad input leaves nothing behind.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from .options import check_output_file


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

    out = check_output_file(args.out, "--out")
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
