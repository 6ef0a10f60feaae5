"""An iteration's phases, named from its schedule's streams (`planner.cost.iteration`):
compute, model-parallel, AllReduce; and when each phase ends, predicted (the flow-level
model's end of every stream, `topolab.common.prediction`) or measured (the workers' reports of a timed
iteration, `topolab.run.measured_run`). results.json records both side by side (``phase_end_s``),
the report compares them and the trace draws a lane per phase (`topolab.results.trace_events`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def phase_of(stream: str) -> str:
    """The phase of an iteration schedule's stream (`planner.cost.iteration`): ``compute``,
    ``model-parallel`` (``mp>peer``, ``mp<peer``), ``AllReduce`` (rings ``ar<i>``, the forest's
    trees ``ft<i>...``, a hierarchical plan's dimensions ``d<i>...``), else ``other``."""
    if stream == "compute":
        return "compute"
    if stream.startswith("mp"):
        return "model-parallel"
    if stream.startswith(("ar", "ft")) or (stream[:1] == "d" and stream[1:2].isdigit()):
        return "AllReduce"
    return "other"


def phase_ends(stream_ends: Iterable[tuple[str, float]]) -> dict[str, float]:
    """When each phase ends: the latest end among its streams (``(stream name, end)`` pairs,
    over all ranks; `phase_of` names a stream's phase)."""
    ends: dict[str, float] = {}
    for stream, end in stream_ends:
        phase = phase_of(stream)
        ends[phase] = max(ends.get(phase, 0.0), end)
    return ends


def measured_phase_ends(ranks: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """When each phase ended in a measured iteration (emulated seconds from the first rank's
    start), from the workers' reports: ``t_start`` and ``streams`` (each stream's first op's
    start and last op's end, `workers.executor.IterationReport`). Empty when the workers
    reported no streams."""
    if not ranks:
        return {}
    t0 = min(r["t_start"] for r in ranks)
    return phase_ends((name, span[1] - t0) for r in ranks for name, span in r.get("streams", {}).items())
