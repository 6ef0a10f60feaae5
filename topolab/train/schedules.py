"""The schedules a training job's collectives run, made on demand by `topolab train`.

The `topolab` backend of ``torch.distributed`` (topolab_torch) runs inside the emulated hosts
and imports no planner: for every collective it has not run before it asks the train driver
over the control channel (`ControlServer`, ZeroMQ over ipc://) for its part of a schedule,
named by a `topolab_torch.protocol` key: the collective, the element count, the item size
and the root. `ScheduleService` makes it once per key, for every rank:

- ``allreduce``: the plan's one AllReduce choice for the whole group (`plan_allreduce`:
  TopoOpt's multi-ring, the forest on cables of different rates, the hierarchical schedule
  of a hierarchical plan; one ring through a switch);
- ``allgather``, ``reduce_scatter``, ``broadcast``: the same rings
  (`planner.collectives.phases`); ``alltoall``: every pair directly; ``barrier``: an
  AllReduce of one element per rank;

and predicts its time with the flow-level model (`planner.cost.predict`) on the emulated links;
after the job, again with the software's cost per op that the backend's calibration runs
measured (`ScheduleService.op_overhead`, `predictions`).
Schedules are generated for float32 elements and scaled to the tensor's item size (every
offset and length is a multiple of 4 bytes, so of whole items after scaling).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import zmq

from contract.emulation import EmulatedRates
from contract.schedule import Schedule
from planner.collectives.phases import direct_alltoall, ring_allgather, ring_broadcast, ring_reduce_scatter
from planner.cost.predict import Network, plan_network, predict
from topolab_torch import protocol
from workers.protocol import CONTROL_MESSAGE_BYTES, limit_frames

from ..common.calibrate import critical_ops, twin_bytes
from ..common.prediction import network_args


def plan_allreduce(plan: Any, nbytes: int) -> Schedule:
    """The plan's AllReduce of ``nbytes`` over every server: the one choice the training
    iteration makes for a full-group bucket (`planner.collectives.from_plan.choose_allreduce`),
    and its schedule. The only call into that choice here."""
    from planner.collectives.from_plan import allreduce_schedule, choose_allreduce

    choice = choose_allreduce(plan, nbytes)
    sched = allreduce_schedule(plan, choice, nbytes, None)
    sched.params.setdefault("why", choice.reason)
    return sched


def plan_ring_set(plan: Any) -> tuple[list[list[int]], list[float] | None]:
    """The rings (and their weights) the other collectives run: the full-group AllReduce's
    rings, as the plan's ring choice gives them (weighted on cables of different rates)."""
    from planner.collectives.from_plan import choose_allreduce

    choice = choose_allreduce(plan, 0, algorithm="topoopt")
    weights = choice.weights[0] if choice.weights else None
    return [list(ring) for ring in choice.rings[0]], None if weights is None else list(weights)


def gloo_ring(n: int, nbytes: int) -> Schedule:
    """Gloo's AllReduce as the model sees it: one ring over the ranks in rank order, relayed by
    the hosts where ranks are not cabled (what ``--backend gloo`` is predicted to take)."""
    from planner.collectives.rings import ring_allreduce

    return ring_allreduce(n, nbytes)


def scaled(schedule: Schedule, itemsize: int) -> Schedule:
    """``schedule`` (float32 elements) for items of ``itemsize`` bytes: every offset, length
    and buffer size times itemsize / 4 (exact: all are multiples of 4)."""
    if itemsize == 4:
        return schedule
    d = schedule.to_dict()
    for buf in d["buffers"]:
        buf["bytes"] = buf["bytes"] * itemsize // 4
        buf["dtype"] = f"u{itemsize}" if itemsize in (1, 2, 8) else "float32"
    for prog in d["programs"]:
        for ops in prog.values():
            for op in ops:
                if op["op"] in ("send", "recv"):
                    op["offset"] = op["offset"] * itemsize // 4
                    op["length"] = op["length"] * itemsize // 4
    d["checks"] = []
    return Schedule.from_dict(d)


@dataclass
class Made:
    """One key's schedule: what every rank runs and what the model predicts."""

    key: dict[str, Any]
    algorithm: str
    why: str
    buffers: dict[str, int]  # name -> bytes
    programs: list[dict[str, Any]]  # per rank: {stream: [op, ...]}
    predicted_s: float
    schedule: Schedule
    gloo_predicted_s: float | None = None  # allreduce only: one ring in rank order
    uses: int = 0

    @property
    def nbytes(self) -> int:
        """One rank's bytes of the collective (as the backend records it)."""
        return int(self.key["count"]) * int(self.key["itemsize"])

    def reply(self, rank: int) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm,
            "buffers": self.buffers,
            "streams": self.programs[rank],
            "predicted_s": self.predicted_s,
        }


@dataclass
class ScheduleService:
    """Makes (once per key) and predicts the schedules of the job's collectives."""

    plan: Any
    rates: EmulatedRates  # the built network's (``net.rates``)
    netem: bool = False  # the plan's link latency emulated (``net.netem``)
    made: dict[str, Made] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.n = int(self.plan.servers)
        self.network = self.emulated(0.0)

    def emulated(self, op_overhead_s: float) -> Network:
        """The emulated network as `topolab run` predicts it (`topolab.common.prediction.network_args`),
        with ``op_overhead_s`` of software per op."""
        return plan_network(self.plan, **network_args(self.plan, self.rates, self.netem, op_overhead_s))

    def get(self, key: dict[str, Any]) -> Made:
        name = protocol.key_name(key)
        with self.lock:
            if name not in self.made:
                self.made[name] = self._make(key)
            made = self.made[name]
            made.uses += 1
            return made

    def predict(self, schedule: Schedule) -> float:
        return float(predict(schedule, self.network).seconds)

    def op_overhead(self, calibration_s: float | None) -> float:
        """The software's cost per op: the calibration runs' measured time (the zero-payload
        twin of the plan's AllReduce) over the ops on its critical path
        (`topolab.common.calibrate.critical_ops`); 0 without them."""
        made = self.made.get(protocol.key_name(protocol.CALIBRATION_KEY))
        if not calibration_s or made is None:
            return 0.0
        ops = critical_ops(self.plan, made.schedule)
        return calibration_s / ops if ops > 0 else 0.0

    def predictions(self, op_overhead_s: float) -> dict[tuple[str, int], float]:
        """(kind, bytes) -> seconds of every schedule made, with ``op_overhead_s`` per op."""
        network = self.emulated(op_overhead_s)
        return {(m.key["kind"], m.nbytes): float(predict(m.schedule, network).seconds) for m in self.made.values()}

    def _make(self, key: dict[str, Any]) -> Made:
        kind, count, itemsize = str(key["kind"]), int(key["count"]), int(key["itemsize"])
        n = self.n
        rings, weights = plan_ring_set(self.plan)
        gloo = None
        if kind == "allreduce":
            sched = plan_allreduce(self.plan, 4 * count)
        elif kind == "barrier":
            sched = plan_allreduce(self.plan, 4 * n)
        elif kind == "calibration":  # the zero-payload twin of the plan's AllReduce
            sched = plan_allreduce(self.plan, twin_bytes(self.plan))
        elif kind == "allgather":
            sched = ring_allgather(n, 4 * count, rings, weights)
        elif kind == "reduce_scatter":
            sched = ring_reduce_scatter(n, 4 * count, rings, weights)
        elif kind == "broadcast":
            sched = ring_broadcast(n, 4 * count, int(key.get("root", 0)), rings, weights)
        elif kind == "alltoall":
            sched = direct_alltoall(n, 4 * count)
        else:
            raise ValueError(f"unknown collective {kind!r}")
        sched = scaled(sched, itemsize)
        if kind == "allreduce":
            gloo = self.predict(scaled(gloo_ring(n, 4 * count), itemsize))
        d = sched.to_dict()
        why = str(sched.params.get("why", ""))
        algorithm = sched.algorithm
        if "shape" in sched.params:  # the forest: trees or rings
            algorithm += f" ({sched.params['shape']})"
        elif len(sched.params.get("rings", ())) > 1:
            algorithm += f" ({len(sched.params['rings'])} rings)"
        return Made(
            key=dict(key),
            algorithm=algorithm,
            why=why,
            buffers={b["name"]: int(b["bytes"]) for b in d["buffers"]},
            programs=d["programs"],
            predicted_s=self.predict(sched),
            schedule=sched,
            gloo_predicted_s=gloo,
        )


class ControlServer:
    """The driver's end of the control channel (a ROUTER on an ipc:// endpoint), served by a
    thread: ``hello`` from every rank (its data-plane address) is answered, once all ``n``
    have said it, by ``peers``; ``schedule`` by the rank's part of the key's schedule."""

    def __init__(self, endpoint: str, n: int, service: ScheduleService) -> None:
        self.endpoint = endpoint
        self.n = n
        self.service = service
        self.addresses: dict[int, str] = {}
        self.error: str | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="topolab-train-control", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10.0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _serve(self) -> None:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        limit_frames(sock, CONTROL_MESSAGE_BYTES)  # hello and schedule requests: a few numbers each
        try:
            sock.bind(self.endpoint)
            self._ready.set()
            waiting: list[bytes] = []
            while not self._stop.is_set():
                if not sock.poll(100):
                    continue
                ident, payload = sock.recv_multipart()
                msg = protocol.decode(payload)
                kind = msg.get("type")
                if kind == "hello":
                    self.addresses[int(msg["rank"])] = str(msg["address"])
                    waiting.append(ident)
                    if len(self.addresses) == self.n:
                        peers = {str(r): a for r, a in self.addresses.items()}
                        for who in waiting:
                            sock.send_multipart([who, protocol.encode("peers", peers=peers)])
                        waiting = []
                elif kind == "schedule":
                    try:
                        reply = self.service.get(msg["key"]).reply(int(msg["rank"]))
                        sock.send_multipart([ident, protocol.encode("schedule", **reply)])
                    except (ValueError, KeyError) as exc:
                        sock.send_multipart([ident, protocol.encode("error", message=str(exc))])
        except zmq.ZMQError as exc:
            self.error = f"control channel {self.endpoint}: {exc}"
            self._ready.set()
        finally:
            sock.close(linger=0)
            ctx.term()
