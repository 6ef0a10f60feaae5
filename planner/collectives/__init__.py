"""Collective schedules as data: generators, the JSON format and a data-level simulator.

Generators take plain ints and lists (not planner objects) and return a `Schedule`; see
docs/schedules.md for the format the workers and the timing model read.
"""

from contract.schedule import SCHEDULE_FORMAT, Buffer, Check, Op, Schedule, ScheduleBuilder, split_region

from .p2p import add_p2p_transfers, all_to_all, p2p_transfers
from .rings import (
    add_multiring_allreduce,
    add_ring_allreduce,
    coset_rings,
    grouped_allreduce,
    multiring_allreduce,
    ring_allreduce,
    stride_ring,
    subgroup_allreduce,
    topoopt_rings,
)
from .simulate import ScheduleError, make_inputs, simulate_and_verify, simulate_schedule, verify
from .trees import (
    add_dbtree_allreduce,
    add_tree_allreduce,
    btree_parents,
    dbtree_allreduce,
    dbtree_parents,
    tree_allreduce,
)

__all__ = [
    "SCHEDULE_FORMAT",
    "Buffer",
    "Check",
    "Op",
    "Schedule",
    "ScheduleBuilder",
    "ScheduleError",
    "add_dbtree_allreduce",
    "add_multiring_allreduce",
    "add_p2p_transfers",
    "add_ring_allreduce",
    "add_tree_allreduce",
    "all_to_all",
    "btree_parents",
    "coset_rings",
    "dbtree_allreduce",
    "dbtree_parents",
    "grouped_allreduce",
    "make_inputs",
    "multiring_allreduce",
    "p2p_transfers",
    "ring_allreduce",
    "simulate_schedule",
    "simulate_and_verify",
    "split_region",
    "stride_ring",
    "subgroup_allreduce",
    "topoopt_rings",
    "tree_allreduce",
    "verify",
]
