"""The emulated side of the scale benchmark (`benchmarks/scale.py` measures the planner's): how
one machine emulates n servers. Needs root.

For n servers on TopoOpt of degree d and a job (ResNet-50 data parallel from
scenarios/resnet50-128.toml, DLRM hybrid from scenarios/dlrm-128.toml, with ``servers`` and
``degree`` replaced), one run as `topolab run` makes it with default settings (``link_mbps =
"auto"``: the rate and payload scale chosen for this machine), through the product's own stages
(`topolab.measured_run`); right after, on the same network, iperf3 moves the same bytes
between the same pairs at once (when the schedule has at most ``--iperf-max-pairs`` pairs:
DLRM's all-to-all has n (n - 1)). Per case:

- the rate and payload scale chosen, the iteration's ops and bytes;
- the workers' CPU per iteration (the median over the timed iterations, all ranks), seen two
  ways: us per op (all of it over the ops) and s per GB sent (all of it over the bytes; the
  figure to hold against iperf3's s/GB), each charging everything to one cause, so a job
  of few large transfers shows a high per-op figure; beside them the machine probe's split
  (`topolab.machine_probe`: us per op, s per GB) that chose the rate;
- measured / predicted, verified, the workers' load;
- wall seconds per iteration (the iterations stage over the iterations run, warm-up
  included), seconds to bring the hosts up and to take them down;
- the machine's peak memory in use during the case, over what was in use before.

    sudo .venv/bin/python benchmarks/scale_emulated.py [--sizes 12,32,64,128] [--jobs resnet50,dlrm]
        [--degrees 4,8] [--iterations 2] [--iperf-max-pairs 600]

Prints a table; writes the section "emulated" of benchmarks/results/scale.json (other
sections kept) and benchmarks/results/scale-emulated.png.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from dataplane import iperf_same_bytes, pair_bytes  # noqa: E402  (the same iperf3 comparison)

RESULTS = REPO / "benchmarks" / "results"
JOB_SCENARIOS = {"resnet50": "resnet50-128.toml", "dlrm": "dlrm-128.toml"}
SIZES, DEGREES = (12, 32, 64, 128), (4, 8)
GB = 1e9


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class PeakMemory:
    """The machine's memory in use, sampled every ``period_s`` in a thread: its peak over the
    level when sampling started (the fall of the memory available, as the emulator reads it)."""

    def __init__(self, period_s: float = 0.2) -> None:
        from emulator.validate import mem_available_mib

        self.available_mib = mem_available_mib
        self.period_s = period_s
        self.base = self.lowest = mem_available_mib()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.period_s):
            self.lowest = min(self.lowest, self.available_mib())

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    @property
    def growth_gib(self) -> float:
        return (self.base - self.lowest) / 1024


def scenario_for(job: str, servers: int, degree: int, iterations: int):
    from planner import load_scenario
    from planner.scenario import with_overrides

    base = load_scenario(REPO / "scenarios" / JOB_SCENARIOS[job])
    return with_overrides(
        base, cluster={"servers": servers, "degree": degree}, run={"iterations": iterations, "warmup": 1}
    )


def run_case(job: str, servers: int, degree: int, iterations: int, iperf_max_pairs: int) -> dict[str, Any]:
    """One emulated run of the case, then iperf3 on the same network (module docstring)."""
    from topolab.measured_run import calibrate, iterate, network_facts, prepare_run, record
    from topolab.network import NetworkFlags, network_config, open_network

    s = scenario_for(job, servers, degree, iterations)
    out_dir = Path(tempfile.mkdtemp(prefix=f"scale-{job}-{servers}-"))
    row: dict[str, Any] = {"job": job, "servers": servers, "degree": degree}
    t_case = time.monotonic()
    with PeakMemory() as memory:
        t0 = time.monotonic()
        run = prepare_run(s, out_dir, None, None, None, log)
        row["prepare_s"] = time.monotonic() - t0
        results, schedule = run.results, run.schedule
        config = network_config(run.scenario.emulation, NetworkFlags())
        with open_network(run.plan, config, log=log) as net:
            workers = network_facts(run, net)
            calibrate(run, net, workers)
            t0 = time.monotonic()
            iterate(run, net, workers)
            row["wall_s_per_iteration"] = (time.monotonic() - t0) / (run.iterations + s.run.warmup)
            pairs = pair_bytes(schedule)
            if len(pairs) <= iperf_max_pairs:
                row["iperf3"] = iperf_same_bytes(net, pairs)
            else:
                row["iperf3"] = None
                row["iperf3_skipped"] = f"{len(pairs)} pairs > --iperf-max-pairs {iperf_max_pairs}"
        results.emulation.teardown_s = net.facts.get("teardown_s")
        results.status = "complete"
        record(run, None)
    row["peak_memory_gib"] = memory.growth_gib
    row["case_s"] = time.monotonic() - t_case
    summary = results.summarize()
    dilation = results.emulation.dilation or {}
    timed = [it for it in results.iterations if not it.warmup]
    cpu = statistics.median(it.worker_cpu_s for it in timed if it.worker_cpu_s is not None) if timed else None
    ops, sent = int(dilation.get("ops", 0)), int(dilation.get("bytes_sent", 0))
    row.update(
        link_mbps=results.emulation.link_mbps,
        payload_scale=results.emulation.payload_scale,
        ops=ops,
        bytes_sent=sent,
        worker_cpu_s=cpu,
        us_per_op=cpu / ops * 1e6 if cpu and ops else None,
        probe_us_per_op=dilation.get("op_cpu_s", 0.0) * 1e6,
        probe_s_per_gb=dilation.get("byte_cpu_s", 0.0) * 1e9,
        cpu_s_per_gb=cpu / (sent / GB) if cpu and sent else None,
        measured_ms=summary.median_real_ms,
        predicted_ms=results.predicted.real_ms if results.predicted else None,
        error=summary.error,
        verified=summary.verified,
        cpu_load=summary.cpu_load,
        hosts_up_s=results.emulation.network.get("build_s"),
        hosts_down_s=results.emulation.teardown_s,
    )
    if row.get("iperf3") and row["cpu_s_per_gb"]:
        row["cpu_over_iperf3"] = row["cpu_s_per_gb"] / row["iperf3"]["cpu_s_per_gb"]
    return row


def fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'job':>8} {'n':>4} {'d':>2} {'Mbit/s':>7} {'scale':>6} {'us/op':>6} {'s/GB':>6} {'iperf3':>7} {'probe':>10} "
        f"{'meas ms':>9} {'pred ms':>9} {'err':>6} {'ok':>3} {'load':>5} {'s/iter':>7} {'up s':>6} {'down s':>6} {'GiB':>5}"
    )
    for r in rows:
        if "failed" in r:
            print(f"{r['job']:>8} {r['servers']:>4} {r['degree']:>2}  failed: {r['failed']}")
            continue
        iperf = r.get("iperf3") or {}
        print(
            f"{r['job']:>8} {r['servers']:>4} {r['degree']:>2} {r['link_mbps']:>7g} {r['payload_scale']:>6g} "
            f"{fmt(r['us_per_op'], '6.1f')} {fmt(r['cpu_s_per_gb'], '6.2f')} {fmt(iperf.get('cpu_s_per_gb'), '7.2f')} "
            f"{r['probe_us_per_op']:>4.0f}us/{r['probe_s_per_gb']:.2f} "
            f"{fmt(r['measured_ms'], '9.3f')} {fmt(r['predicted_ms'], '9.3f')} {fmt(r['error'], '6.1%')} "
            f"{'yes' if r['verified'] else 'NO':>3} {fmt(r['cpu_load'], '5.0%')} {r['wall_s_per_iteration']:>7.1f} "
            f"{fmt(r['hosts_up_s'], '6.2f')} {fmt(r['hosts_down_s'], '6.2f')} {r['peak_memory_gib']:>5.1f}"
        )


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if "failed" not in r]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for (job, degree), marker in zip(sorted({(r["job"], r["degree"]) for r in ok}), "osd^v<>"):
        mine = sorted((r for r in ok if (r["job"], r["degree"]) == (job, degree)), key=lambda r: r["servers"])
        n = [r["servers"] for r in mine]
        label = f"{job} d={degree}"
        axes[0].plot(n, [r["link_mbps"] for r in mine], marker=marker, label=label)
        axes[1].plot(n, [100 * (r["error"] or 0) for r in mine], marker=marker, label=label)
        axes[2].plot(n, [r["wall_s_per_iteration"] for r in mine], marker=marker, label=label)
    axes[0].set(title="rate chosen (link_mbps auto)", ylabel="Mbit/s per cable")
    axes[1].set(title="|predicted - measured| / measured", ylabel="%")
    axes[1].axhline(10, color="grey", linestyle="--", linewidth=1)
    axes[2].set(title="wall time per iteration", ylabel="s")
    for ax in axes:
        ax.set_xlabel("servers")
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--jobs", default=",".join(JOB_SCENARIOS))
    ap.add_argument("--degrees", default=",".join(map(str, DEGREES)))
    ap.add_argument("--iterations", type=int, default=2, help="timed iterations per case (after one warm-up)")
    ap.add_argument("--iperf-max-pairs", type=int, default=600)
    ap.add_argument("--out", type=Path, default=RESULTS / "scale.json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("scale_emulated: needs root (emulated network)", file=sys.stderr)
        return 2
    jobs = [j for j in args.jobs.split(",") if j]
    unknown = [j for j in jobs if j not in JOB_SCENARIOS]
    if unknown:
        print(f"scale_emulated: --jobs {unknown[0]}: known jobs are {', '.join(JOB_SCENARIOS)}", file=sys.stderr)
        return 2
    rows = []
    for job in jobs:
        for degree in (int(d) for d in args.degrees.split(",")):
            for servers in (int(n) for n in args.sizes.split(",")):
                log(f"== {job}, {servers} servers, d = {degree}")
                try:
                    rows.append(run_case(job, servers, degree, args.iterations, args.iperf_max_pairs))
                except Exception as err:  # a failed case is a row; the larger sizes of the job are skipped
                    rows.append(
                        {"job": job, "servers": servers, "degree": degree, "failed": f"{type(err).__name__}: {err}"}
                    )
                    break
    print_table(rows)
    doc = json.loads(args.out.read_text()) if args.out.exists() else {}
    doc["emulated"] = {"measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpus": os.cpu_count(), "rows": rows}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    plot(rows, args.out.with_name("scale-emulated.png"))
    print(f"wrote {args.out} (section 'emulated') and {args.out.with_name('scale-emulated.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
