"""What `topolab train` measured, from the files the ranks wrote: steps, collectives, and the
report beside the model's predictions (and Gloo's, when both backends ran).

- A step (`topolab_torch.step`) takes the longest of the ranks' times for it; the median
  leaves out step 0 (connections, first schedules, allocator warm-up) when there are more.
- A collective is the k-th line of every rank's ``collectives.jsonl`` (every rank calls the
  same ones in the same order); its time runs from the *last* rank's start to the last
  rank's end: the schedule cannot finish before every rank has joined, and a rank that joins
  early only waits (in DDP, for the others' backward).
- Predictions are the flow-level model's for the schedule that ran
  (`topolab.train.schedules`), with the software's cost per op that the backend's
  calibration runs (the zero-payload twin of the plan's AllReduce) measured (kind
  ``calibration``, left out of the tables); Gloo's AllReduce is predicted as one ring in
  rank order (bandwidth and hops only).

Times are emulated seconds (what the emulated network takes); the planned cluster's are
these divided by the time scale.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from contract.files import read_capped_text
from topolab_torch import protocol

from ..results.run_results import MAX_RESULTS_BYTES

CALIBRATION = "calibration"  # the kind the backend records its calibration runs as


def _records(folder: Path, rank: int, what: str) -> list[dict[str, Any]]:
    path = Path(protocol.rank_file(str(folder), rank, what))
    if not path.exists():
        return []
    out = []
    for line in read_capped_text(path, MAX_RESULTS_BYTES, "rank log").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by a kill
            break
    return out


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def steady(values: list[float]) -> list[float]:
    """The steps after the first, when there are more than one."""
    return values[1:] if len(values) > 1 else values


def collectives_of(folder: Path, n: int, predicted: dict[tuple[str, int], float] | None = None) -> list[dict]:
    """Every collective of the job (the k-th line of every rank's file), its time from the
    last rank's start to the last rank's end, and its prediction (``predicted`` by (kind,
    bytes), else the one the rank recorded)."""
    per_rank = [_records(folder, r, "collectives.jsonl") for r in range(n)]
    ncoll = min((len(c) for c in per_rank), default=0)
    out = []
    for k in range(ncoll):
        first = per_rank[0][k]
        out.append(
            {
                "kind": first["kind"],
                "bytes": first["bytes"],
                "algorithm": first["algorithm"],
                "step": first["step"],
                "seconds": max(c[k]["t_end"] for c in per_rank) - max(c[k]["t_start"] for c in per_rank),
                "predicted_s": (predicted or {}).get((first["kind"], first["bytes"]), first["predicted_s"]),
            }
        )
    return out


def calibration_seconds(folder: Path, n: int) -> float | None:
    """The median time of the backend's calibration runs (None: there are none)."""
    return _median([c["seconds"] for c in collectives_of(folder, n) if c["kind"] == CALIBRATION])


def job_summary(
    folder: Path,
    n: int,
    wall_s: float,
    gloo_predictions: dict[int, float],
    predicted: dict[tuple[str, int], float] | None = None,
) -> dict[str, Any]:
    """Steps, collectives per size, communication per step: measured and predicted
    (``predicted``: (kind, bytes) -> seconds; ``gloo_predictions``: bytes -> Gloo's
    predicted AllReduce seconds)."""
    per_rank_steps = [_records(folder, r, "steps.jsonl") for r in range(n)]
    count = min((len(s) for s in per_rank_steps), default=0)
    steps = [max(per_rank_steps[r][k]["seconds"] for r in range(n)) for k in range(count)]
    collectives = [c for c in collectives_of(folder, n, predicted) if c["kind"] != CALIBRATION]
    sizes: dict[tuple[str, int], dict[str, Any]] = {}
    for c in collectives:
        row = sizes.setdefault(
            (c["kind"], c["bytes"]),
            {"kind": c["kind"], "bytes": c["bytes"], "algorithm": c["algorithm"], "times": [], "steps": []},
        )
        row["times"].append(c["seconds"])
        row["steps"].append(c["step"])
        row["predicted_s"] = c["predicted_s"]
    rows = []
    for row in sizes.values():
        in_steps = sum(1 for s in row.pop("steps") if 0 <= s < count)
        times = row.pop("times")
        row.update(
            count=len(times),
            per_step=in_steps / count if count else 0.0,
            measured_s=_median(times),
            gloo_predicted_s=gloo_predictions.get(row["bytes"]) if row["kind"] == "allreduce" else None,
        )
        rows.append(row)
    comm = _per_step_communication(collectives, count)
    return {
        "steps": steps,
        "step_s": _median(steady(steps)),
        "wall_s": wall_s,
        "collectives": len(collectives),
        "sizes": sorted(rows, key=lambda r: (r["kind"], r["bytes"])),
        "communication": comm,
    }


def _per_step_communication(collectives: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    """Per step: the sum of its collectives' measured and predicted times (median over the
    steady steps); Gloo's predicted time for the same AllReduces where known."""
    if not steps:
        return {}
    measured = [0.0] * steps
    predicted = [0.0] * steps
    sizes: list[list[tuple[str, int]]] = [[] for _ in range(steps)]
    for c in collectives:
        if 0 <= c["step"] < steps:
            measured[c["step"]] += c["seconds"]
            predicted[c["step"]] += c["predicted_s"]
            sizes[c["step"]].append((c["kind"], c["bytes"]))
    return {
        "measured_s": _median(steady(measured)),
        "predicted_s": _median(steady(predicted)),
        "step_sizes": [f"{kind}:{size}" for kind, size in sizes[-1]],
    }


def gloo_communication(summary: dict[str, Any]) -> float | None:
    """Gloo's predicted communication per step for the same collectives (AllReduce only)."""
    rows = summary.get("sizes", [])
    if not rows or any(r["kind"] == "allreduce" and r["gloo_predicted_s"] is None for r in rows):
        return None
    return sum(r["per_step"] * (r["gloo_predicted_s"] or 0.0) for r in rows if r["kind"] == "allreduce")


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def format_report(doc: dict[str, Any]) -> str:
    """report.md: the jobs side by side, the communication per step, per bucket size."""
    jobs = doc["jobs"]
    overhead = [job["calibration"]["op_overhead_s"] for job in jobs.values() if job.get("calibration")]
    lines = [
        f"# topolab train: {doc['scenario']}",
        "",
        f"{doc['servers']} ranks on the emulated {doc['topology']} network, {doc['link_mbps']:g} Mbit/s per cable "
        f"(time scale x{doc['time_scale']:g}); command: `{' '.join(doc['command'])}`. Times are emulated seconds"
        + (
            f"; topolab's predictions include {overhead[0] * 1e3:.2f} ms of software per op (measured)."
            if overhead and overhead[0]
            else "."
        ),
        "",
        "| backend | steps | step (median) | communication per step, measured | predicted | wall |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, job in jobs.items():
        comm = job["communication"]
        lines.append(
            f"| {name} | {len(job['steps'])} | {_s(job['step_s'])} | {_s(comm.get('measured_s'))} | "
            f"{_s(comm.get('predicted_s') if name == 'topolab' else job.get('gloo_predicted_s'))} | "
            f"{job['wall_s']:.1f} |"
        )
    topolab = jobs.get("topolab")
    if topolab and topolab["sizes"]:
        lines += [
            "",
            "Collectives of the topolab job, per size (measured: median, from the last rank's start to the last "
            "rank's end; Gloo predicted: one ring in rank order):",
            "",
            "| collective | bytes | per step | algorithm | count | measured | predicted | Gloo predicted |",
            "|---|---:|---:|---|---:|---:|---:|---:|",
        ]
        for row in topolab["sizes"]:
            lines.append(
                f"| {row['kind']} | {row['bytes']} | {row['per_step']:.2f} | {row['algorithm']} | {row['count']} | "
                f"{_s(row['measured_s'])} | {_s(row['predicted_s'])} | {_s(row['gloo_predicted_s'])} |"
            )
    if "comparison" in doc:
        c = doc["comparison"]
        lines += [
            "",
            f"Step, gloo minus topolab: measured {_s(c['measured_s'])} s, predicted {_s(c['predicted_s'])} s "
            f"(Gloo's predicted communication per step minus topolab's); step time gloo / topolab "
            f"{c['speedup']:.2f}x."
            if c.get("speedup")
            else "",
        ]
    return "\n".join(lines).rstrip() + "\n"


def compare(jobs: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """Gloo's step minus topolab's, measured and predicted, when both ran and reported steps."""
    topolab, gloo = jobs.get("topolab"), jobs.get("gloo")
    if not topolab or not gloo or topolab["step_s"] is None or gloo["step_s"] is None:
        return None
    pred_gloo = topolab.get("gloo_predicted_s")
    pred_topolab = topolab["communication"].get("predicted_s")
    return {
        "measured_s": gloo["step_s"] - topolab["step_s"],
        "predicted_s": None if pred_gloo is None or pred_topolab is None else pred_gloo - pred_topolab,
        "speedup": gloo["step_s"] / topolab["step_s"] if topolab["step_s"] else None,
    }
