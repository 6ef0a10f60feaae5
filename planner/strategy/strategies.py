"""Parallelization strategies: one choice per (fused) operator, and the traffic they cause.

The state of the MCMC search (docs/algorithms.md section 5). Every server processes
``batch`` samples per iteration; a strategy decides, per operator:

- dense operators (`OpChoice.mp` = m): tensor-parallel over blocks of m consecutive
  servers; the block's m x batch samples are processed by all m members, each holding 1/m of
  the weights. Shard s of every block is replicated on the coset {s, s + m, s + 2m, ...},
  so its gradients AllReduce in a group of n/m on a coset, where TopoOpt's sub-group rings
  apply (docs/algorithms.md section 1). Data-parallel degree = n/m; m = 1 is pure data
  parallelism. Per-server compute is the same for every m (m x batch samples, 1/m of the
  work each); what changes is the traffic:
  * forward: the block all-gathers the op's output (a ring all-gather over the block:
    each member forwards (m-1) pieces of out_bytes x batch to the next member), and
    all-gathers its input first when the producer's layout is different (a different m,
    or an embedding table);
  * backward: the mirror image (reduce-scatter of the same sizes, reverse direction);
  * gradients: m AllReduce groups of n/m members, param_bytes/m each.
- embedding tables (`OpChoice.owner`, `OpChoice.shards`): ``owner = -1`` replicates the
  table on every server (data parallel; its dense gradient is AllReduced over all n), else
  the table is row-sharded over ``shards`` servers {owner + j n/shards} (table-wise
  placement when shards = 1): each shard serves the lookups of the samples whose rows it
  holds (out_bytes x batch / shards to every other server in the forward pass, the same
  gradients back in the backward pass) and performs those lookups (n x batch / shards).
- a trace's all-to-all (kind ``alltoall``, planner.model.chakra): every server sends
  out_bytes x batch / n to every other in the forward pass and the gradients back, whatever
  the choice.
- a shared parameter (tied weights, `OpGraph.shared`: a GPT's token embedding and its output
  projection) is one parameter with one gradient, reduced once over the servers that hold any
  of its readers (`shared_syncs`): in the layout of its least-sharded copy (the smallest m
  among its dense readers, 1 for a replicated table), its bytes / m per coset group; nothing
  when every reader is a table placed on the same servers (one copy of each row); over all n
  servers when they are tables placed apart. The reduction is issued with the first reader in
  graph order that holds it in that layout (the last whose backward adds to the gradient; a
  placed table, which reduces nothing of its own, may issue it). The `hybrid` strategy places
  only tables that share no parameter with a dense operator (`OpGraph.tables`): a table tied to
  the output projection is on every server anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contract.errors import UsageError
from contract.physics import compute_seconds
from contract.plan import AllReduceGroup, MPFlow, OperatorChoice, Placement, Plan, TrafficDemand, Workload

from ..model.fusion import regroup
from ..model.opgraph import Operator, OpGraph


@dataclass(frozen=True)
class OpChoice:
    """The parallel configuration of one operator (see the module docstring)."""

    mp: int = 1
    owner: int = -1
    shards: int = 1

    def label(self, op: Operator) -> str:
        if op.is_embedding:
            if self.owner < 0:
                return "replicated"
            return f"server {self.owner}" if self.shards == 1 else f"{self.shards} shards from {self.owner}"
        return "data" if self.mp == 1 else f"mp{self.mp}"


Strategy = tuple[OpChoice, ...]


def mp_options(n: int, max_mp: int = 32) -> list[int]:
    """Tensor-parallel degrees allowed on n servers: divisors of n up to ``max_mp`` (< n)."""
    return [m for m in range(1, min(n - 1, max_mp) + 1) if n % m == 0]


def shard_options(n: int, max_shards: int = 16) -> list[int]:
    return [s for s in range(1, min(n, max_shards) + 1) if n % s == 0]


def data_parallel(graph: OpGraph) -> Strategy:
    """Every operator replicated on all servers (tables included)."""
    return tuple(OpChoice() for _ in graph.ops)


def table_placement_start(graph: OpGraph, n: int) -> Strategy:
    """The usual DLRM-style hybrid: tables placed largest first on the least-loaded server,
    dense layers data parallel (the `hybrid` strategy). A table that shares a parameter with
    a dense operator (`OpGraph.tables`) stays replicated, as that operator needs it everywhere."""
    load = [0] * n
    owners: dict[int, int] = {}
    for i in sorted(graph.tables, key=lambda i: (-graph.ops[i].params, graph.ops[i].name)):
        s = min(range(n), key=lambda s: (load[s], s))
        owners[i] = s
        load[s] += graph.ops[i].params
    return tuple(OpChoice(owner=owners[i]) if i in owners else OpChoice() for i in range(len(graph)))


def sharded_start(graph: OpGraph, mp_degree: int) -> Strategy:
    """The dense `hybrid` strategy: the largest operators, holding half of the parameters,
    tensor-parallel over blocks of ``mp_degree`` servers; the others data parallel."""
    sharded: set[int] = set()
    covered = 0
    for i in sorted(range(len(graph)), key=lambda i: -graph.ops[i].params):
        if covered >= graph.params / 2:
            break
        sharded.add(i)
        covered += graph.ops[i].params
    return tuple(OpChoice(mp=mp_degree) if i in sharded else OpChoice() for i in range(len(graph)))


FIXED_STRATEGIES = ("data", "hybrid")


def fixed_strategy(graph: OpGraph, n: int, name: str, mp_degree: int = 2) -> Strategy:
    """``data``: every operator replicated. ``hybrid``: models with embedding tables place
    each table on one server (`table_placement_start`); dense models, and models whose only
    tables are tied to dense operators, shard their largest operators (`sharded_start`)."""
    if name == "data":
        return data_parallel(graph)
    if name == "hybrid":
        if graph.tables:
            return table_placement_start(graph, n)
        return sharded_start(graph, mp_degree)
    raise ValueError(f"strategy {name!r} is not one of {', '.join(FIXED_STRATEGIES)} (search builds its own)")


def placement_of(graph: OpGraph, strategy: Strategy) -> Placement:
    """The strategy as the plan stores it (`contract.plan.Placement`)."""
    return Placement(tuple(OperatorChoice(op.members, c.mp, c.owner, c.shards) for op, c in zip(graph.ops, strategy)))


def strategy_of(base: OpGraph, placement: Placement) -> tuple[OpGraph, Strategy]:
    """The operator graph and strategy a plan's placement describes (its inverse of
    `placement_of`): the job's graph ``base`` (`planner.model.workload_graph.workload_graph`)
    regrouped as the placement's operators."""
    if not placement.operators:
        return base, data_parallel(base)
    graph = regroup(base, [op.layers for op in placement.operators])
    by_layers = {op.layers: op for op in placement.operators}
    return graph, tuple(OpChoice(c.mp, c.owner, c.shards) for c in (by_layers[op.members] for op in graph.ops))


def plan_workload(plan: Plan) -> Workload:
    """The plan's `Workload`; a plan without one (a bare network, or a plan file written before
    plans recorded it) is a one-line `UsageError`."""
    if plan.workload is None:
        raise UsageError(
            f"the {plan.topology} plan records no workload (model, batch, device rate), so it has no "
            "training iteration: plan it again from its scenario"
        )
    return plan.workload


def layout(op: Operator, choice: OpChoice) -> tuple[str, int]:
    """A hashable description of how an operator's output is distributed."""
    if op.is_embedding:
        return ("emb", choice.owner if choice.owner < 0 else -2)
    return ("dense", choice.mp)


def shard_servers(n: int, choice: OpChoice) -> np.ndarray:
    step = n // choice.shards
    return (choice.owner + step * np.arange(choice.shards)) % n


@dataclass(frozen=True)
class Flows:
    """A set of concurrent transfers, as arrays (src, dst, bytes)."""

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray

    @staticmethod
    def empty() -> Flows:
        z = np.zeros(0, dtype=np.int64)
        return Flows(z, z, np.zeros(0))

    def __len__(self) -> int:
        return len(self.src)

    def reversed(self) -> Flows:
        return Flows(self.dst, self.src, self.nbytes)

    def total(self) -> float:
        return float(self.nbytes.sum())


def block_allgather(n: int, m: int, nbytes: float) -> Flows:
    """Ring all-gather inside every block of m consecutive servers: each member sends
    (m-1) pieces of ``nbytes`` to the next member of its block (u -> u+1, the last member
    back to the first), as NCCL's ring all-gather does. Every member thus sends and receives
    (m-1) x nbytes; on a TopoOpt topology most ring edges are +1 cables."""
    if m <= 1 or nbytes <= 0:
        return Flows.empty()
    u = np.arange(n)
    block = (u // m) * m
    dst = block + (u - block + 1) % m
    return Flows(u, dst, np.full(n, float(nbytes) * (m - 1)))


def owner_fanout(n: int, owners: np.ndarray, nbytes: float) -> Flows:
    """Every owner sends ``nbytes`` to every other server."""
    src = np.repeat(owners, n)
    dst = np.tile(np.arange(n), len(owners))
    keep = src != dst
    return Flows(src[keep], dst[keep], np.full(int(keep.sum()), float(nbytes)))


@dataclass(frozen=True)
class OpTraffic:
    """Everything an operator puts on the network or the processors in one iteration."""

    fwd_in: Flows  # before its forward compute (input all-gather)
    fwd_out: Flows  # after its forward compute, before its consumers (output all-gather, lookups)
    compute: np.ndarray  # forward seconds per server
    ar_layout: int  # m of its AllReduce groups (cosets of step m); 0 = no AllReduce
    ar_bytes: float  # bytes each of its m groups AllReduces
    backward: np.ndarray  # backward seconds per server (2x forward for a zoo operator)


def _copies(op: Operator, choice: OpChoice) -> int | None:
    """m of the coset layout an operator's parameters are held in (1: whole on every server;
    m: 1/m on each), or None when they are not replicated (a placed table, an all-to-all)."""
    if op.is_exchange or (op.is_embedding and choice.owner >= 0):
        return None
    return 1 if op.is_embedding else choice.mp


def shared_syncs(graph: OpGraph, strategy: Strategy) -> tuple[tuple[int, int], ...]:
    """Per shared parameter of ``graph`` (`OpGraph.shared`): (the operator that issues its
    gradient's reduction, m of the reduction's coset layout, 0 for none), as the module
    docstring says. A placed table issues the reductions of one layout at most."""
    out: list[tuple[int, int]] = []
    issued: dict[int, int] = {}  # a placed table -> the layout it issues
    for readers in graph.readers:
        held = [m for i in readers if (m := _copies(graph.ops[i], strategy[i])) is not None]
        if held:
            m = min(held)
        elif len({(strategy[i].owner, strategy[i].shards) for i in readers}) == 1:
            out.append((readers[0], 0))  # every reader is a table placed on the same servers
            continue
        else:
            m = 1  # tables placed apart: every server may hold a copy
        issuer = next(
            (
                i
                for i in readers
                if _copies(graph.ops[i], strategy[i]) == m
                or (graph.ops[i].is_embedding and strategy[i].owner >= 0 and issued.get(i, m) == m)
            ),
            readers[0],
        )
        if _copies(graph.ops[issuer], strategy[issuer]) is None:
            issued[issuer] = m
        out.append((issuer, m))
    return tuple(out)


def _shared_sync(graph: OpGraph, strategy: Strategy, i: int) -> tuple[int, float]:
    """(layout, bytes per group) of the shared parameters whose reduction operator ``i``
    issues: (0, 0.0) for none."""
    if not graph.sharing[i]:
        return 0, 0.0
    syncs = shared_syncs(graph, strategy)
    layout, nbytes = 0, 0.0
    for k in graph.sharing[i]:
        issuer, m = syncs[k]
        if issuer == i and m:
            layout, nbytes = m, nbytes + graph.shared[k].param_bytes / m
    return layout, nbytes


def op_traffic(graph: OpGraph, strategy: Strategy, i: int, n: int, batch: int, device_tflops: float) -> OpTraffic:
    """The traffic and compute of operator ``i`` under ``strategy`` (module docstring): its
    gradients are its own parameters' (``param_bytes`` less the shared ones it counts) and
    those of the shared parameters whose reduction it issues."""
    op, choice = graph.ops[i], strategy[i]
    forward, backward = (compute_seconds(f, batch, device_tflops) for f in (op.flops, op.backward_flops))
    own = op.param_bytes - graph.shared_counted[i]
    shared_layout, shared_bytes = _shared_sync(graph, strategy, i)
    if shared_layout and n // shared_layout <= 1:  # a group of one server reduces nothing
        shared_layout, shared_bytes = 0, 0.0
    if op.is_exchange:  # a trace's all-to-all, whatever the choice
        everyone = np.arange(n)
        return OpTraffic(
            Flows.empty(),
            owner_fanout(n, everyone, op.out_bytes * batch / n),
            np.zeros(n),
            shared_layout,
            shared_bytes,
            np.zeros(n),
        )
    if op.is_embedding:
        if choice.owner < 0:
            share = np.ones(n)
            return OpTraffic(
                Flows.empty(), Flows.empty(), forward * share, 1, float(own) + shared_bytes, backward * share
            )
        owners = shard_servers(n, choice)
        share = np.zeros(n)
        share[owners] = n / choice.shards
        lookups = owner_fanout(n, owners, op.out_bytes * batch / choice.shards)
        return OpTraffic(Flows.empty(), lookups, forward * share, shared_layout, shared_bytes, backward * share)
    m = choice.mp
    compute = np.full(n, forward)
    fwd_in = Flows.empty()
    if m > 1:
        in_bytes = sum(
            graph.ops[p].out_bytes for p in graph.preds[i] if layout(graph.ops[p], strategy[p]) != ("dense", m)
        )
        fwd_in = block_allgather(n, m, in_bytes * batch)
    fwd_out = block_allgather(n, m, op.out_bytes * batch) if m > 1 and graph.succs[i] else Flows.empty()
    groups = n // m
    return OpTraffic(fwd_in, fwd_out, compute, m if groups > 1 else 0, own / m + shared_bytes, np.full(n, backward))


def coset(n: int, m: int, s: int) -> tuple[int, ...]:
    return tuple(range(s, n, m))


@dataclass(frozen=True)
class TrafficArrays:
    """A strategy's per-iteration traffic in array form (cheap to build and compare).

    ``groups[m]`` = bytes each of the m coset groups {s, s+m, ...} AllReduces;
    ``pair`` = n x n model-parallel bytes (forward plus the mirrored backward)."""

    n: int
    groups: dict[int, float]
    pair: np.ndarray

    def demand(self) -> TrafficDemand:
        """As a `TrafficDemand` (AllReduce groups by coset, MP flows per ordered pair)."""
        ar = []
        for m in sorted(self.groups):  # m = 1 (the full group) first
            b = int(round(self.groups[m]))
            if b > 0:
                ar += [AllReduceGroup(coset(self.n, m, s), b) for s in range(m)]
        src, dst = np.nonzero(self.pair)
        nbytes = np.rint(self.pair[src, dst]).astype(np.int64)
        mp = tuple(map(MPFlow, src.tolist(), dst.tolist(), nbytes.tolist()))
        return TrafficDemand(tuple(ar), mp)


def _op_pairs(
    graph: OpGraph, strategy: Strategy, i: int, n: int, batch: int
) -> tuple[int, float, np.ndarray, np.ndarray]:
    """(AllReduce layout, bytes, pair indices, bytes) of operator i's traffic."""
    t = op_traffic(graph, strategy, i, n, batch, 1.0)  # traffic only: any device rate
    idx: list[np.ndarray] = []
    val: list[np.ndarray] = []
    for f in (t.fwd_in, t.fwd_out):  # forward, and the mirrored backward transfer
        if len(f):
            idx += [f.src * n + f.dst, f.dst * n + f.src]
            val += [f.nbytes, f.nbytes]
    z = np.zeros(0)
    return (
        t.ar_layout,
        t.ar_bytes,
        np.concatenate(idx) if idx else z.astype(np.int64),
        np.concatenate(val) if val else z,
    )


def traffic_arrays(graph: OpGraph, strategy: Strategy, n: int, batch: int, cache: dict | None = None) -> TrafficArrays:
    """The AllReduce bytes per coset layout and the MP pair matrix of ``strategy``.
    ``cache`` (any dict kept between calls for one graph, n and batch) memoizes the
    per-operator pieces, which only depend on the operator's and its producers' choices (and,
    for a reader of a shared parameter, on its readers' choices)."""
    groups: dict[int, float] = {}
    idx: list[np.ndarray] = []
    val: list[np.ndarray] = []
    tied = tuple(strategy[r] for readers in graph.readers for r in readers)  # what shared reductions depend on
    for i in range(len(graph)):
        key = (i, strategy[i], tuple(strategy[p] for p in graph.preds[i]), tied if graph.sharing[i] else ())
        piece = cache.get(key) if cache is not None else None
        if piece is None:
            piece = _op_pairs(graph, strategy, i, n, batch)
            if cache is not None:
                cache[key] = piece
        layout_m, ar_bytes, pi, pv = piece
        if layout_m and ar_bytes > 0:
            groups[layout_m] = groups.get(layout_m, 0.0) + ar_bytes
        if len(pi):
            idx.append(pi)
            val.append(pv)
    pair = np.zeros(n * n)
    if idx:
        pair = np.bincount(np.concatenate(idx), weights=np.concatenate(val), minlength=n * n)
    return TrafficArrays(n, groups, pair.reshape(n, n))


def strategy_demand(graph: OpGraph, strategy: Strategy, n: int, batch: int) -> TrafficDemand:
    """The per-iteration traffic of ``strategy`` for TopologyFinder (docs/algorithms.md section 2, step 1):
    one AllReduce group per coset and layout, MP bytes merged by ordered pair."""
    return traffic_arrays(graph, strategy, n, batch).demand()


def describe(graph: OpGraph, strategy: Strategy) -> dict[str, str]:
    """Operator name -> its choice, for plans and reports."""
    return {op.name: c.label(op) for op, c in zip(graph.ops, strategy)}
