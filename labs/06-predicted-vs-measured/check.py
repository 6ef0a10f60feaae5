"""Checker of exercise 6: the student's sweep data (JSON shape below), its predictions
(they must be planner.cost.predict's in the real cluster's time: topolab.lab.command.allreduce_real_seconds,
docs/algorithms.md section 6), the measured times taken from a `topolab collective --json`
document, and the plot file.

Data shape::

    {"scenario": "topoopt-12", "algorithm": "topoopt",
     "points": [{"bytes": 1048576, "predicted_real_ms": 0.1779, "measured_real_ms": 0.21}, ...]}

``measured_real_ms`` is null for a size the document does not have. The checker feeds a
made-up document (known times) so it needs no emulator, with or without ``--emulate``.
"""

import json
import tempfile
from pathlib import Path

from topolab.lab.command import allreduce_real_seconds, student_error
from topolab.results.collective_results import COLLECTIVE_FORMAT

TITLE = "Predicted vs measured: sweep the message size, plot both"
STUDENT_FILE = "sweep.py"
FUNCTIONS = ("predicted_vs_measured(scenario_path, algorithm, sizes, collective_doc)", "plot(data, path)")
SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "topoopt-12.toml"
ALGORITHM = "topoopt"
SIZES = [1 << 20, 4 << 20, 16 << 20]
MEASURED_SIZES = SIZES[:2]  # the last size is missing from the made-up document
TOLERANCE = 0.01
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def planner_real_ms(nbytes: int) -> float:
    return allreduce_real_seconds(SCENARIO, ALGORITHM, nbytes) * 1e3


def made_up_collective_doc() -> dict:
    """What `topolab collective --json` writes, with times the checker knows."""
    rows = [{"algorithm": ALGORITHM, "bytes": s, "time_real_ms": 0.001 * s / (1 << 20) + 0.05} for s in MEASURED_SIZES]
    return {"format": COLLECTIVE_FORMAT, "scenario": "topoopt-12", "results": rows}


def check(student, emulate: bool) -> list[str]:
    doc = made_up_collective_doc()
    data = json.loads(json.dumps(student.predicted_vs_measured(str(SCENARIO), ALGORITHM, SIZES, doc)))
    problems = []
    if not isinstance(data, dict) or not isinstance(data.get("points"), list):
        return ['expected a dict with "scenario", "algorithm" and a list "points" (see README.md)']
    for key in ("scenario", "algorithm"):
        if not isinstance(data.get(key), str):
            problems.append(f'"{key}" is missing or not a string')
    if [p.get("bytes") for p in data["points"]] != SIZES:
        return problems + [f'"points" must have one entry per size, in order: bytes {SIZES}']
    measured = {r["bytes"]: r["time_real_ms"] for r in doc["results"]}
    for point in data["points"]:
        size = point["bytes"]
        want = planner_real_ms(size)
        got = point.get("predicted_real_ms")
        if not isinstance(got, (int, float)) or abs(got - want) > TOLERANCE * want:
            problems.append(
                f"{size} bytes: predicted_real_ms {got}, planner.cost.predict gives {want:.4f}; hint: predict the "
                "schedule of planner.collectives.from_plan on plan_network(plan, link_bps=link_mbps * 1e6, "
                "alpha_s=plan.latency_us * 1e-6 * scale), then divide by scale = contract.physics.time_scale"
            )
        if point.get("measured_real_ms") != measured.get(size):
            problems.append(
                f"{size} bytes: measured_real_ms {point.get('measured_real_ms')}, the collective document says "
                f"{measured.get(size)} (null when it has no row for this size)"
            )
    with tempfile.TemporaryDirectory() as tmp:
        png = Path(tmp) / "sweep.png"
        try:
            student.plot(data, str(png))
        except Exception as err:  # report it with the other problems
            problems.append(f"plot(data, path) failed: {student_error(err, Path(student.__file__))}")
        if not png.is_file() or png.read_bytes()[:8] != PNG_MAGIC:
            problems.append("plot(data, path) wrote no PNG file at path")
    return problems
