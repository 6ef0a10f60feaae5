"""One training iteration of a plan as a schedule the workers execute and the model predicts.

The schedule executes the plan's job (`Plan.workload`: its model, the batch per server,
the device rate) under its strategy (`Plan.placement`, regrouped into the operator graph it
was chosen on by `planner.strategy.strategies.strategy_of`), so it needs the plan alone, with the
traffic model the
strategy's demand was computed with (`planner.strategy.strategies.op_traffic`), so every
model-parallel byte of ``plan.demand`` is a transfer of the schedule and vice versa
(docs/algorithms.md section 6). Per server (rank), in the schedule format of
contract.schedule:

- stream ``compute``: forward compute of every operator in topological order, then
  backward in reverse order (the operator's backward FLOPs: 2x forward for a zoo model), as timed waits
  (`contract.physics.compute_seconds`) multiplied by the time-dilation factor so compute
  and the slowed-down emulated links keep the real cluster's ratio;
- model-parallel transfers (streams ``mp>peer`` / ``mp<peer``): an operator's input
  all-gather before its forward compute, its output all-gather or embedding lookups after
  it, and the mirrored transfers of the gradients in the backward pass;
- gradient AllReduce in buckets (PyTorch DDP: 25 MB by default) of one layout (the full
  group, or the cosets of a tensor-parallel degree), each bucket starting as soon as the
  backward of its last operator is done, so communication overlaps the rest of the backward
  pass. Each bucket runs the plan's AllReduce for its group size, chosen by
  `planner.collectives.from_plan.choose_allreduce`: TopoOpt's multi-ring (the weighted
  multi-ring on cables of different rates) serialized on the ring streams (``ar0``, ``ar1``,
  ... one per ring) as DDP serializes buckets on its communication stream, the forest's
  trees (streams ``ft<i>up`` / ``ft<i>down``), or on a hierarchical plan a hierarchical
  AllReduce over the dimensions its groups span (planner.collectives.hierarchical):
  pipelined buckets are cut into chunks and share the per-dimension streams, so consecutive
  buckets overlap across dimensions; sequential buckets each wait for the previous one (one
  dimension after the other). A plan that records an MSCCL XML (``[collectives] allreduce =
  "msccl:FILE"``, docs/msccl.md) runs it for every full-group bucket: one stream per
  threadblock (``ar.msccl.tb<t>``, ``ar.msccl.gpu<l>.tb<t>`` with several GPUs per server),
  shared by the buckets as the rings' streams are, each bucket rounded up to whole chunks of
  the XML (planner.collectives.msccl_xml.add_msccl_collective); coset groups still run the
  plan's own AllReduce.

Every AllReduce bucket and every transfer carries a check, so each worker verifies its
result every iteration.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from contract.plan import Plan
from contract.schedule import Check, Schedule, ScheduleBuilder

from ..collectives.forest import add_forest_allreduce
from ..collectives.from_plan import AllReduceChoice, choose_allreduce
from ..collectives.hierarchical import add_hierarchical_allreduce, pipeline_chunks
from ..collectives.msccl_xml import add_msccl_collective
from ..collectives.p2p import add_p2p_transfers
from ..collectives.rings import add_multiring_allreduce
from ..model.workload_graph import workload_graph
from ..strategy.strategies import Flows, OpTraffic, op_traffic, plan_workload, strategy_of
from ..topology.hierarchical import layout_span
from .collector import collector_paused

DDP_BUCKET_BYTES = 25 * 2**20
# An MSCCL XML's threadblock streams: "ar" first, so a run's phases count them as AllReduce
# (topolab.common.phases.phase_of)
MSCCL_STREAM_PREFIX = "ar.msccl."
ITEMSIZE = 4  # float32 buffers: every transfer is a whole number of elements

Deps = dict[int, list[int]]  # rank -> ops its next op waits for


@dataclass(frozen=True)
class IterationOptions:
    """How an iteration is run; what it computes and moves is the plan's (`Plan.workload`,
    `Plan.placement`)."""

    time_scale: float = 1.0  # emulated seconds per real second (>= 1 slows compute down)
    payload_scale: float = 1.0  # multiply every transfer size (small buffers for smoke tests)
    bucket_bytes: int = DDP_BUCKET_BYTES
    min_transfer_bytes: int = 4  # floor of every scaled transfer (a zero-payload twin keeps every op)


def scaled_bytes(nbytes: float, opts: IterationOptions) -> int:
    """A transfer of ``nbytes`` as the schedule carries it: scaled, whole elements, floored."""
    floor = max(opts.min_transfer_bytes // ITEMSIZE * ITEMSIZE, ITEMSIZE)
    return max(floor, int(nbytes * opts.payload_scale) // ITEMSIZE * ITEMSIZE)


def _merge(deps: Iterable[Deps]) -> Deps:
    """The union of ``deps``, each op once (branches that join again would otherwise double
    their common ancestors' ops at every join: exponential in a residual network's depth)."""
    out: dict[int, dict[int, None]] = {}
    for d in deps:
        for r, ops in d.items():
            out.setdefault(r, {}).update(dict.fromkeys(ops))
    return {r: list(ops) for r, ops in out.items()}


class _IterationBuilder:
    """The named steps of `iteration_schedule` around one `ScheduleBuilder`."""

    def __init__(self, plan: Plan, opts: IterationOptions):
        self.plan, self.opts, self.n = plan, opts, plan.servers
        self.b = ScheduleBuilder(plan.servers, f"iteration/{plan.topology}")
        self.grad_offset = 0
        self.checks: list[Check] = []
        self.buckets = 0
        self.previous_bucket: Deps = {}  # sequential hierarchical buckets wait for it
        self.algorithms: dict[str, dict[str, str]] = {}  # per group size: algorithm and why
        self.choices: dict[tuple[int, int], AllReduceChoice] = {}  # per (layout, bucket size)

    def transfers(self, flows: Flows, after: Deps) -> Deps:
        """One p2p transfer per (src, dst) pair of ``flows`` (split over the pair's planes when the
        plan has a per-destination allocation for it); each rank's ops that finish its part."""
        if not len(flows):
            return {}
        per_pair: dict[tuple[int, int], float] = {}
        for s, d, v in zip(flows.src.tolist(), flows.dst.tolist(), flows.nbytes.tolist()):
            per_pair[(s, d)] = per_pair.get((s, d), 0.0) + v
        transfers = [(s, d, scaled_bytes(v, self.opts)) for (s, d), v in sorted(per_pair.items())]
        base = self.b.buffers["act"].bytes if "act" in self.b.buffers else 0
        return add_p2p_transfers(self.b, transfers, "act", base, "mp", after=after, network=self.plan.network)

    def compute(self, seconds: np.ndarray, after: Deps) -> Deps:
        """The operator's compute (forward or backward seconds per server) on every server
        that has a share."""
        out: Deps = {}
        for r in range(self.n):
            if seconds[r] > 0:
                secs = float(seconds[r]) * self.opts.time_scale
                out[r] = [self.b.compute(r, "compute", secs, after=after.get(r, ()))]
        return out

    def forward(self, t: OpTraffic, inputs: Deps) -> Deps:
        """Input all-gather -> compute -> output transfers; the ops consumers wait for."""
        ready = _merge([inputs, self.transfers(t.fwd_in, inputs)])
        ready = _merge([ready, self.compute(t.compute, ready)])
        return _merge([ready, self.transfers(t.fwd_out, ready)])

    def backward(self, t: OpTraffic, grads: Deps) -> Deps:
        """Mirrored output transfers -> backward compute -> mirrored input transfers."""
        ready = _merge([grads, self.transfers(t.fwd_out.reversed(), grads)])
        done = self.compute(t.backward, ready)
        ready = _merge([ready, done])
        return _merge([done, self.transfers(t.fwd_in.reversed(), ready)])

    def allreduce(self, layout: int, nbytes_per_group: float, after: Deps) -> None:
        """One bucket: every coset group of step ``layout`` AllReduces ``nbytes_per_group``
        with the plan's AllReduce for its group size (`planner.collectives.from_plan.
        choose_allreduce`, recorded in ``params["allreduce"]``)."""
        n = self.n
        nbytes = scaled_bytes(nbytes_per_group, self.opts)
        self.b.buffer("grad", self.grad_offset + nbytes)
        if (layout, nbytes) not in self.choices:  # buckets are mostly of one size: choose (pack) once
            self.choices[(layout, nbytes)] = choose_allreduce(self.plan, nbytes, n // layout)
        choice = self.choices[(layout, nbytes)]
        if choice.msccl is not None:  # the full group only (choose_allreduce)
            nbytes = self.msccl_allreduce(choice, nbytes, after)
        elif choice.algorithm == "hierarchical":
            self.hierarchical_allreduce(layout, nbytes, after)
        elif choice.trees is not None:
            add_forest_allreduce(
                self.b,
                list(choice.trees),
                n,
                "grad",
                path=self.plan.path,
                stream_prefix="ft",
                offset=self.grad_offset,
                after=after,
            )
        else:  # every coset group's rings, split by its weights
            for rings, weights in zip(choice.rings, choice.weights):
                add_multiring_allreduce(self.b, rings, "grad", self.grad_offset, nbytes, "ar", weights, after)
        self.algorithms.setdefault(f"groups of {n // layout}", {"algorithm": choice.algorithm, "why": choice.reason})
        cosets = [list(range(s, n, layout)) for s in range(layout)]
        self.checks.append(Check("allreduce", "grad", self.grad_offset, nbytes, groups=cosets))
        self.grad_offset += nbytes
        self.buckets += 1

    def msccl_allreduce(self, choice: AllReduceChoice, nbytes: int, after: Deps) -> int:
        """One full-group bucket as the plan's MSCCL XML; the bytes of ``grad`` it covers
        (``nbytes`` rounded up to whole chunks of the XML), which its check verifies."""
        m = choice.msccl
        assert m is not None
        added = add_msccl_collective(
            self.b,
            m.algorithm,
            "grad",
            self.grad_offset,
            nbytes,
            m.gpus_per_server,
            stream_prefix=MSCCL_STREAM_PREFIX,
            after=after,
            check=False,  # the bucket's check, as every bucket's (allreduce)
        )
        return added.region_bytes

    def hierarchical_allreduce(self, layout: int, nbytes: int, after: Deps) -> None:
        dims, blocks = self.plan.extra["dims"], self.plan.extra["blocks"]
        sequential = self.plan.extra.get("schedule") == "sequential"
        deps = _merge([after, self.previous_bucket]) if sequential else after
        self.previous_bucket = add_hierarchical_allreduce(
            self.b,
            dims,
            blocks,
            "grad",
            self.grad_offset,
            nbytes,
            chunks=1 if sequential else pipeline_chunks(nbytes),
            after=deps,
            span=layout_span(dims, layout),
        )


def iteration_schedule(plan: Plan, opts: IterationOptions | None = None) -> Schedule:
    """The schedule of one training iteration of ``plan`` (module docstring): its workload
    and placement say what is computed and moved, ``opts`` how it is run."""
    with collector_paused():
        return _iteration_schedule(plan, opts or IterationOptions())


def _iteration_schedule(plan: Plan, opts: IterationOptions) -> Schedule:
    n, job = plan.servers, plan_workload(plan)
    graph, strategy = strategy_of(workload_graph(job), plan.placement)
    it = _IterationBuilder(plan, opts)
    traffic = [op_traffic(graph, strategy, i, n, job.batch_per_server, job.device_tflops) for i in range(len(graph))]

    outputs: list[Deps] = []
    for i, t in enumerate(traffic):  # forward, in topological order
        outputs.append(it.forward(t, _merge(outputs[p] for p in graph.preds[i])))

    grads: list[Deps] = [{} for _ in graph.ops]  # backward, reversed, with DDP buckets
    bucket_layout, bucket_bytes, bucket_after = 0, 0.0, {}
    for i in reversed(range(len(graph))):
        t = traffic[i]
        done = it.backward(t, grads[i])
        for p in graph.preds[i]:
            grads[p] = _merge([grads[p], done])
        if not (t.ar_layout and t.ar_bytes > 0):
            continue
        if bucket_bytes and bucket_layout != t.ar_layout:
            it.allreduce(bucket_layout, bucket_bytes, bucket_after)
            bucket_bytes = 0.0
        bucket_layout, bucket_after = t.ar_layout, done
        bucket_bytes += t.ar_bytes
        if bucket_bytes >= opts.bucket_bytes:
            it.allreduce(bucket_layout, bucket_bytes, bucket_after)
            bucket_bytes = 0.0
    if bucket_bytes:
        it.allreduce(bucket_layout, bucket_bytes, bucket_after)

    for check in it.checks:
        it.b.check(check)
    if "grad" not in it.b.buffers:
        it.b.buffer("grad", ITEMSIZE)
    it.b.params.update(
        model=job.model,
        batch=job.batch_per_server,
        time_scale=opts.time_scale,
        payload_scale=opts.payload_scale,
        buckets=it.buckets,
        allreduce=it.algorithms,
    )
    return it.b.build()
