"""The one way from a job to its operator graph: a zoo model or an imported graph.

Everything that plans, searches, places or schedules a job starts from `workload_graph`:

- a zoo workload (``Workload.graph`` is None): `planner.model.opgraph.model_graph` of the zoo
  model ``Workload.model``;
- an imported workload (``Workload.graph``: a traced PyTorch model, a graph file, a Chakra
  trace; contract.graph): its operators with their figures divided by the graph's
  micro-batch, so they are per sample as the zoo's are, and a measured duration
  (``forward_us`` / ``backward_us``) turned into the FLOPs that take that long at the
  workload's device rate for the traced micro-batch (so it overrides the FLOP count).

`workload_from_table` is the scenario's ``[workload]`` section: ``model`` (a zoo name, or
``"file.py:factory"`` / ``"package.module:factory"``, traced by planner.model.model_import),
``graph`` (an operator-graph file, planner.model.graph_file) or ``chakra`` (a Chakra execution
trace or a folder of per-rank traces, planner.model.chakra). A relative path is relative to the
scenario's folder only (planner.model.paths). A model file is code, run when the scenario is
loaded (docs/scenarios.md).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from contract.errors import UsageError
from contract.graph import OperatorGraph
from contract.plan import Workload

from .opgraph import Operator, OpGraph, model_graph
from .paths import resolve_path, scenario_folder
from .zoo import MODELS, get_model

SOURCE_KEYS = ("model", "graph", "chakra")  # the [workload] keys that name the model


def workload_graph(w: Workload) -> OpGraph:
    """The operator DAG of ``w``, per sample (module docstring)."""
    if w.graph is None:
        return model_graph(get_model(w.model))
    return imported_graph(w.graph, w.device_tflops)


@lru_cache(maxsize=8)
def imported_graph(g: OperatorGraph, device_tflops: float) -> OpGraph:
    """``g`` as the planner's `OpGraph` (per sample; durations as FLOPs at ``device_tflops``)."""
    ops = []
    for op in g.ops:
        fwd, bwd = op.forward_flops, op.backward_flops
        if op.forward_us is not None:
            fwd = op.forward_us * 1e-6 * device_tflops * 1e12
        if op.backward_us is not None:
            bwd = op.backward_us * 1e-6 * device_tflops * 1e12
        ops.append(
            Operator(
                op.name,
                op.kind,
                op.params,
                fwd / g.batch,
                round(op.out_bytes / g.batch),
                op.inputs,
                (op.name,),
                bwd / g.batch,
                op.param_bytes,
            )
        )
    graph = OpGraph(g.name, tuple(ops), g.shared)
    graph.validate()
    return graph


def describe_workload(w: Workload) -> str:
    """One line: the model, where it came from, its parameters, FLOPs and operators."""
    g = workload_graph(w)
    origin = f"imported from {w.graph.source}" if w.graph is not None else "zoo"
    backward = sum(op.backward_flops for op in g.ops)
    return (
        f"{g.model} ({origin}): {g.params:,} parameters ({_si(g.param_bytes, 'B')} of gradients), "
        f"{_si(g.flops, 'FLOP')} + {_si(backward, 'FLOP')} per sample (forward + backward), {len(g)} operators"
    )


def _si(x: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.4g} {prefix}{unit}"
    return f"{x:.4g} {unit}"


def has_tables(w: Workload) -> bool:
    """Does the job have embedding tables the `hybrid` strategy places (`OpGraph.tables`:
    not one tied to a dense operator)?"""
    if w.graph is None:
        return bool(get_model(w.model).embeddings)
    return bool(imported_graph(w.graph, w.device_tflops).tables)


def workload_from_table(
    values: dict[str, Any], table: dict[str, Any], source: str, error: Callable[[str, str], Exception]
) -> Workload:
    """The ``[workload]`` section as a `Workload`: ``values`` holds its validated numeric
    keys, ``table`` the raw section; ``error(key, problem)`` builds the one-line error."""
    if isinstance(table.get("graph"), OperatorGraph):  # a resolved workload, copied (with_overrides)
        return Workload(str(table.get("model", table["graph"].name)), **values, graph=table["graph"])
    named = [k for k in SOURCE_KEYS if k in table]
    if len(named) > 1:
        raise error(f"workload.{named[1]}", f"set one of {', '.join(SOURCE_KEYS)}, not {' and '.join(named)}")
    for key in named:
        if not isinstance(table[key], str) or not table[key]:
            raise error(f"workload.{key}", f"expected a non-empty string, got {table[key]!r}")
        if "\x00" in table[key]:
            raise error(f"workload.{key}", f"a path cannot hold a NUL character, got {table[key]!r}")
    model = table.get("model", Workload.model)
    if not named or (named == ["model"] and ":" not in model):
        if model not in MODELS:
            raise error(
                "workload.model",
                f"{model!r} is not one of {', '.join(MODELS)}, nor 'file.py:factory' or 'package.module:factory'",
            )
        return Workload(model, **values)
    key = named[0]
    try:
        graph = _imported(key, table[key], scenario_folder(source))
    except UsageError as err:  # the file's own line (its path, the field), under the key naming it
        raise error(f"workload.{key}", str(err)) from None
    return Workload(model if key == "model" else graph.name, **values, graph=graph)


def _imported(key: str, name: str, base: Path) -> OperatorGraph:
    """The graph the ``[workload]`` key ``key`` (graph, chakra or a model factory) names;
    a relative path is relative to ``base``, the scenario's folder."""
    if key == "graph":
        from .graph_file import read_graph

        return read_graph(resolve_path(name, base))
    if key == "chakra":
        from .chakra import import_chakra

        return import_chakra(resolve_path(name, base))
    from .model_import import import_model

    return import_model(name, base)


def import_source(name: str, base: Path | None = None) -> OperatorGraph:
    """``topolab import``'s MODEL: a PyTorch factory (``file.py:factory``,
    ``package.module:factory``) or a Chakra trace (an existing file or folder); a relative
    path is relative to ``base``, by default the current folder (a command-line argument)."""
    path = resolve_path(name, base or Path())
    if path.exists() or ":" not in name:
        from .chakra import import_chakra

        return import_chakra(path)
    from .model_import import import_model

    return import_model(name, base)
