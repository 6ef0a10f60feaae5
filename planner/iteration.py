"""One training iteration of a plan as a schedule the workers execute and the model predicts.

Per server (rank), in the schedule format of contract.schedule:

- stream ``compute``: forward compute of every layer in order, then backward in reverse
  order (backward = 2x forward FLOPs), as timed waits from the model zoo's FLOPs at the
  scenario's device throughput, multiplied by the time-dilation factor so compute and the
  slowed-down emulated links keep the real cluster's ratio;
- model-parallel transfers where the strategy has them: DLRM/NCF embedding lookups go from
  each table owner to every other server after the lookup and before the interaction layer,
  and their gradients come back after the interaction's backward (all-to-all); sharded dense
  layers exchange activations inside their block forward and backward;
- gradient AllReduce in buckets (PyTorch DDP: 25 MB by default) over the plan's rings, each
  bucket starting as soon as the backward of its last layer is done, so communication
  overlaps the rest of the backward pass. Buckets are serialized on the ring streams
  (``ar0``, ``ar1``, ... one per ring), as DDP serializes them on its communication stream.

Every AllReduce bucket and every transfer carries a check, so each worker verifies its
result every iteration.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

from contract.physics import compute_seconds
from contract.plan import Plan
from contract.schedule import Check, Schedule, ScheduleBuilder

from .collectives.from_plan import plan_rings
from .collectives.p2p import add_p2p_transfers
from .collectives.rings import add_multiring_allreduce, coset_rings
from .zoo import Layer, Model

DDP_BUCKET_BYTES = 25 * 2**20


@dataclass(frozen=True)
class IterationOptions:
    batch: int
    device_tflops: float
    time_scale: float = 1.0  # emulated seconds per real second (>= 1 slows compute down)
    payload_scale: float = 1.0  # multiply every transfer size (small buffers for smoke tests)
    bucket_bytes: int = DDP_BUCKET_BYTES
    min_transfer_bytes: int = 4  # floor of every scaled transfer (a zero-payload twin keeps every op)


def _scaled(nbytes: float, opts: IterationOptions) -> int:
    return max(opts.min_transfer_bytes // 4 * 4, 4, int(nbytes * opts.payload_scale) // 4 * 4)


def allreduce_rings(plan: Plan) -> list[list[int]]:
    """Rings the full-group AllReduce uses: the plan's rings in both directions (every
    TopoOpt stride p and n - p; elsewhere the plan's ring order, whose logical edges are
    relayed where servers are not cabled), as `topolab collective` runs them; through a
    switch one ring, since both directions of a ring would share the same ports."""
    rings = plan_rings(plan)
    return rings[:1] if plan.switches else rings


def _group_rings(plan: Plan, members: tuple[int, ...]) -> list[list[list[int]]]:
    """Ring orders for a coset AllReduce class (every coset of the group's size)."""
    n, g = plan.servers, len(members)
    strides = [p for grp in plan.demand.allreduce if len(grp.members) == g for p in grp.rings][:2]
    ks = [p // (n // g) for p in strides] or [1]
    ks = [k for k in ks if gcd(k, g) == 1] or [1]
    return coset_rings(n, g, ks)


def iteration_schedule(plan: Plan, model: Model, opts: IterationOptions) -> Schedule:
    n = plan.servers
    b = ScheduleBuilder(n, f"iteration/{plan.topology}")
    placement = plan.extra.get("placement", {}) or {}
    tables: dict[str, int] = placement.get("tables", {}) or {}
    sharded = set(placement.get("sharded", []) or [])
    m = int(placement.get("mp_degree", 1) or 1)

    def seconds(layer: Layer, factor: float) -> float:
        split = m if layer.name in sharded else 1
        return factor * compute_seconds(
            layer.flops, opts.batch, opts.device_tflops, split=split, time_scale=opts.time_scale
        )

    layers = [l for l in model.layers if l.kind != "embedding" or l.name in tables]
    embeddings = [l for l in layers if l.kind == "embedding"]
    dense = [l for l in layers if l.kind != "embedding"]

    # ---- forward ------------------------------------------------------------------
    lookup_done: dict[int, list[int]] = {r: [] for r in range(n)}
    for table in embeddings:
        owner = tables[table.name]
        op = b.compute(owner, "compute", seconds(table, 1.0))
        lookup_done[owner].append(op)
    mp_recv: dict[int, list[int]] = {r: [] for r in range(n)}
    if embeddings:
        fwd = _table_transfers(embeddings, tables, n, opts, forward=True)
        mp_recv = add_p2p_transfers(
            b,
            fwd,
            "act",
            b.buffers["act"].bytes if "act" in b.buffers else 0,
            "mp",
            after={r: lookup_done[r][-1:] for r in range(n)},
        )
    interaction_seen = False
    for layer in dense:
        if layer.kind == "interaction" and embeddings:
            interaction_seen = True
        per_rank = {}
        for r in range(n):
            d = mp_recv.get(r, []) if (layer.kind == "interaction" and embeddings) else []
            per_rank[r] = b.compute(r, "compute", seconds(layer, 1.0), after=d)
        if layer.name in sharded and m > 1:
            _block_exchange(b, plan, layer, m, opts, per_rank)
    if embeddings and not interaction_seen:  # models whose tables feed the head directly
        for r in range(n):
            b.compute(r, "compute", 0.0, after=mp_recv.get(r, []))

    # ---- backward, with bucketed AllReduce -----------------------------------------
    full_rings = allreduce_rings(plan)
    grad_offset = 0
    bucket: list[Layer] = []
    bucket_bytes = 0
    allreduce_checks: list[Check] = []

    def flush(after_ops: dict[int, int]) -> None:
        nonlocal grad_offset, bucket, bucket_bytes
        if not bucket:
            return
        nbytes = _scaled(bucket_bytes, opts)
        b.buffer("grad", grad_offset + nbytes)
        add_multiring_allreduce(
            b, full_rings, "grad", grad_offset, nbytes, "ar", after={r: [op] for r, op in after_ops.items()}
        )
        allreduce_checks.append(Check("allreduce", "grad", grad_offset, nbytes, groups=[list(range(n))]))
        grad_offset += nbytes
        bucket, bucket_bytes = [], 0

    sharded_done: dict[int, int] = {}
    last_ops: dict[int, int] = {}
    for layer in reversed(dense):
        if layer.kind == "interaction" and embeddings:
            ops = {r: b.compute(r, "compute", seconds(layer, 2.0)) for r in range(n)}
            back = _table_transfers(embeddings, tables, n, opts, forward=False)
            done = add_p2p_transfers(
                b, back, "act", b.buffers["act"].bytes, "mp", after={r: [ops[r]] for r in range(n)}
            )
            for table in embeddings:  # owners apply the returned gradients
                owner = tables[table.name]
                b.compute(owner, "compute", seconds(table, 2.0), after=done.get(owner, []))
            last_ops = ops
            continue
        ops = {r: b.compute(r, "compute", seconds(layer, 2.0)) for r in range(n)}
        last_ops = ops
        if layer.name in sharded and m > 1:
            _block_exchange(b, plan, layer, m, opts, ops)
            sharded_done = ops
            continue
        if layer.params:
            bucket.append(layer)
            bucket_bytes += layer.param_bytes
            if bucket_bytes >= opts.bucket_bytes:
                flush(ops)
    flush(last_ops)

    # ---- sharded layers: AllReduce of each shard on its coset ring ------------------
    if sharded and m > 1 and n // m > 1:
        shard_bytes = sum(l.param_bytes for l in dense if l.name in sharded) // m
        nbytes = _scaled(shard_bytes, opts)
        b.buffer("grad", grad_offset + nbytes)
        groups = _group_rings(plan, tuple(range(0, n, m)))
        for rings in groups:
            add_multiring_allreduce(
                b, rings, "grad", grad_offset, nbytes, "shard", after={r: [sharded_done[r]] for r in rings[0]}
            )
        allreduce_checks.append(
            Check("allreduce", "grad", grad_offset, nbytes, groups=[sorted(rings[0]) for rings in groups])
        )
        grad_offset += nbytes
    for check in allreduce_checks:
        b.check(check)
    if "grad" not in b.buffers:
        b.buffer("grad", 4)
    b.params.update(
        model=model.name,
        batch=opts.batch,
        time_scale=opts.time_scale,
        payload_scale=opts.payload_scale,
        buckets=len(allreduce_checks),
    )
    return b.build()


def _table_transfers(
    embeddings: list[Layer], tables: dict[str, int], n: int, opts: IterationOptions, forward: bool
) -> list[tuple[int, int, int]]:
    """One transfer per (owner, other server): all of the owner's lookups for that server."""
    per_pair: dict[tuple[int, int], float] = {}
    for table in embeddings:
        owner = tables[table.name]
        for other in range(n):
            if other != owner:
                key = (owner, other) if forward else (other, owner)
                per_pair[key] = per_pair.get(key, 0.0) + table.out_bytes * opts.batch
    return [(s, d, _scaled(v, opts)) for (s, d), v in sorted(per_pair.items())]


def _block_exchange(
    b: ScheduleBuilder, plan: Plan, layer: Layer, m: int, opts: IterationOptions, after: dict[int, int]
) -> None:
    """Tensor-parallel activation exchange inside each block of m consecutive servers."""
    nbytes = _scaled(layer.out_bytes * opts.batch / m, opts)
    transfers = [
        (a, c, nbytes)
        for blk in range(0, plan.servers, m)
        for a in range(blk, blk + m)
        for c in range(blk, blk + m)
        if a != c
    ]
    done = add_p2p_transfers(
        b,
        transfers,
        "act",
        b.buffers["act"].bytes if "act" in b.buffers else 0,
        "tp",
        after={r: [op] for r, op in after.items()},
    )
    for r, ops in done.items():  # the next layer needs the gathered activations
        b.compute(r, "compute", 0.0, after=ops)
