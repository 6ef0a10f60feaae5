"""An imported model's operator graph as plain data: the documented file format ``topolab.opgraph/1``.

A model the planner's zoo does not describe (a traced PyTorch model, a Chakra execution
trace) reaches the planner as an `OperatorGraph`: its operators in a topological order, each
with what the planner derives traffic and compute time from, counted for one server's
micro-batch of ``batch`` samples:

- ``params`` and ``param_bytes``: the parameters the operator reads (their gradients are
  what data parallelism AllReduces);
- ``forward_flops`` and ``backward_flops``: FLOPs of its forward and of its backward pass
  (counted by torch's FLOP counter for a traced model);
- ``out_bytes``: bytes of the activation it outputs (what crosses servers when a consumer
  runs elsewhere);
- ``inputs``: the operators whose outputs it reads (each precedes it);
- ``forward_us`` and ``backward_us`` (optional): measured durations, which override the FLOP
  model when present (a Chakra trace's compute nodes).

A parameter that several operators read (tied weights: a GPT's token embedding and its output
projection, one tensor) is one parameter: the first operator that reads it counts it in its
``params`` and ``param_bytes``, and the graph's optional ``shared`` list (`SharedParameter`)
names every operator that reads it, so a strategy reduces its one gradient over the servers
that hold any of its readers (planner.strategy.strategies).

`OperatorGraph.to_dict` and `OperatorGraph.from_dict` are the file format (docs/models.md);
`from_dict` validates every field and raises `GraphFormatError` naming the first bad one.
Every number has an upper bound (`MAX_GRAPH_BATCH` and the others below), set far beyond
any real model but low enough that sums and products of them stay finite floats: a graph
file is shared input that root commands read, and ``params = 10**400`` must be one line
naming the field, not an ``OverflowError`` deep in the planner.
A plan of an imported model carries its graph in its `Workload`, so the plan alone still
determines its training iteration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

GRAPH_FORMAT = "topolab.opgraph/1"

# Upper bounds of a graph file's numbers (docs/models.md). Each is orders of magnitude beyond
# any model trained today, so no real graph meets one; they exist so that hostile or broken
# input stops at the reader with the field's name.
MAX_GRAPH_BATCH = 2**32  # samples in one server's micro-batch (real ones: 1 to a few thousand)
MAX_GRAPH_OPERATORS = 1_000_000  # BERT-large traces to 1,282 operators; 10^5 are ~30 MB of JSON
MAX_OP_PARAMS = 10**15  # parameters one operator reads: 1,000x the largest models' whole count
MAX_OP_BYTES = 2**53  # bytes of one operator's parameters or output (8 PiB; exact as a float)
MAX_OP_FLOPS = 1e24  # FLOPs of one operator on one micro-batch (a whole GPT-4 run is ~2e25)
MAX_OP_MICROS = 1e12  # a measured duration in microseconds (11.6 days for one operator)


class GraphFormatError(ValueError):
    """An operator-graph document that does not follow the format: ``field`` names where."""

    def __init__(self, field: str, problem: str):
        self.field, self.problem = field, problem
        super().__init__(f"{field}: {problem}")


@dataclass(frozen=True)
class GraphOperator:
    """One operator, its figures for the graph's micro-batch (module docstring)."""

    name: str
    kind: str
    params: int
    param_bytes: int
    forward_flops: float
    backward_flops: float
    out_bytes: int
    inputs: tuple[str, ...] = ()
    forward_us: float | None = None
    backward_us: float | None = None


@dataclass(frozen=True)
class SharedParameter:
    """One parameter read by several operators (tied weights; module docstring): ``ops[0]``
    counts its ``params`` and ``param_bytes`` among its own, ``ops[1:]`` read it too. ``name``
    is the parameter's name in the model (``tokens.weight``)."""

    name: str
    params: int
    param_bytes: int
    ops: tuple[str, ...]


@dataclass(frozen=True)
class OperatorGraph:
    """A model as operators (module docstring). ``source`` says where it came from (a
    factory, a trace); ``batch`` is the micro-batch its figures are counted for; ``shared``
    the parameters several operators read (empty: none)."""

    name: str
    source: str
    batch: int
    ops: tuple[GraphOperator, ...]
    shared: tuple[SharedParameter, ...] = ()

    @property
    def params(self) -> int:
        return sum(op.params for op in self.ops)

    @property
    def param_bytes(self) -> int:
        return sum(op.param_bytes for op in self.ops)

    @property
    def forward_flops(self) -> float:
        return sum(op.forward_flops for op in self.ops)

    @property
    def backward_flops(self) -> float:
        return sum(op.backward_flops for op in self.ops)

    def to_dict(self) -> dict[str, Any]:
        """The graph as its JSON document (optional fields only where set)."""
        ops: list[dict[str, Any]] = []
        for op in self.ops:
            d: dict[str, Any] = {
                "name": op.name,
                "kind": op.kind,
                "params": op.params,
                "param_bytes": op.param_bytes,
                "forward_flops": op.forward_flops,
                "backward_flops": op.backward_flops,
                "out_bytes": op.out_bytes,
                "inputs": list(op.inputs),
            }
            if op.forward_us is not None:
                d["forward_us"] = op.forward_us
            if op.backward_us is not None:
                d["backward_us"] = op.backward_us
            ops.append(d)
        doc: dict[str, Any] = {"format": GRAPH_FORMAT, "name": self.name, "source": self.source, "batch": self.batch}
        if self.shared:
            doc["shared"] = [
                {"name": p.name, "params": p.params, "param_bytes": p.param_bytes, "ops": list(p.ops)}
                for p in self.shared
            ]
        doc["ops"] = ops
        return doc

    @classmethod
    def from_dict(cls, d: Any) -> OperatorGraph:
        """Validate a parsed document; `GraphFormatError` names the first field that is wrong."""
        if not isinstance(d, dict):
            raise GraphFormatError("(document)", f"expected a JSON object, got {type(d).__name__}")
        known = {"format", "name", "source", "batch", "shared", "ops"}
        for key in d:
            if key not in known:
                raise GraphFormatError(str(key), f"unknown field (known: {', '.join(sorted(known))})")
        fmt = _field(d, "format", str, "format")
        if fmt != GRAPH_FORMAT:
            raise GraphFormatError("format", f"{_shown(fmt)} is not {GRAPH_FORMAT!r}")
        name = _field(d, "name", str, "name")
        source = _field(d, "source", str, "source", required=False) or ""
        batch = _field(d, "batch", int, "batch", limit=MAX_GRAPH_BATCH)
        if batch < 1:
            raise GraphFormatError("batch", f"must be >= 1, got {batch}")
        raw_ops = _field(d, "ops", list, "ops")
        if not raw_ops:
            raise GraphFormatError("ops", "no operators")
        if len(raw_ops) > MAX_GRAPH_OPERATORS:
            raise GraphFormatError("ops", f"more than {MAX_GRAPH_OPERATORS:,} operators ({len(raw_ops):,})")
        ops: list[GraphOperator] = []
        seen: set[str] = set()
        for i, raw in enumerate(raw_ops):
            op = _operator(raw, f"ops[{i}]")
            if op.name in seen:
                raise GraphFormatError(f"ops[{i}].name", f"a second operator named {_shown(op.name)}")
            for p in op.inputs:
                if p not in seen:
                    raise GraphFormatError(
                        f"ops[{i}].inputs", f"{_shown(p)} is not an operator before {_shown(op.name)}"
                    )
            seen.add(op.name)
            ops.append(op)
        shared = _shared(d, {op.name: op for op in ops})
        return cls(name, source, batch, tuple(ops), shared)


_OP_FIELDS = (
    "name",
    "kind",
    "params",
    "param_bytes",
    "forward_flops",
    "backward_flops",
    "out_bytes",
    "inputs",
    "forward_us",
    "backward_us",
)


def _shown(value: Any) -> str:
    """``value`` for a one-line message: a scalar as written (a long string cut, a huge
    integer as its size: ``str()`` of one over 4,300 digits raises), anything else by type."""
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        if abs(value) >= 10**21:
            return f"an integer of {value.bit_length()} bits (about 10**{int(value.bit_length() * math.log10(2))})"
        return repr(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 60 else repr(value[:57]) + "..."
    return f"a {type(value).__name__}"


def _limit(limit: int | float) -> str:
    return f"{limit:,}" if isinstance(limit, int) else f"{limit:g}"


def _field(
    d: dict[str, Any], key: str, want: type, where: str, required: bool = True, limit: int | float | None = None
) -> Any:
    """``d[key]``, of type ``want`` (an integer is a float too); a number must be >= 0 and,
    with ``limit`` (the module's constants), at most that."""
    if key not in d:
        if required:
            raise GraphFormatError(where, "missing")
        return None
    value = d[key]
    accepted: tuple[type, ...] = (int, float) if want is float else (want,)
    if isinstance(value, bool) or not isinstance(value, accepted):
        raise GraphFormatError(where, f"expected {want.__name__}, got {type(value).__name__} {_shown(value)}")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise GraphFormatError(where, f"expected a finite number >= 0, got {value!r}")
        if value < 0:
            kind = "an integer" if want is int else "a finite number"
            raise GraphFormatError(where, f"expected {kind} >= 0, got {_shown(value)}")
        if limit is not None and value > limit:  # before float(): float(10**400) overflows
            raise GraphFormatError(where, f"must be <= {_limit(limit)} (the format's maximum), got {_shown(value)}")
        if want is float:
            value = float(value)
    return value


_SHARED_FIELDS = ("name", "params", "param_bytes", "ops")


def _shared(d: dict[str, Any], ops: dict[str, GraphOperator]) -> tuple[SharedParameter, ...]:
    """The optional ``shared`` list: each entry a parameter of >= 2 distinct operators of
    the graph, its figures within what its first operator counts (with the graph's other
    shared parameters that operator counts)."""
    raw_list = _field(d, "shared", list, "shared", required=False) or []
    if len(raw_list) > MAX_GRAPH_OPERATORS:
        raise GraphFormatError("shared", f"more than {MAX_GRAPH_OPERATORS:,} parameters ({len(raw_list):,})")
    out: list[SharedParameter] = []
    counted: dict[str, tuple[int, int]] = {}  # operator -> (params, bytes) of its shared parameters so far
    for i, raw in enumerate(raw_list):
        where = f"shared[{i}]"
        if not isinstance(raw, dict):
            raise GraphFormatError(where, f"expected an object, got {type(raw).__name__}")
        for key in raw:
            if key not in _SHARED_FIELDS:
                raise GraphFormatError(f"{where}.{key}", f"unknown field (known: {', '.join(_SHARED_FIELDS)})")
        name = _field(raw, "name", str, f"{where}.name")
        params = _field(raw, "params", int, f"{where}.params", limit=MAX_OP_PARAMS)
        param_bytes = _field(raw, "param_bytes", int, f"{where}.param_bytes", limit=MAX_OP_BYTES)
        readers = _field(raw, "ops", list, f"{where}.ops")
        for j, op in enumerate(readers):
            if not isinstance(op, str) or op not in ops:
                raise GraphFormatError(f"{where}.ops[{j}]", f"{_shown(op)} is not an operator of the graph")
        if len(set(readers)) != len(readers) or len(readers) < 2:
            raise GraphFormatError(f"{where}.ops", "expected two or more distinct operators (the first counts it)")
        first = ops[readers[0]]
        before = counted.get(first.name, (0, 0))
        total = (before[0] + params, before[1] + param_bytes)
        if total[0] > first.params or total[1] > first.param_bytes:
            raise GraphFormatError(
                f"{where}.ops[0]",
                f"{_shown(first.name)} counts {first.params:,} parameters ({first.param_bytes:,} bytes), "
                f"fewer than its shared ones ({total[0]:,}, {total[1]:,} bytes)",
            )
        counted[first.name] = total
        out.append(SharedParameter(name, params, param_bytes, tuple(readers)))
    return tuple(out)


def _operator(raw: Any, where: str) -> GraphOperator:
    if not isinstance(raw, dict):
        raise GraphFormatError(where, f"expected an object, got {type(raw).__name__}")
    for key in raw:
        if key not in _OP_FIELDS:
            raise GraphFormatError(f"{where}.{key}", f"unknown field (known: {', '.join(_OP_FIELDS)})")
    name = _field(raw, "name", str, f"{where}.name")
    if not name or "+" in name:
        raise GraphFormatError(f"{where}.name", f"expected a non-empty name without '+', got {_shown(name)}")
    inputs = _field(raw, "inputs", list, f"{where}.inputs", required=False) or []
    for j, p in enumerate(inputs):
        if not isinstance(p, str):
            raise GraphFormatError(f"{where}.inputs[{j}]", f"expected an operator name, got {_shown(p)}")
    return GraphOperator(
        name=name,
        kind=_field(raw, "kind", str, f"{where}.kind"),
        params=_field(raw, "params", int, f"{where}.params", limit=MAX_OP_PARAMS),
        param_bytes=_field(raw, "param_bytes", int, f"{where}.param_bytes", limit=MAX_OP_BYTES),
        forward_flops=_field(raw, "forward_flops", float, f"{where}.forward_flops", limit=MAX_OP_FLOPS),
        backward_flops=_field(raw, "backward_flops", float, f"{where}.backward_flops", limit=MAX_OP_FLOPS),
        out_bytes=_field(raw, "out_bytes", int, f"{where}.out_bytes", limit=MAX_OP_BYTES),
        inputs=tuple(inputs),
        forward_us=_field(raw, "forward_us", float, f"{where}.forward_us", required=False, limit=MAX_OP_MICROS),
        backward_us=_field(raw, "backward_us", float, f"{where}.backward_us", required=False, limit=MAX_OP_MICROS),
    )
