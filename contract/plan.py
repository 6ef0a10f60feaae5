"""The `Plan`: everything the planner decides for one job, as plain data.

A plan is the contract between the planner and the rest of topolab. The emulator builds
hosts and cables from `links` and installs `next_hop` as static routes; the workers get
schedules derived from `rings`; the end-to-end run compares the plan's prediction with
what it measures. A plan is self-sufficient: with its `Workload` (the zoo model or an
imported operator graph, the batch, the device rate) and its `Placement` it determines the training iteration, so the
iteration's schedule and its prediction need the plan alone, no scenario
(planner.cost.iteration_prediction). A plan round-trips through JSON exactly
(``Plan.from_json(plan.to_json()) == plan``) so it can be stored next to results; a plan
written before the workload was recorded reads with ``workload = None``.

Node numbering: servers are ``0 .. servers-1``. Baselines that need a switch (the ideal
switch) add switch nodes ``servers .. servers+switches-1``; switches forward but never
compute. Every link is one physical cable (parallel cables between the same pair are
repeated entries), full duplex, ``gbps`` in each direction.

Routes are destination based, as the kernel's forwarding is: ``next_hop[u][v]`` is the
neighbour node ``u`` forwards to on the way to ``v`` (``-1`` on the diagonal). For
circulant TopoOpt graphs the table is derived from a per-offset first stride (coin change,
docs/algorithms.md section 4), which is how it is stored, so a 1024-server plan stays small.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from typing import Any

import numpy as np

from .graph import OperatorGraph
from .network import Link, Network, PairAllocation, PathShare, Routes


@dataclass(frozen=True)
class AllReduceGroup:
    """Servers that AllReduce ``bytes`` of gradient per iteration (one weight replica group).

    ``rings`` lists the TopoOpt strides the group's own rings use (empty when the group
    rides other rings by coin-change multi-hop routing)."""

    members: tuple[int, ...]
    bytes: int
    rings: tuple[int, ...] = ()


@dataclass(frozen=True)
class MPFlow:
    """Model-parallel traffic: ``bytes`` per iteration from server ``src`` to ``dst``."""

    src: int
    dst: int
    bytes: int


@dataclass(frozen=True)
class TrafficDemand:
    """Per-iteration traffic of a parallelization strategy (docs/algorithms.md section 2, step 1)."""

    allreduce: tuple[AllReduceGroup, ...]
    mp: tuple[MPFlow, ...]

    @property
    def allreduce_bytes(self) -> int:
        return sum(g.bytes for g in self.allreduce)

    @property
    def mp_bytes(self) -> int:
        return sum(f.bytes for f in self.mp)


@dataclass(frozen=True)
class OperatorChoice:
    """The parallel configuration of one operator of the model's operator graph.

    ``layers`` names the zoo layers the operator consists of (several when the planner fused
    them). Dense operators: ``mp`` = tensor-parallel degree over blocks of ``mp``
    consecutive servers (1 = data parallel). Embedding tables: ``owner = -1`` replicates the
    table; otherwise it is row-sharded over ``shards`` servers ``owner + j n / shards``."""

    layers: tuple[str, ...]
    mp: int = 1
    owner: int = -1
    shards: int = 1


@dataclass(frozen=True)
class Placement:
    """A parallelization strategy: one `OperatorChoice` per operator, in the operator
    graph's topological order. Empty means every zoo layer is data parallel."""

    operators: tuple[OperatorChoice, ...] = ()

    @property
    def tables(self) -> dict[str, int]:
        """Embedding layer -> the server holding it (its first shard), for placed tables."""
        return {layer: op.owner for op in self.operators if op.owner >= 0 for layer in op.layers}

    @property
    def sharded(self) -> tuple[str, ...]:
        """Zoo layers that are tensor-parallel (``mp > 1``)."""
        return tuple(layer for op in self.operators if op.mp > 1 for layer in op.layers)

    @property
    def mp_degree(self) -> int:
        """The largest tensor-parallel degree of any operator (1: no tensor parallelism)."""
        return max((op.mp for op in self.operators), default=1)


@dataclass(frozen=True)
class Workload:
    """The training job a plan is for: everything its iteration computes, besides the strategy.

    Without ``graph``, ``model`` names a model of the planner's zoo (planner.model.zoo: its layers
    with their FLOPs, parameters and activations, from which planner.model.opgraph builds the
    operator graph that `Placement` refers to). With ``graph`` (an imported model:
    contract.graph, docs/models.md), the graph itself is the model and ``model`` only says
    where it came from; the plan carries the whole graph, so it stays self-sufficient.
    Every server processes ``batch_per_server`` samples per iteration at ``device_tflops``
    effective TFLOP/s: an operator of ``f`` FLOPs per sample computes
    ``f x batch / (device_tflops 10^12)`` seconds forward (`contract.physics.compute_seconds`),
    and its backward FLOPs likewise (twice the forward for a zoo model). The scenario's
    ``[workload]`` section is this type, defaults included."""

    model: str = "dlrm"
    batch_per_server: int = 128
    device_tflops: float = 125.0
    graph: OperatorGraph | None = None


@dataclass(frozen=True)
class Summary:
    """Figures a reader checks first: hop counts and an estimate of bisection bandwidth."""

    diameter: int
    mean_hops: float
    bisection_gbps: float
    relayed_fraction: float  # share of ordered server pairs that are not direct neighbours


@dataclass(frozen=True)
class Plan:
    """A complete plan for one training job on one topology."""

    servers: int
    degree: int
    link_gbps: float
    latency_us: float
    topology: str
    links: tuple[Link, ...]
    routes: Routes
    demand: TrafficDemand
    summary: Summary
    workload: Workload | None = None  # None: a network without a job (its iteration is undefined)
    strategy: str = ""
    switches: int = 0
    strides: tuple[int, ...] = ()  # TopoOpt: the positive strides of the full-ring AllReduce
    rings: tuple[tuple[int, ...], ...] = ()  # each ring as the server order it visits
    notes: tuple[str, ...] = ()
    placement: Placement = field(default_factory=Placement)
    extra: dict[str, Any] = field(default_factory=dict)
    allocation: tuple[PairAllocation, ...] = ()  # per-destination multipath (see Network)

    # ---- derived views -------------------------------------------------------------
    @property
    def model(self) -> str:
        """The model the plan is for: a zoo name, or where an imported graph came from ("" without a workload)."""
        return self.workload.model if self.workload is not None else ""

    @property
    def nodes(self) -> int:
        return self.servers + self.switches

    @cached_property
    def network(self) -> Network:
        """The network this plan asks for (what an emulator builds): nodes, cables, routes."""
        return Network(
            servers=self.servers,
            switches=self.switches,
            links=tuple(self.links),
            routes=self.routes,
            latency_us=self.latency_us,
            link_gbps=self.link_gbps,
            allocation=self.allocation,
        )

    @property
    def next_hop(self) -> np.ndarray:
        """``nodes x nodes`` int32 array of next hops (-1 on the diagonal)."""
        return self.network.next_hop

    def path(self, src: int, dst: int) -> list[int]:
        """The node sequence a packet from ``src`` to ``dst`` follows, both ends included."""
        return self.network.path(src, dst)

    def neighbours(self, node: int) -> list[int]:
        """Nodes cabled to ``node``, one entry per cable."""
        return self.network.neighbours(node)

    # ---- JSON --------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data. Built field by field: `dataclasses.asdict` deep-copies
        every one of the ~10^5 flows and route entries of a 1024-server plan (about 1 s)."""
        d: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        d["links"] = [{"a": link.a, "b": link.b, "gbps": link.gbps} for link in self.links]
        d["routes"] = {
            "kind": self.routes.kind,
            "first_stride": list(self.routes.first_stride),
            "table": [list(row) for row in self.routes.table],
        }
        d["demand"] = {
            "allreduce": [
                {"members": list(g.members), "bytes": g.bytes, "rings": list(g.rings)} for g in self.demand.allreduce
            ],
            "mp": [{"src": f.src, "dst": f.dst, "bytes": f.bytes} for f in self.demand.mp],
        }
        d["summary"] = asdict(self.summary)
        d["workload"] = _workload_dict(self.workload) if self.workload is not None else None
        d["placement"] = asdict(self.placement)
        d["strides"] = list(self.strides)
        d["rings"] = [list(r) for r in self.rings]
        d["notes"] = list(self.notes)
        d["extra"] = copy.deepcopy(self.extra)
        d["allocation"] = [
            {"src": pair.src, "dst": pair.dst, "paths": [{"path": list(s.path), "gbps": s.gbps} for s in pair.paths]}
            for pair in self.allocation
        ]
        d["format"] = PLAN_FORMAT
        return d

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        d = dict(d)
        fmt = d.pop("format", PLAN_FORMAT)
        if fmt != PLAN_FORMAT:
            raise ValueError(f"plan format {fmt!r} is not {PLAN_FORMAT!r}")
        demand = d["demand"]
        workload = d.get("workload")  # absent from plans written before it was recorded
        return cls(
            servers=int(d["servers"]),
            degree=int(d["degree"]),
            link_gbps=float(d["link_gbps"]),
            latency_us=float(d["latency_us"]),
            topology=str(d["topology"]),
            links=tuple(Link(int(l["a"]), int(l["b"]), float(l["gbps"])) for l in d["links"]),
            routes=Routes(
                kind=d["routes"]["kind"],
                first_stride=tuple(int(x) for x in d["routes"].get("first_stride", ())),
                table=tuple(tuple(int(x) for x in row) for row in d["routes"].get("table", ())),
            ),
            demand=TrafficDemand(
                allreduce=tuple(
                    AllReduceGroup(
                        tuple(int(m) for m in g["members"]), int(g["bytes"]), tuple(int(r) for r in g.get("rings", ()))
                    )
                    for g in demand["allreduce"]
                ),
                mp=tuple(MPFlow(int(f["src"]), int(f["dst"]), int(f["bytes"])) for f in demand["mp"]),
            ),
            summary=Summary(**d["summary"]),
            workload=(
                Workload(
                    str(workload["model"]),
                    int(workload["batch_per_server"]),
                    float(workload["device_tflops"]),
                    OperatorGraph.from_dict(workload["graph"]) if workload.get("graph") else None,
                )
                if workload
                else None
            ),
            strategy=d.get("strategy", ""),
            switches=int(d.get("switches", 0)),
            strides=tuple(int(s) for s in d.get("strides", ())),
            rings=tuple(tuple(int(x) for x in r) for r in d.get("rings", ())),
            notes=tuple(d.get("notes", ())),
            placement=Placement(
                tuple(
                    OperatorChoice(
                        tuple(str(x) for x in op["layers"]),
                        int(op.get("mp", 1)),
                        int(op.get("owner", -1)),
                        int(op.get("shards", 1)),
                    )
                    for op in d.get("placement", {}).get("operators", ())
                )
            ),
            extra=dict(d.get("extra", {})),
            allocation=tuple(
                PairAllocation(
                    int(pair["src"]),
                    int(pair["dst"]),
                    tuple(
                        PathShare(tuple(int(x) for x in share["path"]), float(share["gbps"])) for share in pair["paths"]
                    ),
                )
                for pair in d.get("allocation", ())
            ),
        )

    @classmethod
    def from_json(cls, text: str) -> Plan:
        return cls.from_dict(json.loads(text))

    def __eq__(self, other: object) -> bool:  # cached_property must not affect equality
        if not isinstance(other, Plan):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((self.servers, self.degree, self.topology, self.links))


def _workload_dict(w: Workload) -> dict[str, Any]:
    """The workload as JSON-ready data; the graph (when imported) in its own file format."""
    d: dict[str, Any] = {"model": w.model, "batch_per_server": w.batch_per_server, "device_tflops": w.device_tflops}
    if w.graph is not None:
        d["graph"] = w.graph.to_dict()
    return d


PLAN_FORMAT = "topolab.plan/1"
