"""Do two versions of the planner build the same iteration schedules and predict the same times?

Records, for a fixed list of cases (iteration schedules of scenarios and generated jobs, on
their plan's network, with and without a per-op software cost), the SHA-256 of each
schedule's JSON (`Schedule.to_dict()`) and its prediction (`planner.cost.predict.predict`:
makespan, per-rank and per-stream end times, bytes per link); then compares another version's
figures with a recorded file: the JSON must be identical and every time equal to within
``--rel`` (relative).

    PYTHONPATH=OLD .venv/bin/python benchmarks/predict_equality.py --record before.json
    PYTHONPATH=NEW .venv/bin/python benchmarks/predict_equality.py --compare before.json

Uses only the public API both versions share (`iteration_schedule`, `plan_network`,
`predict`), so it runs unchanged on either.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATED = [  # (model, servers, degree)
    ("resnet50", 12, 4),
    ("resnet50", 32, 4),
    ("resnet50", 32, 8),
    ("resnet50", 64, 8),
    ("resnet50", 128, 8),
    ("dlrm", 12, 4),
    ("dlrm", 32, 8),
]
SCENARIOS = [
    "topoopt-12",
    "hierarchical-12",
    "hierarchical-bert-12",
    "expander-12",
    "switch-12",
    "resnet50-switch-12",
    "smoke-12",
    "train-4",
]
OP_OVERHEAD_S = 20e-6  # the second prediction of every scenario: a per-op software cost


def _plan(case: str):
    from planner import build_plan, load_scenario, parse_scenario

    if case.startswith("gen:"):
        model, n, d = case[4:].split("/")
        strategy = {"resnet50": "data", "dlrm": "hybrid"}[model]
        s = parse_scenario(
            {
                "cluster": {"servers": int(n), "degree": int(d), "link_gbps": 100, "latency_us": 1},
                "workload": {"model": model, "batch_per_server": 128},
                "parallelism": {"strategy": strategy},
                "topology": {"kind": "topoopt"},
            }
        )
    else:
        s = load_scenario(ROOT / "scenarios" / f"{case}.toml")
    return build_plan(s)


def cases() -> list[tuple[str, float]]:
    out = [(f"gen:{m}/{n}/{d}", 0.0) for m, n, d in GENERATED]
    for name in SCENARIOS:
        out += [(name, 0.0), (name, OP_OVERHEAD_S)]
    return out


def record() -> dict:
    from planner.cost.iteration import iteration_schedule
    from planner.cost.predict import plan_network, predict

    results, schedules = {}, {}
    for case, overhead in cases():
        t0 = time.process_time()
        if case not in schedules:
            plan = _plan(case)
            sched = iteration_schedule(plan)
            digest = hashlib.sha256(json.dumps(sched.to_dict(), sort_keys=False).encode()).hexdigest()
            schedules[case] = (plan, sched, digest)
        plan, sched, digest = schedules[case]
        pred = predict(sched, plan_network(plan, op_overhead_s=overhead))
        key = f"{case} overhead={overhead:g}"
        results[key] = {
            "schedule_sha256": digest,
            "ops": sched.op_count(),
            "seconds": pred.seconds,
            "rank_seconds": pred.rank_seconds,
            "stream_end": {f"{r}:{s}": v for (r, s), v in pred.stream_end.items()},
            "link_bytes": {f"{a}-{b}": v for (a, b), v in pred.link_bytes.items()},
            "relayed_bytes": {f"{a}-{b}": v for (a, b), v in pred.relayed_bytes.items()},
            "cpu_s": time.process_time() - t0,
        }
        print(
            f"{key:44} {sched.op_count():>9} ops  {pred.seconds:.9g} s  ({results[key]['cpu_s']:.2f} cpu s)", flush=True
        )
    return results


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b)) if a != b else 0.0


def compare(before: dict, after: dict, rel: float) -> list[str]:
    """The differences beyond ``rel`` (empty: the same)."""
    problems = []
    for key, b in before.items():
        a = after.get(key)
        if a is None:
            problems.append(f"{key}: missing")
            continue
        if a["schedule_sha256"] != b["schedule_sha256"]:
            problems.append(f"{key}: schedule JSON differs")
        makespan = _rel(a["seconds"], b["seconds"])
        worst = max([makespan, *(_rel(x, y) for x, y in zip(a["rank_seconds"], b["rank_seconds"]))])
        for field in ("stream_end", "link_bytes", "relayed_bytes"):
            if set(a[field]) != set(b[field]):
                problems.append(f"{key}: {field} keys differ")
                continue
            worst = max([worst, *(_rel(a[field][k], v) for k, v in b[field].items())])
        print(f"{key:44} makespan {makespan:.2e}, largest relative difference {worst:.2e}")
        if worst > rel:
            problems.append(f"{key}: relative difference {worst:.2e} > {rel:g}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--record", metavar="FILE")
    group.add_argument("--compare", metavar="FILE")
    parser.add_argument("--rel", type=float, default=1e-9)
    args = parser.parse_args()
    if args.record:
        Path(args.record).write_text(json.dumps(record()))
        return
    before = json.loads(Path(args.compare).read_text())
    problems = compare(before, record(), args.rel)
    for p in problems:
        print(p)
    print("same" if not problems else f"{len(problems)} differences")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
