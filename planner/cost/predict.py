"""Flow-level prediction of a schedule's run time on a plan's network.

This is the model the end-to-end run compares its measurements with, so it executes
exactly the schedule the workers run (contract.schedule), op by op:

- streams run concurrently; ops of one stream in order; an op also waits for its ``after``
  ops (the same rules the workers' executor follows);
- ``compute`` occupies its stream for its seconds;
- ``send`` is eager: it hands a message to the (src, dst) connection and the stream goes
  on. A connection is one TCP stream, so messages between one pair are served first in,
  first out (only the head message is on the wire);
- a send on plane ``p >= 1`` (a per-destination allocation, docs/algorithms.md section 4.1)
  is its own connection and follows ``Network.plane_path(src, dst, p)`` instead, with its
  allocated rate assured (the emulator's per-destination HTB class: rate = the allocation,
  ceil = the cable): such flows first get their assured rates (scaled down on a link where
  plane-0 flows would otherwise get less than their head-count share), then every flow
  shares what is left of each link max-min fairly;
- every message is one flow along the plan's route (``Plan.path``: relayed hops included,
  the forwarding tax of docs/algorithms.md section 4); directed links are shared max-min fairly among
  the flows crossing them (the TCP steady state, computed by progressive filling), each at
  the TCP goodput of the link (payload / wire bytes at the MTU); where parallel cables join
  two nodes the link is their sum, but one connection gets at most one cable (a multipath
  route hashes it onto one: ``Network.connection_cap``, a link of its own in the sharing);
- a message arrives ``hops * alpha`` after its last byte left (per-hop latency, 1.5) and a
  ``recv`` completes when its message has arrived and been reduced or copied
  (``reduce_bytes / reduce_bytes_per_s``, ``reduce_bytes`` capped at the size of the last
  pipelined chunk: the executor reduces chunks as they arrive);
- every send and recv costs the rank ``op_overhead_s`` of processor time (the workers'
  software cost per op, measured on the machine: see topolab.common.calibrate); a rank's ops
  take turns on its processor, so many small ops add up as they do in the workers. With
  ``Network.cores`` the ranks share that many processors, as the workers of one machine
  share its cores: the ranks with an op due share the cores equally, at most one each
  (processor sharing, kept in virtual time: `replay.events.EventReplay.cpu_submit`), so an
  op costs more while many ranks are busy and ``op_overhead_s`` alone when few are; a
  recv's reduce follows it.

Two replays, one prediction (`planner.cost.replay`). When no two connections ever share a
link (TopoOpt's rings: each ring edge is a cable of its own) and ops cost no processor time,
every message runs alone at its path's rate and each op's end follows from the ops it waits
for: `replay.dedicated_links` computes them in rounds over the schedule's arrays, the next
op of every stream at once. Any other schedule is replayed event by event
(`replay.events`, which re-solves the max-min rates of `replay.max_min` only for the flows
a change can reach), and the first agrees with it to rounding. The network they replay on
is `replay.network_view`'s `Network` (`plan_network` makes one of a plan); what they give,
`replay.results`' `Prediction` and `Timeline`.

The prediction is in the network's own time unit: give it emulated link rates to predict an
emulated run, then divide by the time-scale factor to get the real cluster's time.

`predict_timeline` runs the same replay and records beside it when each op started and ended
and when each message was on the wire (`Timeline`, of the first ranks only if asked): what a
trace of the predicted iteration draws (topolab.results.trace_events). Recording changes no time.
"""

from __future__ import annotations

from contract.schedule import Schedule

from .collector import collector_paused
from .replay.dedicated_links import dedicated_replay, dedicated_replay_timed
from .replay.events import EventReplay
from .replay.network_view import Network, plan_network
from .replay.results import Prediction, Timeline

__all__ = ["Network", "Prediction", "Timeline", "plan_network", "predict", "predict_timeline"]


def predict(schedule: Schedule, network: Network, events: bool = False) -> Prediction:
    """Predict one execution of ``schedule`` (a contract.schedule Schedule) on ``network``:
    in rounds over all ranks at once when no two connections share a link
    (`replay.dedicated_links`), else (or with ``events``) event by event (`replay.events`)."""
    with collector_paused():
        fast = None if events else dedicated_replay(schedule, network)
        return fast if fast is not None else EventReplay(schedule, network).run()


def predict_timeline(
    schedule: Schedule, network: Network, ranks: int | None = None, events: bool = False
) -> tuple[Prediction, Timeline]:
    """`predict`, recording when each op of ranks ``0 .. ranks - 1`` (all by default) started
    and ended and when each message they sent or received was on the wire (`Timeline`). The
    replay is the one `predict` runs, recording beside it, so the prediction is the same."""
    record = schedule.ranks if ranks is None else max(0, min(ranks, schedule.ranks))
    with collector_paused():
        fast = None if events else dedicated_replay_timed(schedule, network, record)
        if fast is not None:
            pred, timeline = fast
            assert timeline is not None
            return pred, timeline
        replay = EventReplay(schedule, network, record)
        pred = replay.run()
        assert replay.rec is not None
        return pred, replay.rec.timeline(schedule)
