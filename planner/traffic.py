"""Traffic demand of a parallelization strategy: AllReduce groups and the MP traffic matrix.

Reference: algorithms.md section 1.3 step 1 (the inputs of TopologyFinder).

- ``data``: every layer is replicated on all n servers; one AllReduce of every gradient.
- ``hybrid``, models with embedding tables (DLRM, NCF): tables are model-parallel, placed on
  servers largest first onto the least-loaded server (the usual DLRM sharding); every server
  fetches its batch's lookups from every table owner in the forward pass and returns the
  gradients in the backward pass (all-to-all). Dense layers stay data-parallel over all n.
- ``hybrid``, dense models: the largest layers (those holding half the parameters) are sharded
  over ``mp_degree`` consecutive servers (a block); shard s of every block forms an AllReduce
  group on the coset {s, s + m, s + 2m, ...} of size n/m (TopoOpt's sub-group placement,
  section 1.1), and the block members exchange the sharded layers' activations.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.plan import AllReduceGroup, MPFlow, TrafficDemand

from .zoo import Layer, Model


@dataclass(frozen=True)
class Placement:
    """Where a hybrid strategy put things: table -> server, sharded layer names."""

    tables: dict[str, int]
    sharded: tuple[str, ...]
    mp_degree: int


def data_parallel_demand(model: Model, n: int) -> TrafficDemand:
    return TrafficDemand(allreduce=(AllReduceGroup(tuple(range(n)), model.param_bytes),), mp=())


def place_tables(tables: tuple[Layer, ...], n: int) -> dict[str, int]:
    """Greedy largest-first placement of embedding tables on the least-loaded server."""
    load = [0] * n
    placement: dict[str, int] = {}
    for table in sorted(tables, key=lambda t: (-t.params, t.name)):
        server = min(range(n), key=lambda s: (load[s], s))
        placement[table.name] = server
        load[server] += table.params
    return placement


def _embedding_demand(model: Model, n: int, batch: int) -> tuple[TrafficDemand, Placement]:
    tables = place_tables(model.embeddings, n)
    pair_bytes: dict[tuple[int, int], int] = {}
    for table in model.embeddings:
        owner = tables[table.name]
        lookup = table.out_bytes * batch  # one server's batch of lookups from this table
        for other in range(n):
            if other == owner:
                continue
            for key in ((owner, other), (other, owner)):  # activations out, gradients back
                pair_bytes[key] = pair_bytes.get(key, 0) + lookup
    dense = sum(l.param_bytes for l in model.dense_layers)
    groups = (AllReduceGroup(tuple(range(n)), dense),) if dense else ()
    mp = tuple(MPFlow(s, d, b) for (s, d), b in sorted(pair_bytes.items()))
    return TrafficDemand(groups, mp), Placement(tables, (), 1)


def _sharded_demand(model: Model, n: int, batch: int, m: int) -> tuple[TrafficDemand, Placement]:
    layers = sorted(model.layers, key=lambda l: -l.params)
    sharded: list[Layer] = []
    covered = 0
    for layer in layers:
        if covered >= model.params / 2:
            break
        sharded.append(layer)
        covered += layer.params
    sharded_bytes = sum(l.param_bytes for l in sharded)
    replicated_bytes = model.param_bytes - sharded_bytes
    groups: list[AllReduceGroup] = []
    if replicated_bytes:
        groups.append(AllReduceGroup(tuple(range(n)), replicated_bytes))
    if m == 1:
        groups = [AllReduceGroup(tuple(range(n)), model.param_bytes)]
        return TrafficDemand(tuple(groups), ()), Placement({}, (), 1)
    if n // m > 1:
        for s in range(m):
            groups.append(AllReduceGroup(tuple(range(s, n, m)), sharded_bytes // m))
    # Tensor-parallel layers all-gather their output activations inside each block and
    # reduce-scatter the activation gradients in the backward pass.
    per_peer = sum(l.out_bytes for l in sharded) * batch // m
    flows = []
    for block in range(0, n, m):
        members = range(block, block + m)
        for a in members:
            for b in members:
                if a != b:
                    flows.append(MPFlow(a, b, 2 * per_peer))
    return TrafficDemand(tuple(groups), tuple(flows)), Placement({}, tuple(l.name for l in sharded), m)


def strategy_demand(
    model: Model, n: int, strategy: str, batch: int, mp_degree: int = 2
) -> tuple[TrafficDemand, Placement]:
    """Traffic of ``strategy`` ("data" or "hybrid") for ``model`` on ``n`` servers."""
    if strategy == "data":
        return data_parallel_demand(model, n), Placement({}, (), 1)
    if strategy == "hybrid":
        if model.embeddings:
            return _embedding_demand(model, n, batch)
        return _sharded_demand(model, n, batch, mp_degree)
    raise ValueError(f"strategy {strategy!r} has no fixed traffic (search builds its own)")
