"""Import a Chakra execution trace (ASTRA-sim's workload format, MLCommons' ``mlc-chakra``).

``[workload] chakra = "trace.et"`` (or a folder of per-rank traces ``*.et``, of which the
first by name, rank 0, is the job: data parallelism runs the same trace on every rank).
A PyTorch trace (torch's execution-trace observer, converted by ``chakra_converter
PyTorch``) lists one iteration's nodes in execution order: the forward pass, the backward
pass (autograd's ``XBackward0`` nodes), the gradient collectives and the optimizer. The
converter keeps each node's autograd sequence number (``seq_id``), which ties a backward
node to the forward node that recorded it; it does not keep the call nesting. The import:

- forward operators: every forward node that opened a new autograd sequence number (a
  differentiable operator); the nodes after it up to the next such node (its internals:
  views, copies, the composite's inner calls) belong to it. Dependencies follow the trace's
  ``data_deps`` (execution order);
- backward: every ``XBackward0`` node joins the forward operator of its ``seq_id``, and
  the nodes after it (the backward kernels) with it;
- FLOPs: nodes torch's FLOP counter has a formula for (matrix products, convolutions,
  attention) re-run on ``meta`` tensors of the recorded shapes under
  ``torch.utils.flop_counter.FlopCounterMode`` (a node returning the tensor the last counted
  node returned, a composite's inner call, is not counted twice; only the last, as freed
  tensors' ids are reused);
- durations: when the trace has them (``duration_micros``, exclusive time, from a linked
  Kineto trace), each operator's forward and backward nodes add up to its ``forward_us`` /
  ``backward_us``, which override the FLOP model;
- collectives: AllReduce nodes (``COMM_COLL_NODE`` with ``comm_type = ALL_REDUCE``, or in a
  host-only trace such as a CPU run on gloo, ``c10d::allreduce_``) become gradient bytes of
  the operator whose backward ran just before them: with data parallelism the job's
  AllReduce is then exactly the trace's. A forward all-to-all (``ALL_TO_ALL``, or
  ``c10d::alltoall_`` / ``c10d::alltoall_base_``) becomes an operator of kind ``alltoall``
  whose output is the bytes each rank sends: the planner moves 1/n of them from every
  server to every other, and their gradients back in the backward pass (which is how it
  models the backward's all-to-all, the forward's mirror). Broadcasts (DDP's start-up
  sync) and the optimizer are not part of the iteration the planner models; any other
  collective is refused, naming it;
- the micro-batch: the first dimension of the first operator's first tensor input.

A file that is not a Chakra trace is one `UsageError` line naming it; so is a folder, a FIFO
or a device where a trace file should be, a file over `MAX_TRACE_BYTES`, and a gzipped trace
that decompresses to more than `MAX_TRACE_UNZIPPED_BYTES` (decompressed as a stream under
that cap: a gzip bomb stops there, not at the end of memory).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.errors import UsageError
from contract.files import gunzip_capped, read_capped
from contract.graph import GraphOperator, OperatorGraph

from .model_import import INSTALL_HINT

COLLECTIVE_HOST_OPS = {
    "c10d::allreduce_": "allreduce",
    "c10d::alltoall_": "alltoall",
    "c10d::alltoall_base_": "alltoall",
}
BACKWARD_WRAPPER = "autograd::engine::evaluate_function"
# operators that only look at a tensor differently: an operator is named after its first other node
VIEW_OPS = {"as_strided", "view", "t", "transpose", "expand", "detach", "reshape", "unsqueeze", "squeeze", "permute"}
VIEW_OPS |= {"empty", "copy_", "to", "_to_copy", "empty_strided"}
_BACKWARD_NODE = re.compile(r"^\w+Backward\d+$")
# A trace file's size, as stored and once gunzipped. One training iteration of a large model
# is tens of MB of protobuf (each node a few hundred bytes); parsing holds several times the
# decompressed size in memory, so the decompressed cap is what bounds memory.
MAX_TRACE_BYTES = 256 << 20
MAX_TRACE_UNZIPPED_BYTES = 512 << 20


@dataclass
class _Node:
    id: int
    name: str
    type: int
    data_deps: tuple[int, ...]
    duration_us: float
    seq_id: int
    inputs: list[tuple[str, Any, Any]]  # (type, shape, value) per input
    outputs: list[tuple[str, Any, Any]]
    comm_type: int = -1
    comm_size: int = 0


@dataclass
class _Op:
    name: str
    first: _Node  # the node it is named after (its first that does more than view or copy a tensor)
    fwd_flops: float = 0.0
    bwd_flops: float = 0.0
    fwd_us: float = 0.0
    bwd_us: float = 0.0
    grad_bytes: int = 0
    grad_elems: int = 0
    deps: set[int] = field(default_factory=set)  # node ids it follows
    nodes: set[int] = field(default_factory=set)
    exchange_bytes: int = -1  # a forward all-to-all: the bytes each rank sends (-1: a compute operator)


def import_chakra(path: str | Path) -> OperatorGraph:
    """The operator graph of the Chakra trace at ``path`` (a file, or a folder of per-rank
    traces: rank 0's, the first by name, after checking that every one is a trace)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.et")) or sorted(p for p in path.iterdir() if p.is_file())
        if not files:
            raise UsageError(f"{path}: a folder without Chakra traces (*.et)")
        for other in files[1:]:
            _read_nodes(other)  # every rank's file must be a trace
        trace = files[0]
    else:  # a file, or what _read_nodes refuses in one line (missing, a FIFO, a device)
        trace = path
    nodes = _read_nodes(trace)
    return _graph(nodes, trace)


def _pb() -> Any:
    try:
        from chakra.schema.protobuf import et_def_pb2
    except ModuleNotFoundError:
        raise UsageError(f"a Chakra trace needs the mlc-chakra package, not installed here: {INSTALL_HINT}") from None
    return et_def_pb2


def _messages(raw: bytes) -> list[bytes]:
    """Length-prefixed (varint) messages, as Chakra writes them."""
    out, pos = [], 0
    while pos < len(raw):
        size = shift = 0
        while True:
            if pos >= len(raw) or shift > 63:
                raise ValueError("truncated length prefix")
            b = raw[pos]
            pos += 1
            size |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if size == 0 or pos + size > len(raw):
            raise ValueError("a message runs past the end of the file")
        out.append(raw[pos : pos + size])
        pos += size
    return out


def _read_nodes(path: Path) -> list[_Node]:
    raw = read_capped(path, MAX_TRACE_BYTES, "Chakra trace")
    if raw[:2] == b"\x1f\x8b":
        raw = gunzip_capped(raw, MAX_TRACE_UNZIPPED_BYTES, path, "Chakra trace")
    pb = _pb()
    try:
        messages = _messages(raw)
        if len(messages) < 2:
            raise ValueError("no nodes")
        meta = pb.GlobalMetadata()
        meta.ParseFromString(messages[0])
        nodes = []
        for m in messages[1:]:
            n = pb.Node()
            n.ParseFromString(m)
            nodes.append(_node(n, pb))
    except Exception as err:
        raise UsageError(f"{path}: not a Chakra execution trace ({err})") from None
    ids = [n.id for n in nodes]
    if len(set(ids)) != len(ids) or not any(n.type == pb.COMP_NODE for n in nodes):
        raise UsageError(f"{path}: not a Chakra execution trace (no compute nodes, or repeated node ids)")
    return nodes


def _io(info: Any) -> list[tuple[str, Any, Any]]:
    def parse(text: str) -> list[Any]:
        if not text:
            return []
        value = ast.literal_eval(text)
        return value if isinstance(value, list) else []

    types, shapes, values = parse(info.types), parse(info.shapes), parse(info.values)
    return [(str(t), s, v) for t, s, v in zip(types, shapes, values)]


def _node(n: Any, pb: Any) -> _Node:
    attrs = {a.name: a for a in n.attr}
    seq = attrs["seq_id"].int64_val if "seq_id" in attrs else -1
    node = _Node(n.id, n.name, n.type, tuple(n.data_deps), float(n.duration_micros), seq, _io(n.inputs), _io(n.outputs))
    if n.type == pb.COMM_COLL_NODE:
        node.comm_type = attrs["comm_type"].int64_val if "comm_type" in attrs else -1
        node.comm_size = attrs["comm_size"].int64_val if "comm_size" in attrs else 0
    return node


def _tensors(io: list[tuple[str, Any, Any]]) -> list[tuple[tuple[int, int], int, int]]:
    """((tensor id, storage id), elements, element bytes) of every tensor in ``io``."""
    out = []
    for typ, _, value in io:
        if typ.startswith("Tensor(") and isinstance(value, list) and len(value) >= 5:
            out.append(((int(value[0]), int(value[1])), int(value[3]), int(value[4])))
        elif typ.startswith("GenericList[Tensor") and isinstance(value, list):
            out += [((int(v[0]), int(v[1])), int(v[3]), int(v[4])) for v in value if isinstance(v, list)]
    return out


def _graph(nodes: list[_Node], trace: Path) -> OperatorGraph:
    pb = _pb()
    nodes = sorted(nodes, key=lambda n: n.id)  # execution order (ids are given as operators start)
    has_coll_nodes = any(n.type == pb.COMM_COLL_NODE for n in nodes)
    ops: list[_Op] = []
    by_seq: dict[int, _Op] = {}
    owner: dict[int, _Op] = {}  # node id -> operator
    counted: set[tuple[int, int]] = set()  # the outputs of the last node counted
    phase = "before"
    current: _Op | None = None
    other_collectives: dict[str, int] = {}
    exchanges: list[int] = []  # forward all-to-all nodes the next operator waits for
    for n in nodes:
        if n.name.startswith("Optimizer.step"):
            phase = "optimizer"
        if phase == "optimizer":
            continue
        if n.name.startswith(BACKWARD_WRAPPER) or _BACKWARD_NODE.match(n.name):
            phase = "backward"
        kind = _collective(n, pb, has_coll_nodes)
        if kind is not None:
            nbytes, elems = _collective_size(n, kind, pb)
            if kind == "allreduce" and current is not None:
                current.grad_bytes += nbytes
                current.grad_elems += elems
            elif kind == "alltoall" and phase == "forward":  # the backward's is its mirror
                exchange = _Op(f"alltoall_{n.id}", n, exchange_bytes=nbytes)
                exchange.deps.update(d for d in n.data_deps if d in owner)
                ops.append(exchange)
                owner[n.id] = exchange
                exchanges.append(n.id)
            elif kind not in ("allreduce", "alltoall", "broadcast"):
                other_collectives[kind] = other_collectives.get(kind, 0) + nbytes
            continue
        if n.type != pb.COMP_NODE or n.name.startswith(("gloo:", "nccl:", "record_param_comms")):
            continue
        if phase == "before" and n.seq_id >= 0 and n.name.startswith("aten::"):
            phase = "forward"
        if phase == "forward":
            if n.seq_id >= 0 and n.seq_id not in by_seq:  # the autograd counter moved: a new operator
                current = _Op("", n)
                current.deps.update(d for d in n.data_deps if d in owner)
                current.deps.update(exchanges)  # what follows an all-to-all reads what it brought
                exchanges.clear()
                ops.append(current)
            if current is None:
                continue
            if n.seq_id >= 0:
                by_seq.setdefault(n.seq_id, current)
            if not current.name and n.name.removeprefix("aten::") not in VIEW_OPS:
                current.name, current.first = f"{n.name.removeprefix('aten::')}_{n.id}", n
            current.fwd_flops += _flops(n, counted)
            current.fwd_us += n.duration_us
        elif phase == "backward":
            if _BACKWARD_NODE.match(n.name) and n.seq_id in by_seq:
                current = by_seq[n.seq_id]
            if current is None:
                current = ops[-1] if ops else None
            if current is None:
                continue
            current.bwd_flops += _flops(n, counted)
            current.bwd_us += n.duration_us
        else:
            continue
        assert current is not None
        owner[n.id] = current
        current.nodes.add(n.id)
    if not ops:
        raise UsageError(f"{trace}: a Chakra trace without forward operators (no node with an autograd seq_id)")
    if other_collectives:
        kinds = ", ".join(f"{k} {v:,} bytes" for k, v in sorted(other_collectives.items()))
        raise UsageError(
            f"{trace}: collectives the planner cannot take from a trace: {kinds} (AllReduce, all-to-all only)"
        )
    for op in ops:
        op.name = op.name or f"{op.first.name.removeprefix('aten::')}_{op.first.id}"
    timed = any(op.fwd_us or op.bwd_us for op in ops)
    index = {id(op): i for i, op in enumerate(ops)}
    out: list[GraphOperator] = []
    for i, op in enumerate(ops):
        inputs = sorted({index[id(owner[d])] for d in op.deps if d in owner and index[id(owner[d])] < i})
        exchange = op.exchange_bytes >= 0
        out.append(
            GraphOperator(
                op.name,
                "alltoall" if exchange else "dense" if op.fwd_flops else "other",
                op.grad_elems,
                op.grad_bytes,
                op.fwd_flops,
                op.bwd_flops,
                op.exchange_bytes if exchange else sum(e * b for _, e, b in _tensors(op.first.outputs)),
                tuple(ops[j].name for j in inputs),
                op.fwd_us if timed else None,
                op.bwd_us if timed else None,
            )
        )
    first_inputs = [s for t, s, _ in ops[0].first.inputs if t.startswith("Tensor(") and isinstance(s, list) and s]
    batch = int(first_inputs[0][0]) if first_inputs and first_inputs[0][0] > 0 else 1
    return OperatorGraph(trace.stem, f"chakra:{trace}", batch, tuple(out))


def _collective(n: _Node, pb: Any, has_coll_nodes: bool) -> str | None:
    """``allreduce`` / ``alltoall`` / ``broadcast`` / another kind for a collective node; None
    otherwise. A trace with device collectives (COMM_COLL_NODE) is read from those alone."""
    if has_coll_nodes:
        if n.type != pb.COMM_COLL_NODE:
            return "broadcast" if n.name.startswith("c10d::") else None  # host launchers of the same
        names = {pb.ALL_REDUCE: "allreduce", pb.ALL_TO_ALL: "alltoall", pb.BROADCAST: "broadcast"}
        return names.get(n.comm_type, f"collective type {n.comm_type}")
    if n.name in COLLECTIVE_HOST_OPS:
        return COLLECTIVE_HOST_OPS[n.name]
    if n.name.startswith("c10d::"):
        return "broadcast" if "broadcast" in n.name else n.name.removeprefix("c10d::").rstrip("_")
    return None


def _collective_size(n: _Node, kind: str, pb: Any) -> tuple[int, int]:
    """(bytes, elements) a collective node moves per rank."""
    if n.type == pb.COMM_COLL_NODE:
        return n.comm_size, n.comm_size // 4
    tensors = _tensors(n.inputs)
    return sum(e * b for _, e, b in tensors), sum(e for _, e, _ in tensors)


_DTYPES = {
    "float": "float32",
    "double": "float64",
    "c10::Half": "float16",
    "c10::BFloat16": "bfloat16",
    "Half": "float16",
}


def _flops(n: _Node, counted: set[tuple[int, int]]) -> float:
    """FLOPs of node ``n`` by torch's FLOP counter on meta tensors of its recorded shapes (0
    for operators without a formula, and for a composite's inner call already counted)."""
    try:
        import torch
        from torch.utils.flop_counter import FlopCounterMode, flop_registry
    except ModuleNotFoundError:
        raise UsageError(f"counting a Chakra trace's FLOPs needs torch, not installed here: {INSTALL_HINT}") from None
    if not n.name.startswith("aten::"):
        return 0.0
    packet = getattr(torch.ops.aten, n.name.removeprefix("aten::"), None)
    if packet is None or packet not in flop_registry:
        return 0.0
    outs = {key for key, _, _ in _tensors(n.outputs)}
    if outs & counted:
        return 0.0
    args: list[Any] = []
    for typ, shape, value in n.inputs:
        if typ.startswith("Tensor("):
            dtype = getattr(torch, _DTYPES.get(typ[7:-1], "float32"), torch.float32)
            args.append(torch.empty(shape, dtype=dtype, device="meta"))
        elif typ in ("Int", "Double", "Bool", "None"):
            args.append(value if typ != "None" else None)
        elif typ.startswith("GenericList[Int]"):
            args.append(list(value))
        else:
            return 0.0
    tensors = 0
    while tensors < len(args) and isinstance(args[tensors], torch.Tensor):
        tensors += 1
    for call in (args, args[:tensors]):  # keyword-only scalars (addmm's beta, alpha) are recorded in line
        try:
            with FlopCounterMode(display=False) as counter:
                packet(*call)
        except Exception:  # arguments this overload does not take
            continue
        counted.clear()
        counted.update(outs)
        return float(counter.get_total_flops())
    return 0.0
