"""Operator DAGs of the zoo models: what the search partitions and the simulator schedules.

`planner.model.zoo` describes each model as an ordered list of layers; the search needs the data
flow between them (which layer's output feeds which), because a tensor that crosses servers
becomes a transfer task (docs/algorithms.md section 6). This module derives that DAG:

- DLRM (Naumov et al. 2019): the bottom MLP is a chain from the dense features; every
  embedding table and the bottom MLP feed the interaction; the top MLP follows.
- NCF (NeuMF): the GMF tables feed the prediction head directly; the MLP tables feed the
  MLP tower, which feeds the head.
- CANDLE Uno: three feature towers (gene, drug1, drug2) feed the head MLP.
- BERT, ResNet-50, VGG16: chains in layer order.

Every operator keeps the zoo's per-sample figures (parameters, forward FLOPs, output
activation bytes; backward = `BACKWARD_FLOPS_RATIO` x forward unless the layer gives its
own). Fused operators
(planner.model.fusion) are `Operator`s too, with ``members`` naming the zoo layers they contain.
An imported model's graph (planner.model.workload_graph) is built of the same `Operator`s, with
its own backward FLOPs and gradient bytes, and its shared parameters (`OpGraph.shared`: tied
weights, each counted by its first reader, its one gradient reduced as
planner.strategy.strategies says).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from contract.graph import SharedParameter

from .zoo import FLOAT_BYTES, Model, get_model

BACKWARD_FLOPS_RATIO = 2.0  # a zoo operator's backward costs 2x its forward FLOPs (the 1:2 rule)


@dataclass(frozen=True)
class Operator:
    """One (possibly fused) operator: per-sample forward FLOPs and output activation bytes.
    ``bwd_flops`` and ``grad_bytes`` are its own backward FLOPs per sample and gradient bytes
    (an imported operator; ``bwd_flops`` also a zoo layer that gives it); None means
    `BACKWARD_FLOPS_RATIO` x forward and float32 gradients."""

    name: str
    kind: str  # dense | conv | attention | embedding | interaction | head | other
    params: int
    flops: float
    out_bytes: int
    inputs: tuple[str, ...] = ()
    members: tuple[str, ...] = ()
    bwd_flops: float | None = None
    grad_bytes: int | None = None

    @property
    def param_bytes(self) -> int:
        return self.grad_bytes if self.grad_bytes is not None else self.params * FLOAT_BYTES

    @property
    def backward_flops(self) -> float:
        """Backward FLOPs per sample."""
        return self.bwd_flops if self.bwd_flops is not None else BACKWARD_FLOPS_RATIO * self.flops

    @property
    def is_embedding(self) -> bool:
        return self.kind == "embedding"

    @property
    def is_exchange(self) -> bool:
        """A trace's all-to-all (planner.model.chakra): every server sends 1/n of ``out_bytes`` to
        every other, whatever the strategy, and the gradients back in the backward pass."""
        return self.kind == "alltoall"


@dataclass(frozen=True)
class OpGraph:
    """A DAG of operators in a topological order (``ops[i]`` only reads from ``ops[:i]``).
    ``shared``: the parameters several of its operators read (contract.graph.SharedParameter:
    ``ops[0]`` counts one in its ``params`` and ``param_bytes``, the others read it too)."""

    model: str
    ops: tuple[Operator, ...]
    shared: tuple[SharedParameter, ...] = ()

    @cached_property
    def index(self) -> dict[str, int]:
        return {op.name: i for i, op in enumerate(self.ops)}

    @cached_property
    def preds(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(self.index[p] for p in op.inputs) for op in self.ops)

    @cached_property
    def succs(self) -> tuple[tuple[int, ...], ...]:
        out: list[list[int]] = [[] for _ in self.ops]
        for i, ps in enumerate(self.preds):
            for p in ps:
                out[p].append(i)
        return tuple(tuple(s) for s in out)

    @cached_property
    def readers(self) -> tuple[tuple[int, ...], ...]:
        """``readers[k]``: the operators reading ``shared[k]``, in graph order."""
        return tuple(tuple(sorted(self.index[name] for name in p.ops)) for p in self.shared)

    @cached_property
    def sharing(self) -> tuple[tuple[int, ...], ...]:
        """``sharing[i]``: the shared parameters operator ``i`` reads (indices into ``shared``)."""
        out: list[list[int]] = [[] for _ in self.ops]
        for k, readers in enumerate(self.readers):
            for i in readers:
                out[i].append(k)
        return tuple(tuple(ks) for ks in out)

    @cached_property
    def shared_counted(self) -> tuple[int, ...]:
        """Bytes of shared parameters each operator counts in its ``param_bytes``."""
        out = [0] * len(self.ops)
        for p in self.shared:
            out[self.index[p.ops[0]]] += p.param_bytes
        return tuple(out)

    @cached_property
    def tables(self) -> tuple[int, ...]:
        """The embedding tables a strategy may place on servers: every embedding operator but
        one that shares a parameter with an operator that is not a table (a GPT's token
        embedding tied to its output projection: the projection needs the weight on every
        server, so the table is there too)."""
        return tuple(
            i
            for i, op in enumerate(self.ops)
            if op.is_embedding and all(self.ops[j].is_embedding for k in self.sharing[i] for j in self.readers[k])
        )

    @property
    def params(self) -> int:
        return sum(op.params for op in self.ops)

    @property
    def flops(self) -> float:
        return sum(op.flops for op in self.ops)

    @property
    def param_bytes(self) -> int:
        return sum(op.param_bytes for op in self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    def validate(self) -> None:
        """Raise ValueError unless names are unique, every input precedes its reader and
        every shared parameter is read by two or more of the operators, counted by the first."""
        seen: set[str] = set()
        for op in self.ops:
            if op.name in seen:
                raise ValueError(f"duplicate operator {op.name!r}")
            for p in op.inputs:
                if p not in seen:
                    raise ValueError(f"{op.name!r} reads {p!r}, which does not precede it")
            seen.add(op.name)
        for p in self.shared:
            if len(set(p.ops)) != len(p.ops) or len(p.ops) < 2 or not seen.issuperset(p.ops):
                raise ValueError(f"shared parameter {p.name!r}: readers {p.ops!r} are not two or more operators")
        for i, counted in enumerate(self.shared_counted):
            if counted > self.ops[i].param_bytes:
                raise ValueError(f"{self.ops[i].name!r} counts fewer bytes than its shared parameters")


def _edges(model: Model) -> dict[str, tuple[str, ...]]:
    """Inputs of every layer of ``model`` by name (see the module docstring)."""
    names = [l.name for l in model.layers]
    inputs: dict[str, tuple[str, ...]] = {}

    def chain(seq: list[str], first_inputs: tuple[str, ...] = ()) -> None:
        for i, name in enumerate(seq):
            inputs[name] = first_inputs if i == 0 else (seq[i - 1],)

    if model.name == "dlrm":
        tables = [n for n in names if n.startswith("emb")]
        bottom = [n for n in names if n.startswith("bot")]
        top = [n for n in names if n.startswith("top")]
        for t in tables:
            inputs[t] = ()
        chain(bottom)
        inputs["interaction"] = tuple(tables) + (bottom[-1],)
        chain(top, ("interaction",))
    elif model.name == "ncf":
        gmf = [n for n in names if n.endswith("_gmf")]
        mlp_tables = [n for n in names if n.endswith("_mlp")]
        mlp = [n for n in names if n.startswith("mlp")]
        for t in gmf + mlp_tables:
            inputs[t] = ()
        chain(mlp, tuple(mlp_tables))
        inputs["predict"] = tuple(gmf) + (mlp[-1],)
    elif model.name == "candle":
        heads = [n for n in names if n.startswith("head")]
        towers: dict[str, list[str]] = {}
        for n in names:
            if not n.startswith("head"):
                towers.setdefault(n.rsplit("_", 1)[0], []).append(n)
        for seq in towers.values():
            chain(seq)
        chain(heads, tuple(seq[-1] for seq in towers.values()))
    else:
        chain(names)
    return inputs


def model_graph(model: Model | str) -> OpGraph:
    """The operator DAG of a zoo model, in a topological order."""
    if isinstance(model, str):
        model = get_model(model)
    inputs = _edges(model)
    ops = {
        l.name: Operator(l.name, l.kind, l.params, l.flops, l.out_bytes, inputs[l.name], (l.name,), l.bwd_flops)
        for l in model.layers
    }
    order: list[str] = []
    placed: set[str] = set()
    pending = [l.name for l in model.layers]
    while pending:  # stable topological sort: zoo order where the data flow allows
        for name in pending:
            if all(p in placed for p in ops[name].inputs):
                order.append(name)
                placed.add(name)
                pending.remove(name)
                break
        else:  # pragma: no cover - the edge tables above are acyclic
            raise ValueError(f"{model.name}: cyclic operator graph")
    graph = OpGraph(model.name, tuple(ops[n] for n in order))
    graph.validate()
    return graph
