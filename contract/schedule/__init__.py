"""The schedule format: per-rank programs of send / recv / compute ops, as plain JSON data.

A schedule is what the planner decides about *how* bytes move in a collective (or in a
whole training iteration); the workers execute it, the data-level simulator
(`planner.collectives.simulate`) proves it reduces correctly, and the timing model predicts
it. Everything is plain data (``Schedule.to_dict()`` is JSON), so no component needs the
planner's objects. The format is documented for users of the JSON in docs/schedules.md.

Model
-----
- Every rank has named buffers (``grad`` of S bytes of float32, ``act`` for activations...).
- Every rank runs a program: named *streams* of ops. Ops of one stream run in order; streams
  run concurrently (one per ring, so multi-ring AllReduce keeps every interface busy). An op
  also waits for the ops listed in its ``after`` (ids of ops of the same rank, any stream).
- ``send(peer, buffer, offset, length, tag)`` is *eager*: it completes when the bytes are
  handed to the transport, the receiver need not have posted its recv. The data sent is the
  region's content at the time the send starts (workers enforce this with tracked zero-copy
  sends: a region is never overwritten while a send of it is in flight).
- ``recv(peer, buffer, offset, length, tag, mode)`` completes when ``length`` bytes have
  arrived and been reduced into (``mode="reduce"``: elementwise sum) or copied to
  (``mode="copy"``) the region.
- Matching: messages from ``src`` to ``dst`` with the same ``tag`` are matched first in,
  first out; the k-th send from src to dst with tag t pairs with the k-th recv at dst from
  src with tag t, and their lengths must be equal.
- ``compute(seconds)`` occupies its stream for that long (forward/backward compute of a
  training iteration).

Offsets and lengths are in bytes and must be multiples of the buffer's item size.

The package: `records` (`Op`, `Buffer`, `Check` and the codes of an op's kind and a recv's
mode), `program` (a rank's program as arrays: `Program`), `document` (`Schedule`: the whole
schedule, its JSON and its validation) and `builder` (`ScheduleBuilder`, which every
schedule generator writes with, and `split_region`). Import them from here.
"""

from .builder import ScheduleBuilder, split_region
from .document import SCHEDULE_FORMAT, Schedule
from .program import Program, StreamOps
from .records import COMPUTE, MODES, OP_KINDS, RECV, RECV_MODES, SEND, Buffer, Check, Op

__all__ = [
    "COMPUTE",
    "MODES",
    "OP_KINDS",
    "RECV",
    "RECV_MODES",
    "SCHEDULE_FORMAT",
    "SEND",
    "Buffer",
    "Check",
    "Op",
    "Program",
    "Schedule",
    "ScheduleBuilder",
    "StreamOps",
    "split_region",
]
