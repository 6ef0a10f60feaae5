"""Joint operator fusion, device placement and bandwidth allocation (inter-operator
parallelism, docs/search.md, "Device placement of operator groups").

A package rather than one module because it holds several algorithms that share one cost
model, each in its own module under the ~300-line budget:

- `cost`: the task graph, the makespan model every placer is scored by, memory checks;
- `milp`: the exact MILP (HiGHS via scipy.optimize.milp) for small graphs;
- `heuristic`: HEFT list scheduling plus a critical-path local search for large graphs;
- `baselines`: round robin, memory-balanced contiguous partition, data-parallel time;
- `joint`: placement alternated with per-destination bandwidth allocation;
- `schedule`: a placement as a contract.schedule Schedule for the workers.
"""

from .baselines import contiguous_partition, data_parallel_seconds, round_robin
from .cost import (
    Placement,
    PlacementError,
    TaskGraph,
    Timeline,
    makespan,
    task_graph,
    timeline,
    uniform_rates,
)
from .heuristic import heft, place_heuristic
from .joint import JointPlacement, allocate_rates, place_jointly, plan_capacity, traffic_matrix
from .milp import place_milp
from .schedule import placement_schedule

__all__ = [
    "JointPlacement",
    "Placement",
    "PlacementError",
    "TaskGraph",
    "Timeline",
    "allocate_rates",
    "contiguous_partition",
    "data_parallel_seconds",
    "heft",
    "makespan",
    "place_heuristic",
    "place_jointly",
    "place_milp",
    "placement_schedule",
    "plan_capacity",
    "round_robin",
    "task_graph",
    "timeline",
    "traffic_matrix",
    "uniform_rates",
]
