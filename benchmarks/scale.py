"""How the iteration schedule and its prediction scale with the number of servers.

For ResNet-50 data parallel and DLRM hybrid on TopoOpt (degree 4 and 8, 100 Gbit/s, 1 us per
hop, batch 128 per server), at n = 12, 32, 64, 128, 256 servers (512 and 1024 with
``--large``): the ops of one training iteration (`planner.cost.iteration.iteration_schedule`),
the seconds to build that schedule and to predict it (`planner.cost.predict.predict` on
`plan_network`), wall clock and processor time (the reference machine is shared: processor
time is the steadier figure), the peak RSS and the bytes per op (growth of the RSS while the
schedule is built, and while it is replayed, over its ops; the peak RSS once the schedule is
built, "build MB"). Targets: schedule and prediction of the 128-server iteration in under
10 s together; the 1024-server ResNet-50 iteration (d = 8) built in under 2 GB and predicted
in under 60 s.

Every case runs in its own process under an address-space limit (``--mem-gb``) and a time
limit (``--timeout``), so a case that runs out of memory or time is reported as such instead
of taking the machine down; the larger sizes of a job are skipped once a smaller one failed.

    .venv/bin/python benchmarks/scale.py [--large] [--jobs resnet50,dlrm] [--degrees 4,8]
        [--sizes 12,32] [--mem-gb 8] [--timeout 900]

Prints a table and writes the section "planner" of benchmarks/results/scale.json (other
sections of that file, such as emulated runs, are kept) and benchmarks/results/scale.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SIZES = (12, 32, 64, 128, 256)
LARGE = (512, 1024)
JOBS = {"resnet50": "data", "dlrm": "hybrid"}
DEGREES = (4, 8)
TARGET_S = 10.0
RESULTS = Path(__file__).parent / "results"


def _rss_bytes() -> int:
    """This process's resident set now (not its peak)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(model: str, n: int, degree: int) -> dict:
    """One case, in this process: plan, schedule, prediction; their times and memory."""
    from planner import parse_scenario
    from planner.build import build_plan
    from planner.cost.iteration import iteration_schedule
    from planner.cost.predict import plan_network, predict

    s = parse_scenario(
        {
            "cluster": {"servers": n, "degree": degree, "link_gbps": 100, "latency_us": 1},
            "workload": {"model": model, "batch_per_server": 128},
            "parallelism": {"strategy": JOBS[model]},
            "topology": {"kind": "topoopt"},
        }
    )
    t0 = time.perf_counter()
    plan = build_plan(s)
    network = plan_network(plan)
    plan_s = time.perf_counter() - t0
    rss0 = _rss_bytes()
    w0, c0 = time.perf_counter(), time.process_time()
    schedule = iteration_schedule(plan)
    w1, c1 = time.perf_counter(), time.process_time()
    rss1 = _rss_bytes()
    build_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    prediction = predict(schedule, network)
    w2, c2 = time.perf_counter(), time.process_time()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    ops = schedule.op_count()
    return {
        "ops": ops,
        "plan_s": plan_s,
        "build_s": w1 - w0,
        "build_cpu_s": c1 - c0,
        "predict_s": w2 - w1,
        "predict_cpu_s": c2 - c1,
        "build_peak_rss_mb": build_peak / 2**20,
        "peak_rss_mb": peak / 2**20,
        "schedule_bytes_per_op": (rss1 - rss0) / ops,
        "replay_bytes_per_op": max(0, peak - rss1) / ops,
        "predicted_iteration_s": prediction.seconds,
    }


def run_case(model: str, n: int, degree: int, mem_gb: float, timeout: float) -> dict:
    """`measure` in a child process limited to ``mem_gb`` of address space and ``timeout``
    seconds; a failure is reported in ``status``."""
    row: dict = {"model": model, "strategy": JOBS[model], "servers": n, "degree": degree}
    limit = int(mem_gb * 2**30)

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    case = json.dumps({"model": model, "servers": n, "degree": degree})
    try:
        child = subprocess.run(
            [sys.executable, __file__, "--case", case],
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=limit_memory,
        )
    except subprocess.TimeoutExpired:
        return {**row, "status": f"timeout after {timeout:.0f} s"}
    lines = child.stdout.strip().splitlines()
    if child.returncode == 0 and lines:
        return {**row, "status": "ok", **json.loads(lines[-1])}
    if "MemoryError" in child.stderr or child.returncode in (-9, 137):
        return {**row, "status": f"out of memory ({mem_gb:g} GiB)"}
    tail = child.stderr.strip().splitlines()[-1:] or [f"exit code {child.returncode}"]
    return {**row, "status": f"failed: {tail[0]}"}


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.5))
    for (model, degree), style in zip(
        sorted({(r["model"], r["degree"]) for r in rows}), ("o-", "s--", "^-", "v--", "d-", "x--")
    ):
        done = [r for r in rows if r["model"] == model and r["degree"] == degree and r["status"] == "ok"]
        if not done:
            continue
        n = [r["servers"] for r in done]
        label = f"{model} d={degree}"
        ax_t.plot(n, [r["build_cpu_s"] + r["predict_cpu_s"] for r in done], style, label=label)
        ax_m.plot(n, [r["peak_rss_mb"] for r in done], style, label=label)
    ax_t.axhline(TARGET_S, color="grey", lw=0.8, ls=":")
    ax_t.set(xscale="log", yscale="log", xlabel="servers", ylabel="schedule + prediction, processor s")
    ax_m.set(xscale="log", yscale="log", xlabel="servers", ylabel="peak RSS, MB")
    for ax in (ax_t, ax_m):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("One training iteration: schedule build and flow-level prediction (TopoOpt)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", help=argparse.SUPPRESS)  # a child: one case, JSON on stdout
    parser.add_argument("--large", action="store_true", help=f"also {', '.join(map(str, LARGE))} servers")
    parser.add_argument("--jobs", default=",".join(JOBS), help="models, comma-separated")
    parser.add_argument("--degrees", default=",".join(map(str, DEGREES)))
    parser.add_argument("--sizes", help="server counts, comma-separated (default: the sizes above)")
    parser.add_argument("--mem-gb", type=float, default=8.0, help="address-space limit of each case")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds allowed to each case")
    parser.add_argument("--out", default=str(RESULTS / "scale.json"))
    args = parser.parse_args()
    if args.case:
        c = json.loads(args.case)
        print(json.dumps(measure(c["model"], c["servers"], c["degree"])))
        return

    sizes = [int(x) for x in args.sizes.split(",")] if args.sizes else [*SIZES, *(LARGE if args.large else ())]
    rows = []
    print(
        f"{'job':16} {'d':>2} {'servers':>7} {'ops':>11} {'build s':>8} {'(cpu)':>7} {'predict s':>9} "
        f"{'(cpu)':>7} {'build MB':>8} {'peak MB':>8} {'B/op sched':>10} {'B/op replay':>11}  status"
    )
    for model in args.jobs.split(","):
        for degree in (int(d) for d in args.degrees.split(",")):
            failed = False
            for n in sizes:
                if failed:
                    r = {"model": model, "strategy": JOBS[model], "servers": n, "degree": degree}
                    r["status"] = "skipped (a smaller size failed)"
                else:
                    r = run_case(model, n, degree, args.mem_gb, args.timeout)
                    failed = r["status"] != "ok"
                rows.append(r)
                job = f"{model}/{JOBS[model]}"
                if r["status"] == "ok":
                    print(
                        f"{job:16} {degree:>2} {n:>7} {r['ops']:>11,} {r['build_s']:>8.2f} {r['build_cpu_s']:>7.2f} "
                        f"{r['predict_s']:>9.2f} {r['predict_cpu_s']:>7.2f} {r['build_peak_rss_mb']:>8.0f} {r['peak_rss_mb']:>8.0f} "
                        f"{r['schedule_bytes_per_op']:>10.0f} {r['replay_bytes_per_op']:>11.0f}  ok",
                        flush=True,
                    )
                else:
                    print(
                        f"{job:16} {degree:>2} {n:>7} {'':>11} {'':>8} {'':>7} {'':>9} {'':>7} {'':>8} {'':>8} {'':>10} {'':>11}  {r['status']}",
                        flush=True,
                    )
    at_128 = [r for r in rows if r["servers"] == 128]
    for r in at_128:
        total = r["build_s"] + r["predict_s"] if r["status"] == "ok" else float("inf")
        verdict = "PASS" if total < TARGET_S else "FAIL"
        print(
            f"128 servers, {r['model']} d={r['degree']}: schedule + prediction {total:.1f} s (target < {TARGET_S:g} s): {verdict}"
        )

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    document = json.loads(out.read_text()) if out.exists() else {}
    document["planner"] = {
        "machine": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "mem_limit_gb": args.mem_gb,
        "timeout_s": args.timeout,
        "target_s": TARGET_S,
        "rows": rows,
    }
    out.write_text(json.dumps(document, indent=1))
    plot(rows, out.with_suffix(".png"))
    print(f"wrote {out} (section 'planner') and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
