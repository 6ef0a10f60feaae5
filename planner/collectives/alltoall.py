"""All-to-all: every rank sends ``nbytes_per_pair`` to every other rank, single- or multipath.

Every ordered pair (s, d) gets its own region of the ``a2a`` buffer (the same offsets on every
rank), received with ``mode="copy"`` and verified by a copy check, so the workers prove each
byte arrived. Routing:

- ``single``: one send per pair on plane 0 (the network's destination route);
- ``planned``: each pair's bytes split over the planes of the network's per-destination
  allocation, in proportion to the allocated rates (docs/algorithms.md section 4.1), one
  send/recv per plane with its own tag (`planner.collectives.p2p.plane_pieces`).

`alltoall_for_plan` computes the allocation of a uniform all-to-all on the plan's network
(`planner.bandwidth.multipath`) when the plan carries none.
"""

from __future__ import annotations

import dataclasses

from contract.network import Network
from contract.plan import Plan
from contract.schedule import Schedule, ScheduleBuilder

from ..bandwidth.multipath import allocate_for_plan
from .p2p import add_p2p_transfers, all_to_all

ROUTINGS = ("single", "planned")
BUFFER = "a2a"


def alltoall(n: int, nbytes_per_pair: int, routing: str = "single", network: Network | None = None) -> Schedule:
    """The all-to-all schedule of ``n`` ranks (module docstring); ``planned`` needs a
    ``network`` with an allocation."""
    if routing not in ROUTINGS:
        raise ValueError(f"routing {routing!r} is not one of {', '.join(ROUTINGS)}")
    if n < 2:
        raise ValueError(f"all-to-all needs at least 2 ranks, got {n}")
    if routing == "planned" and (network is None or not network.allocation):
        raise ValueError("routing 'planned' needs a network with a per-destination allocation")
    b = ScheduleBuilder(n, f"alltoall/{routing}")
    add_p2p_transfers(
        b, all_to_all(range(n), nbytes_per_pair), BUFFER, 0, "a2a", network=network if routing == "planned" else None
    )
    b.params.update(nbytes_per_pair=nbytes_per_pair, routing=routing)
    return b.build()


def alltoall_for_plan(plan: Plan, nbytes_per_pair: int, routing: str = "single") -> Schedule:
    """The all-to-all of ``plan``'s servers; ``planned`` uses the plan's allocation, or the
    max-concurrent-flow allocation of this uniform all-to-all when the plan has none."""
    if routing == "planned" and not plan.allocation:
        traffic = {(s, d): float(nbytes) for s, d, nbytes in all_to_all(range(plan.servers), nbytes_per_pair)}
        plan = dataclasses.replace(plan, allocation=allocate_for_plan(plan, traffic).allocation)
    return alltoall(plan.servers, nbytes_per_pair, routing, plan.network)
