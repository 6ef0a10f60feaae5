"""Flow-level simulator of one training iteration (docs/algorithms.md section 6).

Task graph, in the order the tasks become ready:

- forward, operators in topological order: input transfers (all-gather into a
  tensor-parallel block) -> forward compute -> output transfers (block all-gather, or an
  embedding shard's lookups to every server); consumers wait for their producers' outputs;
- backward, in reverse order: backward compute (the operator's backward FLOPs) once every consumer's
  backward and the mirrored transfers are done -> mirrored input transfers -> the
  operator's gradients join an AllReduce bucket of its layout; a bucket is reduced when it
  reaches `CostConfig.bucket_bytes` (PyTorch DDP's 25 MiB), when the layout changes, or at
  the end of the backward pass;
- iteration time = makespan (the last AllReduce or backward compute).

Resources. Every server's processor and every directed link is a serial resource with a
"free at" time. A compute task starts when its inputs are ready and its servers are free;
its servers are busy for their share. A network task loads each link it crosses with the
bytes routed over it (`NetworkModel.loads`); each link serves its share after its previous
tasks (FIFO), and the task ends when its slowest link is done, plus the pipeline fill:
transfers are cut into `CostConfig.segment_bytes` segments (1 MiB, as in the authors'
simulator) and store-and-forwarded, so a path of h hops adds (h-1) segment times and h
per-hop latencies alpha. Each bucket's AllReduce is the one the workers run for its group
size (`planner.collectives.from_plan.choose_allreduce`, `NetworkModel.allreduce_unit_loads`).
Ring AllReduce of S bytes over k members on P rings: each ring edge carries
2 (k-1) S w_r / (k sum w) over the links of its route (w_r: the ring's weight, equal on
uniform cables), plus 2 (k-1) x hops x alpha; on a TopoOpt group with its own rings that is
exactly T = 2(k-1)S/(kPB) + 2(k-1) alpha. The forest's trees: each tree edge carries the
tree's share of S both ways, plus 2 x height x alpha.

Approximations (what makes an evaluation take milliseconds, not seconds):
- Tasks are aggregated over servers: an operator's forward compute is ONE task on all its
  servers (SPMD), and all flows of one transfer step form ONE task whose per-link loads
  are summed; links inside one task are served independently (fluid, no per-segment
  contention between flows of the same task). Dependencies are global barriers per task.
- Links are FIFO in the order tasks are issued; no priorities, no preemption.
- A non-blocking switch is its server links (the switch itself never congests); a
  similar-cost Fat-tree is modelled as such a switch with its per-server bandwidth.
- Per-sample compute uses the zoo's FLOPs at the scenario's device rate; memory limits
  and optimizer updates are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contract.plan import Plan, Workload

from ...model.opgraph import OpGraph
from ...strategy.strategies import Flows, Strategy, op_traffic
from ..iteration import DDP_BUCKET_BYTES
from .network import NetworkModel


@dataclass(frozen=True)
class CostConfig:
    batch: int = Workload.batch_per_server  # samples per server per iteration
    device_tflops: float = Workload.device_tflops
    segment_bytes: int = 1 << 20
    bucket_bytes: int = DDP_BUCKET_BYTES


@dataclass(frozen=True)
class IterationCost:
    """The simulator's prediction for one iteration (seconds)."""

    iteration_s: float
    compute_s: float  # forward + backward compute on the busiest server, no communication
    forward_s: float  # when the forward pass ended
    allreduce_s: float  # total duration of the AllReduce tasks (they may overlap compute)
    mp_s: float  # total duration of the model-parallel transfer tasks
    allreduce_bytes: float  # bytes the AllReduce groups reduce (sum of S over groups)
    mp_bytes: float


@dataclass
class _Resources:
    servers: np.ndarray
    links: np.ndarray


class Simulator:
    """Predicts iteration times of strategies on one plan; caches per-plan link loads.

    Build one per plan (`Simulator(plan, graph, config)`) and call `iteration(strategy)`
    as often as needed: transfers of an operator under a given choice are routed once.
    """

    def __init__(self, plan: Plan, graph: OpGraph, config: CostConfig | None = None):
        self.plan = plan
        self.graph = graph
        self.config = config or CostConfig()
        self.net = NetworkModel(plan)
        self.alpha = plan.latency_us * 1e-6
        self._flow_cache: dict[tuple, tuple[np.ndarray, np.ndarray, float, float]] = {}
        self._allreduce_cache: dict[int, tuple[np.ndarray, np.ndarray, float]] = {}
        self._traffic_cache: dict[tuple, object] = {}
        self.evaluations = 0

    # ---- cached pieces -----------------------------------------------------------
    def _traffic(self, strategy: Strategy, i: int):
        preds = tuple(strategy[p] for p in self.graph.preds[i])
        key = (i, strategy[i], preds)
        t = self._traffic_cache.get(key)
        if t is None:
            t = op_traffic(self.graph, strategy, i, self.plan.servers, self.config.batch, self.config.device_tflops)
            self._traffic_cache[key] = t
        return t

    def _flow_task(self, key: tuple, flows: Flows) -> tuple[np.ndarray, np.ndarray, float, float]:
        """(link ids, seconds per link, fill seconds, total bytes) of a transfer task."""
        hit = self._flow_cache.get(key)
        if hit is not None:
            return hit
        loads = self.net.loads(flows.src, flows.dst, flows.nbytes)
        ids = np.nonzero(loads)[0]
        secs = loads[ids] / self.net.capacity[ids]
        hops = self.net.hops[flows.src, flows.dst]
        h = int(hops.max()) if len(hops) else 0
        seg = min(float(self.config.segment_bytes), float(flows.nbytes.max())) if len(flows) else 0.0
        fill = h * self.alpha + max(0, h - 1) * seg / float(self.net.capacity.min())
        hit = (ids, secs, fill, flows.total())
        self._flow_cache[key] = hit
        return hit

    def _allreduce(self, m: int) -> tuple[np.ndarray, np.ndarray, float]:
        """(link ids, seconds per byte on each, latency seconds) of layout m's AllReduce."""
        hit = self._allreduce_cache.get(m)
        if hit is None:
            unit = self.net.allreduce_unit_loads(m)
            ids = np.nonzero(unit.loads)[0]
            hit = (ids, unit.loads[ids] / self.net.capacity[ids], unit.steps * unit.hops * self.alpha)
            self._allreduce_cache[m] = hit
        return hit

    # ---- scheduling primitives ----------------------------------------------------
    @staticmethod
    def _network(res: _Resources, ready: float, ids: np.ndarray, secs: np.ndarray, extra: float) -> float:
        if len(ids) == 0:
            return ready
        start = np.maximum(res.links[ids], ready)
        end = start + secs
        res.links[ids] = end
        return float(end.max()) + float(extra)

    @staticmethod
    def _compute(res: _Resources, ready: float, per_server: np.ndarray) -> float:
        busy = per_server > 0
        if not busy.any():
            return ready
        start = max(ready, float(res.servers[busy].max()))
        end = start + per_server[busy]
        res.servers[busy] = end
        return float(end.max())

    # ---- one iteration -------------------------------------------------------------
    def iteration(self, strategy: Strategy) -> IterationCost:
        """Simulate one iteration of ``strategy`` on this plan (module docstring)."""
        self.evaluations += 1
        g, n = self.graph, self.plan.servers
        res = _Resources(np.zeros(n), np.zeros(self.net.num_links))
        traffic = [self._traffic(strategy, i) for i in range(len(g))]
        out_ready = np.zeros(len(g))
        compute_total = np.zeros(n)
        mp_time = ar_time = mp_bytes = ar_bytes = 0.0

        for i in range(len(g)):  # forward
            t = traffic[i]
            ready = max((out_ready[p] for p in g.preds[i]), default=0.0)
            if len(t.fwd_in):
                ids, secs, fill, b = self._flow_task(
                    ("fi", i, strategy[i], tuple(strategy[p] for p in g.preds[i])), t.fwd_in
                )
                done = self._network(res, ready, ids, secs, fill)
                mp_time += done - ready
                mp_bytes += b
                ready = done
            ready = self._compute(res, ready, t.compute)
            compute_total += t.compute + t.backward
            if len(t.fwd_out):
                ids, secs, fill, b = self._flow_task(("fo", i, strategy[i]), t.fwd_out)
                done = self._network(res, ready, ids, secs, fill)
                mp_time += done - ready
                mp_bytes += b
                ready = done
            out_ready[i] = ready
        forward_end = float(max(out_ready.max(), res.servers.max()))

        grad_ready = np.full(len(g), forward_end)  # when the gradient of i's output is complete
        bucket_layout, bucket_bytes, bucket_ready = 0, 0.0, 0.0
        ar_chain = 0.0
        end = forward_end

        def flush(layout: int, nbytes: float, ready: float) -> float:
            nonlocal ar_chain, ar_time, ar_bytes
            ids, secs, latency = self._allreduce(layout)
            start = max(ready, ar_chain)
            done = self._network(res, start, ids, secs * nbytes, latency)
            ar_time += done - start
            ar_bytes += nbytes * layout
            ar_chain = done
            return done

        for i in reversed(range(len(g))):  # backward
            t = traffic[i]
            ready = grad_ready[i]
            if len(t.fwd_out):  # mirrored output transfer (gradients back to shards/owners)
                ids, secs, fill, b = self._flow_task(("bo", i, strategy[i]), t.fwd_out.reversed())
                done = self._network(res, ready, ids, secs, fill)
                mp_time += done - ready
                mp_bytes += b
                ready = done
            ready = self._compute(res, ready, t.backward)
            if len(t.fwd_in):
                ids, secs, fill, b = self._flow_task(
                    ("bi", i, strategy[i], tuple(strategy[p] for p in g.preds[i])), t.fwd_in.reversed()
                )
                done = self._network(res, ready, ids, secs, fill)
                mp_time += done - ready
                mp_bytes += b
                ready = done
            for p in g.preds[i]:
                grad_ready[p] = max(grad_ready[p], ready)
            end = max(end, ready)
            if t.ar_layout and t.ar_bytes > 0:
                if bucket_bytes and bucket_layout != t.ar_layout:
                    end = max(end, flush(bucket_layout, bucket_bytes, bucket_ready))
                    bucket_bytes = 0.0
                bucket_layout = t.ar_layout
                bucket_bytes += t.ar_bytes
                bucket_ready = ready
                if bucket_bytes >= self.config.bucket_bytes:
                    end = max(end, flush(bucket_layout, bucket_bytes, bucket_ready))
                    bucket_bytes = 0.0
        if bucket_bytes:
            end = max(end, flush(bucket_layout, bucket_bytes, bucket_ready))
        end = max(end, float(res.servers.max()))
        return IterationCost(
            iteration_s=end,
            compute_s=float(compute_total.max()),
            forward_s=forward_end,
            allreduce_s=ar_time,
            mp_s=mp_time,
            allreduce_bytes=ar_bytes,
            mp_bytes=mp_bytes,
        )


def simulate(plan: Plan, graph: OpGraph, strategy: Strategy, config: CostConfig | None = None) -> IterationCost:
    """One-shot convenience wrapper around `Simulator`."""
    return Simulator(plan, graph, config).iteration(strategy)
