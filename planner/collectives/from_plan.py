"""The AllReduce of a `Plan`: which algorithm, on which rings or trees, with which weights,
and why, chosen here once (docs/algorithms.md sections 7 and 10).

`choose_allreduce` returns that choice as an `AllReduceChoice`, and everything that runs or
models an AllReduce on a plan asks it: the iteration schedule the workers run
(`planner.cost.iteration`, per gradient bucket), `topolab collective` (the algorithm named on its
command line, `allreduce_schedule`) and the search's cost model (`planner.cost.costmodel.network`).
The iteration's rule (``algorithm="auto"``):

- a plan that records an MSCCL XML (a scenario's ``[collectives] allreduce = "msccl:FILE"``,
  `with_msccl_allreduce`), the full group: that XML's algorithm (`msccl_choice`,
  planner.collectives.msccl_xml; docs/msccl.md), on any topology;
- a hierarchical plan: the hierarchical AllReduce, reduce-scatter and all-gather dimension by
  dimension (planner.collectives.hierarchical);
- cables of different rates, the full group: the forest (`choose_forest`): packed spanning
  trees, or the rate-weighted multi-ring when the trees would not be faster;
- no ring over the plan's cables (a cabling file with no Hamiltonian ring: `has_ring`), the
  full group: the forest likewise;
- cables of different rates, coset groups: the weighted multi-ring (their rings do not span
  the plan, so no forest);
- uniform cables: TopoOpt's multi-ring, the buffer split equally.

Rings: the plan's stride rings in both directions, or its ring order in both directions, one
ring through a switch (`allreduce_rings`); coset groups of size g ride the strides the plan's
groups of that size were given (`group_rings`). With cables of different rates a ring runs at
the rate of its slowest hop, so the buffer is split across the rings in proportion to those
bottleneck rates (`ring_weights`) and every ring finishes at once; on uniform cables the
weights are equal and the split is TopoOpt's. This module only reads a plan's ``servers``,
``switches``, ``rings``, ``strides``, ``topology``, ``extra``, the strides of its AllReduce
groups, and its cables' rates and routes (``links``, ``path``).

An MSCCL XML is named ``msccl:FILE`` (`topolab collective --algorithm msccl:FILE`:
`msccl_choice`, `msccl_schedule`); a plan records the text of its scenario's XML in
``extra["msccl_allreduce"]`` (`with_msccl_allreduce`), so the plan alone determines its
iteration, as for every other AllReduce, and a saved plan runs the same XML without the file.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from math import gcd
from typing import Any

from contract.errors import UsageError
from contract.physics import DEFAULT_MTU, cable_goodput
from contract.schedule import Schedule

from .forest import DEFAULT_SEGMENT_BYTES as FOREST_SEGMENT_BYTES
from .forest import ForestTree, build_forest, forest_schedule, plan_capacities
from .hierarchical import PIPELINE_CHUNKS, hierarchical_allreduce, hierarchical_allreduce_for_plan
from .msccl_xml import Algorithm, checked_algorithm, msccl_file, read_msccl_xml, translate
from .rings import coset_rings, multiring_allreduce, ring_allreduce, topoopt_rings
from .tree_packing import TreePacking
from .trees import DEFAULT_SEGMENT_BYTES, dbtree_allreduce, tree_allreduce

ALGORITHMS = ("ring", "topoopt", "tree", "dbtree", "hierarchical", "forest")  # topolab collective's
AUTO = "auto"  # the iteration's rule (module docstring)
MSCCL = "msccl"  # an AllReduceChoice running an MSCCL XML (`msccl_choice`)
MSCCL_EXTRA = "msccl_allreduce"  # the plan's record of its scenario's XML (`with_msccl_allreduce`)
UNIFORM_WHY = "uniform cables: the plan's rings, split equally (TopoOpt)"
HETEROGENEOUS_WHY = "cables of different rates"
NO_RING_WHY = "no Hamiltonian ring over the cables"
Rings = tuple[tuple[int, ...], ...]  # ring orders (server sequences)
# The shallow trees' pipelined schedule takes up to this multiple of its bound S / tau
# (TopoOpt-12, 64 MiB, 1-6 slow cables: 1.07-1.23x predicted, 1.065x measured with 3; rings
# have no pipeline to fill), so the rate-weighted rings run unless the trees' tau beats
# their rate by more.
TREE_SCHEDULE_OVERHEAD = 1.25


def plan_rings(plan: Any) -> list[list[int]]:
    """Every ring of the plan in both directions (ring p and its reverse n-p), the rings
    TopoOpt's multi-ring AllReduce runs at once so each cable carries traffic both ways."""
    n = int(plan.servers)
    rings = [list(r) for r in getattr(plan, "rings", ()) if len(r) == n]
    if not rings and getattr(plan, "strides", ()):
        return topoopt_rings(n, list(plan.strides))
    if not rings:
        rings = [list(range(n))]
    both = []
    for r in rings:
        both.append(r)
        both.append([r[0]] + r[:0:-1])
    return both


def allreduce_rings(plan: Any) -> list[list[int]]:
    """Rings the full-group AllReduce uses: `plan_rings` (every TopoOpt stride p and n - p;
    elsewhere the plan's ring order, whose logical edges are relayed where servers are not
    cabled); through a switch one ring, since both directions of a ring would share the
    same ports."""
    rings = plan_rings(plan)
    return rings[:1] if plan.switches else rings


def group_rings(plan: Any, group_size: int) -> list[list[list[int]]]:
    """Rings of the coset AllReduce groups of ``group_size`` members ({s, s + n/g, ...}):
    per coset, both directions of every stride (n/g) k the plan's groups of that size were
    given (TopoOpt's sub-group rings), else of k = 1."""
    n = int(plan.servers)
    if group_size == n:
        return [allreduce_rings(plan)]
    strides = sorted({p for grp in plan.demand.allreduce if len(grp.members) == group_size for p in grp.rings})
    ks = [p // (n // group_size) for p in strides if p % (n // group_size) == 0]
    ks = [k for k in ks if gcd(k, group_size) == 1] or [1]
    return coset_rings(n, group_size, ks)


def ring_weights(plan: Any, rings: Sequence[Sequence[int]]) -> list[float]:
    """Each ring's bottleneck rate (Gbit/s): the slowest directed cable on the routes of its
    hops, a cable's rate shared equally by the rings crossing it in that direction (parallel
    cables add up). Weights for `planner.collectives.rings.weighted_split`."""
    capacity: Counter[tuple[int, int]] = Counter()
    for link in plan.links:
        capacity[(link.a, link.b)] += link.gbps
        capacity[(link.b, link.a)] += link.gbps
    hops = []
    for ring in rings:
        nodes = [ring[(i + j) % len(ring)] for i in range(len(ring)) for j in (0, 1)]
        route = [list(plan.path(a, b)) for a, b in zip(nodes[::2], nodes[1::2])]
        hops.append({(u, v) for path in route for u, v in zip(path, path[1:])})
    users = Counter(hop for ring_hops in hops for hop in ring_hops)
    return [min(capacity[h] / users[h] for h in ring_hops) if ring_hops else 1.0 for ring_hops in hops]


def has_ring(plan: Any) -> bool:
    """Does the plan name a ring (a ring order or TopoOpt strides), or a switch that makes one?
    Only a plan from a cabling file with no Hamiltonian ring has none
    (planner.topologies.file_topology); its full-group AllReduce is the forest."""
    return bool(getattr(plan, "rings", ()) or getattr(plan, "strides", ()) or plan.switches)


def heterogeneous(plan: Any) -> bool:
    """Do the plan's cables have different rates?"""
    return len({link.gbps for link in plan.links}) > 1


@dataclass(frozen=True)
class AllReduceChoice:
    """What an AllReduce on a plan runs and why (module docstring).

    ``algorithm``: ``multi-ring``, ``weighted multi-ring``, ``forest rings``, ``forest trees``,
    ``hierarchical`` (the iteration's), or ``ring``, ``tree``, ``dbtree`` (named by
    `topolab collective`). Ring algorithms: ``rings[i]`` are the rings of the i-th group (the
    cosets {s, s + n/g, ...} of the group size, in order; one group for the full group) and
    ``weights[i]`` their shares of the buffer (None: equal). The forest's trees: ``trees``
    (each with its region of the ``nbytes`` chosen for) and the ``packing`` they came from.
    ``msccl`` (algorithm ``msccl``): the MSCCL XML that runs."""

    algorithm: str
    reason: str
    group_size: int
    rings: tuple[Rings, ...] = ()
    weights: tuple[tuple[float, ...] | None, ...] = ()
    trees: tuple[ForestTree, ...] | None = None
    packing: TreePacking | None = None
    msccl: MscclAllReduce | None = None

    @property
    def shape(self) -> str:
        """``trees``, ``rings``, ``dimensions`` (the hierarchical AllReduce) or ``msccl``
        (an MSCCL XML's threadblocks)."""
        if self.algorithm == "hierarchical":
            return "dimensions"
        if self.msccl is not None:
            return "msccl"
        return "rings" if self.rings else "trees"


@dataclass(frozen=True)
class MscclAllReduce:
    """An MSCCL XML algorithm on a plan: GPU g runs on server ``g // gpus_per_server``, so it
    spans servers 0 .. ``servers`` - 1 (planner.collectives.msccl_xml, `translate`)."""

    algorithm: Algorithm
    gpus_per_server: int = 1

    @property
    def servers(self) -> int:
        return self.algorithm.ngpus // self.gpus_per_server

    def describe(self) -> str:
        """What runs, for ``why`` and ``params["allreduce"]``: the file, its name and shape."""
        a, g = self.algorithm, self.gpus_per_server
        per = f", {g} GPUs per server" if g > 1 else ""
        proto = "Simple" if a.proto == "Simple" else f"{a.proto} timed as Simple"
        return (
            f"MSCCL XML {a.path} ({a.name}: {a.coll}, {a.ngpus} GPUs{per}, {a.nchannels} channel"
            f"{'s' if a.nchannels > 1 else ''}, {a.nchunksperloop} chunks, {proto})"
        )


def msccl_choice(plan: Any, path: str, gpus_per_server: int = 1) -> AllReduceChoice:
    """The MSCCL XML in the file ``path`` on ``plan`` (`topolab collective --algorithm
    msccl:FILE`; ``path`` as given, relative to the current folder): read and checked
    (`read_msccl_xml`), its GPUs on servers 0 .. ngpus/``gpus_per_server`` - 1 (a plan with
    more servers leaves the rest idle). Any collective of the XML; `allreduce_schedule` makes
    its schedule. `MscclXmlError` / `UsageError` (exit 2) name the file."""
    algo = read_msccl_xml(path)
    n = int(plan.servers)
    if gpus_per_server < 1:
        raise UsageError(f"{algo.path}: gpus per server must be >= 1, not {gpus_per_server}")
    if algo.ngpus % gpus_per_server:
        raise UsageError(f"{algo.path}: ngpus={algo.ngpus} is not a multiple of {gpus_per_server} GPUs per server")
    m = MscclAllReduce(algo, gpus_per_server)
    if m.servers > n:
        raise UsageError(
            f"{algo.path}: ngpus={algo.ngpus} at {gpus_per_server} GPU{'s' if gpus_per_server > 1 else ''} "
            f"per server needs {m.servers} servers; the plan has {n}"
        )
    return AllReduceChoice(MSCCL, m.describe(), m.servers, msccl=m)


def msccl_schedule(plan: Any, path: str, nbytes: int, gpus_per_server: int = 1) -> Schedule:
    """The schedule of the MSCCL XML in ``path`` moving ``nbytes`` (nccl-tests' size of its
    collective, rounded up to whole chunks) on ``plan``'s first ngpus/``gpus_per_server``
    servers, as ``plan.servers`` ranks: `allreduce_schedule` of `msccl_choice`."""
    return allreduce_schedule(plan, msccl_choice(plan, path, gpus_per_server), nbytes)


def with_msccl_allreduce(plan: Any, path: str, text: str, gpus_per_server: int = 1) -> Any:
    """``plan`` recording the MSCCL XML ``text`` (read from ``path``) as its full-group
    AllReduce (a scenario's ``[collectives] allreduce = "msccl:FILE"``, planner.build): the
    iteration (`choose_allreduce`) runs it for every full-group bucket. The algorithm must
    span exactly the plan's servers."""
    record = {"file": str(path), "gpus_per_server": int(gpus_per_server), "xml": text}
    plan = dataclasses.replace(plan, extra={**plan.extra, MSCCL_EXTRA: record})
    plan_msccl(plan)  # checked now, not at the first bucket
    return plan


def plan_msccl(plan: Any) -> MscclAllReduce | None:
    """The MSCCL XML ``plan`` records (`with_msccl_allreduce`), read back and checked; None
    when it records none. A record that does not span the plan's servers is a `UsageError`."""
    record = getattr(plan, "extra", {}).get(MSCCL_EXTRA)
    if record is None:
        return None
    algo = _recorded_algorithm(str(record["xml"]), str(record["file"]))
    gpus_per_server = int(record.get("gpus_per_server", 1))
    n = int(plan.servers)
    if gpus_per_server < 1 or algo.ngpus != n * gpus_per_server:
        raise UsageError(
            f"{algo.path}: ngpus={algo.ngpus}, but the plan's {n} servers x {gpus_per_server} GPU"
            f"{'s' if gpus_per_server > 1 else ''} per server = {n * gpus_per_server}"
        )
    if algo.coll != "allreduce":
        raise UsageError(f"{algo.path}: coll={algo.coll!r}: the plan's AllReduce must be an allreduce")
    return MscclAllReduce(algo, gpus_per_server)


@lru_cache(maxsize=8)
def _recorded_algorithm(text: str, path: str) -> Algorithm:
    """The checked algorithm of a plan's record, parsed once per text (every bucket of an
    iteration, every collective of a training job asks)."""
    return checked_algorithm(text, path)


def _rings(rings: Sequence[Sequence[int]]) -> Rings:
    return tuple(tuple(int(r) for r in ring) for ring in rings)


def _ring_choice(
    plan: Any, algorithm: str, reason: str, groups: list[list[list[int]]], weighted: bool
) -> AllReduceChoice:
    """Rings of every group, split by `ring_weights` when ``weighted``."""
    weights = tuple(tuple(ring_weights(plan, rings)) if weighted else None for rings in groups)
    size = len(groups[0][0])
    return AllReduceChoice(algorithm, reason, size, tuple(_rings(g) for g in groups), weights)


def choose_forest(plan: Any, nbytes: int) -> AllReduceChoice:
    """The forest AllReduce of a plan (docs/algorithms.md section 10): the packed trees, or
    the rate-weighted multi-ring when the trees would not be faster.

    The weighted rings take ``2 (n-1) S / (n sum_r b_r)`` (``b_r``: `ring_weights`), the
    kept trees about ``TREE_SCHEDULE_OVERHEAD x S / tau``; on uniform cables the rings
    reach the packing bound with no pipeline to fill, so they are the better choice there."""
    n = int(plan.servers)
    # bytes/s of goodput at the plan's rates; only the trees' rate against the rings' matters,
    # so any MTU would do
    capacities = plan_capacities(plan, mtu=DEFAULT_MTU)
    forest, packing = build_forest(capacities, n, nbytes)
    rings = allreduce_rings(plan)
    weights = ring_weights(plan, rings)
    bytes_per_gbit = cable_goodput(1e9, DEFAULT_MTU)  # plan_capacities' unit
    ring_rate = n * sum(weights) * bytes_per_gbit / (2 * (n - 1))  # S / time, as tau
    if ring_rate * TREE_SCHEDULE_OVERHEAD >= packing.tau:
        why = (
            f"rate-weighted rings: {ring_rate / packing.tau:.3f}x the packing rate of the {len(forest)} "
            f"kept trees, whose schedule runs at about 1/{TREE_SCHEDULE_OVERHEAD:g} of it"
        )
        return AllReduceChoice("forest rings", why, n, (_rings(rings),), (tuple(weights),), packing=packing)
    why = f"{len(forest)} packed trees: {packing.tau / ring_rate:.3f}x the rate of the rate-weighted rings"
    return AllReduceChoice("forest trees", why, n, trees=tuple(forest), packing=packing)


def choose_allreduce(plan: Any, nbytes: int, group_size: int | None = None, algorithm: str = AUTO) -> AllReduceChoice:
    """The AllReduce of ``nbytes`` per group that ``plan`` runs over its coset groups of
    ``group_size`` members (default: all servers). ``algorithm = "auto"`` is the iteration's
    rule (module docstring); one of `ALGORITHMS` is that algorithm on the plan's full group
    (``topoopt``: the plan's rings, rate-weighted when the cables differ; ``forest``:
    `choose_forest`; ``hierarchical`` on a plan that is not: one dimension of n servers);
    ``msccl:FILE`` the MSCCL XML in FILE, one GPU per server (`msccl_choice`)."""
    n = int(plan.servers)
    size = n if group_size is None else int(group_size)
    if algorithm == AUTO:
        recorded = plan_msccl(plan) if size == n else None
        if recorded is not None:
            why = f"[collectives] allreduce: {recorded.describe()}"
            return AllReduceChoice(MSCCL, why, n, msccl=recorded)
        if plan.topology == "hierarchical":
            return AllReduceChoice(
                "hierarchical", "hierarchical plan: reduce-scatter and all-gather per dimension", size
            )
        if size == n and (heterogeneous(plan) or not has_ring(plan)):
            forest = choose_forest(plan, nbytes)
            why = HETEROGENEOUS_WHY if heterogeneous(plan) else NO_RING_WHY
            return dataclasses.replace(forest, reason=f"{why}; {forest.reason}")
        if heterogeneous(plan):
            why = f"{HETEROGENEOUS_WHY}; coset groups run rings"
            return _ring_choice(plan, "weighted multi-ring", why, group_rings(plan, size), True)
        return _ring_choice(plan, "multi-ring", UNIFORM_WHY, group_rings(plan, size), False)
    if size != n:
        raise ValueError(f"algorithm {algorithm!r} runs over all {n} servers, not groups of {size}")
    path = msccl_file(algorithm)
    if path is not None:  # one GPU per server: `msccl_choice` maps more
        return msccl_choice(plan, path)
    if algorithm == "forest":  # rate-proportional spanning trees (docs/algorithms.md section 10)
        return choose_forest(plan, nbytes)
    if algorithm == "hierarchical":
        return AllReduceChoice("hierarchical", "reduce-scatter and all-gather dimension by dimension", n)
    if algorithm == "ring":
        return _ring_choice(plan, "ring", "one ring: the plan's first", [allreduce_rings(plan)[:1]], False)
    if algorithm == "topoopt":
        hetero = heterogeneous(plan)
        why = f"{HETEROGENEOUS_WHY}: rate-weighted rings" if hetero else UNIFORM_WHY
        return _ring_choice(
            plan, "weighted multi-ring" if hetero else "multi-ring", why, [allreduce_rings(plan)], hetero
        )
    if algorithm in ("tree", "dbtree"):
        why = "NCCL's binary tree" if algorithm == "tree" else "NCCL's double binary tree"
        return AllReduceChoice(algorithm, why, n)
    raise ValueError(f"unknown algorithm {algorithm!r} (expected one of {', '.join(ALGORITHMS)})")


def allreduce_schedule(plan: Any, choice: AllReduceChoice, nbytes: int, segment_bytes: int | None = None) -> Schedule:
    """The schedule of a full-group ``choice`` (from `choose_allreduce` for the same ``nbytes``):
    ``ring``: one ring; multi-rings: every ring concurrently, the buffer split by the weights;
    ``tree`` / ``dbtree``: NCCL's (binary, double binary) trees; the forest's trees or rings
    (``params["shape"]`` and ``params["why"]`` say which and why); ``hierarchical``:
    reduce-scatter and all-gather dimension by dimension, pipelined or one dimension after the
    other as the plan's ``extra["schedule"]`` says (a plan that is not hierarchical: one
    dimension of n servers, the bidirectional ring over servers 0 .. n-1, pipelined). Tree and
    1-D ring edges are logical (relayed by the hosts where not cabled). ``msccl``: the XML's
    threadblocks as streams (`planner.collectives.msccl_xml.translate`) on servers 0 ..
    ``choice.group_size`` - 1 of the plan's, ``nbytes`` rounded up to whole chunks."""
    n = int(plan.servers)
    if choice.msccl is not None:
        m = choice.msccl
        sched = translate(m.algorithm, m.servers, nbytes, m.gpus_per_server, ranks=n)
        sched.params.update(why=choice.reason)
        return sched
    if choice.group_size != n:
        raise ValueError(f"a schedule of the full group of {n}, not groups of {choice.group_size}")
    algorithm = choice.algorithm
    if algorithm == "hierarchical":
        chunks = 1 if plan.extra.get("schedule") == "sequential" else PIPELINE_CHUNKS
        if plan.topology != "hierarchical":
            return hierarchical_allreduce([n], ["ring"], nbytes, chunks)
        return hierarchical_allreduce_for_plan(plan, nbytes, chunks)
    if algorithm == "forest trees":
        assert choice.trees is not None and choice.packing is not None
        segment = segment_bytes or FOREST_SEGMENT_BYTES
        sched = forest_schedule(list(choice.trees), choice.packing, n, nbytes, segment_bytes=segment, path=plan.path)
    elif algorithm == "forest rings":
        assert choice.packing is not None
        rings, weights = choice.rings[0], choice.weights[0]
        sched = multiring_allreduce(n, nbytes, rings, algorithm="forest", weights=weights)
        sched.params.update(shape="rings", tau=choice.packing.tau)
    elif algorithm == "ring":
        return ring_allreduce(n, nbytes, choice.rings[0][0])
    elif algorithm in ("multi-ring", "weighted multi-ring"):
        return multiring_allreduce(n, nbytes, choice.rings[0], weights=choice.weights[0])
    elif algorithm == "tree":
        return tree_allreduce(n, nbytes, segment_bytes or DEFAULT_SEGMENT_BYTES)
    elif algorithm == "dbtree":
        return dbtree_allreduce(n, nbytes, segment_bytes or DEFAULT_SEGMENT_BYTES)
    else:
        raise ValueError(f"no schedule for the AllReduce {algorithm!r}")
    sched.params.update(why=choice.reason)
    return sched


def allreduce_for_plan(plan: Any, algorithm: str, nbytes: int, segment_bytes: int | None = None) -> Schedule:
    """The schedule of ``algorithm`` (one of `ALGORITHMS`) on the plan's full group:
    `allreduce_schedule` of `choose_allreduce`."""
    return allreduce_schedule(plan, choose_allreduce(plan, nbytes, algorithm=algorithm), nbytes, segment_bytes)
