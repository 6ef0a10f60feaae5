"""A placement as a schedule the workers execute (contract.schedule format).

Per server (rank):

- stream ``compute``: the forward of its groups in the placement's order, then their
  backward in the reverse order, each a timed wait of ``seconds x time_scale`` (the
  time-dilation factor of contract.physics, so compute keeps the real cluster's ratio to
  the slowed-down emulated links);
- for every operator-graph edge whose ends are on different servers, the activation goes
  forward (send after the producer's forward, the consumer's forward waits for the recv)
  and its gradient comes back (send after the consumer's backward, the producer's backward
  waits for the recv). Sends to one peer share stream ``mp>peer`` and receives from one
  peer stream ``mp<peer``, both in the order the sender produces them, so messages of a
  pair are matched first in, first out and no receive waits behind one sent later.

Each transfer has its own region of the ``act`` buffer and a copy check, so every worker
verifies every tensor it received. Given a network with a per-destination allocation
(docs/algorithms.md section 4.1), a transfer between an allocated pair is split over the
pair's planes as `planner.collectives.p2p` splits it: consecutive pieces of its region in
proportion to the planes' rates, one send/recv per plane on the pair's streams, each plane
with its own tag (planes are separate connections, so only messages of one plane keep their
order); the consumer waits for every piece. Transfer sizes are ``bytes x payload_scale`` (a multiple
of 4 bytes, at least 4), for smoke runs with small buffers.

The loss barrier of the cost model is implied by a single sink (every group is then an
ancestor of the sink, whose backward follows its own forward); graphs with several sinks
are rejected.
"""

from __future__ import annotations

from contract.errors import UsageError
from contract.network import Network
from contract.schedule import Check, Schedule, ScheduleBuilder

from ..collectives.p2p import plane_pieces
from .cost import Placement, TaskGraph

FLOAT_BYTES = 4
BUFFER = "act"


def _scaled(nbytes: float, payload_scale: float) -> int:
    return max(FLOAT_BYTES, int(nbytes * payload_scale) // FLOAT_BYTES * FLOAT_BYTES)


def placement_schedule(
    tasks: TaskGraph,
    placement: Placement,
    servers: int,
    time_scale: float = 1.0,
    payload_scale: float = 1.0,
    network: Network | None = None,
) -> Schedule:
    """The placement's iteration as a schedule (module docstring); transfers split over the
    planes of ``network``'s allocation when it has one for their pair."""
    if len(tasks.sinks) != 1:
        raise UsageError(
            f"placement schedule: the operator graph has {len(tasks.sinks)} sinks; it needs one (the loss)"
        )
    a = placement.assignment
    b = ScheduleBuilder(servers, "placement")
    compute: dict[tuple[str, int], tuple[int, int]] = {}  # (pass, group) -> (rank, op id)
    sequence: list[list[tuple[str, int]]] = [[] for _ in range(servers)]
    for g in placement.order:
        sequence[a[g]].append(("f", g))
    for g in reversed(placement.order):
        sequence[a[g]].append(("b", g))
    for rank, tasks_of_rank in enumerate(sequence):
        for phase, g in tasks_of_rank:
            seconds = tasks.forward[g] if phase == "f" else tasks.backward[g]
            compute[(phase, g)] = (rank, b.compute(rank, "compute", seconds * time_scale))
    # transfers, listed per sender in the order its compute stream produces them
    outgoing: list[
        tuple[int, int, int, str, int, int]
    ] = []  # (src rank, its compute op, dst, phase, producer, consumer)
    for u, v, _ in tasks.edges:
        if a[u] != a[v]:
            outgoing.append((a[u], compute[("f", u)][1], a[v], "f", u, v))
            outgoing.append((a[v], compute[("b", v)][1], a[u], "b", v, u))
    outgoing.sort()
    nbytes = {(u, v): nb for u, v, nb in tasks.edges}
    offset = 0
    plane_tags = [b.new_tag() for _ in range(1 + (network.planes if network is not None else 0))]
    waits: dict[tuple[str, int], list[int]] = {}
    for src, producer_op, dst, phase, producer, consumer in outgoing:
        edge = (producer, consumer) if phase == "f" else (consumer, producer)
        length = _scaled(nbytes[edge], payload_scale)
        for plane, piece_offset, piece in plane_pieces(network, src, dst, offset, length, FLOAT_BYTES):
            tag = plane_tags[plane]
            b.send(src, f"mp>{dst}", dst, BUFFER, piece_offset, piece, tag, after=[producer_op], plane=plane)
            recv = b.recv(dst, f"mp<{src}", src, BUFFER, piece_offset, piece, tag, "copy")
            waits.setdefault((phase, consumer), []).append(recv)
        b.check(Check("copy", BUFFER, offset, length, src=src, dst=dst))
        offset += length
    for key, recvs in waits.items():
        rank, op = compute[key]
        b.add_after(rank, op, recvs)
    b.buffer(BUFFER, max(offset, FLOAT_BYTES))
    b.params.update(
        placement=[{"group": tasks.names[g], "server": a[g]} for g in placement.order],
        predicted_makespan_s=placement.makespan * time_scale,
        time_scale=time_scale,
        payload_scale=payload_scale,
    )
    return b.build()
