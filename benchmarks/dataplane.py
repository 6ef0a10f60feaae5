"""The worker data plane at the machine's limit (issue 17): measured / ideal AllReduce time and
the workers' CPU per GB moved against iperf3 on the same cables, side by side in one session.
Needs root (emulated network).

Cases (one emulated network each, built at the case's per-cable rate):

    topoopt-12 multi-ring 64 MiB at 100 and 400 Mbit/s per cable
    topoopt-32 multi-ring and single ring 16 MiB at 100 Mbit/s
    a 64-server TopoOpt network (degree 4) multi-ring 16 MiB at 100 Mbit/s

Per case: the median of --repeat verified iterations over ideal = 2 (n-1) S / (n D)
(`topolab.collective.ideal_allreduce_s`), the workers' CPU seconds per GB sent (their user +
system time during the program, kernel TCP work in their system calls included), and iperf3
moving the same bytes between the same pairs of hosts at once (one client per pair the
schedule sends on, the pair's bytes with ``-n``): its CPU seconds per GB (clients and servers,
from the children's rusage). The whole machine's CPU split (user / system / softirq, from
/proc/stat) during the case is printed next to it: the machine is shared, so the per-process
figures are the ones to compare.

A rate search then finds, for 12 and for 32 servers, the highest per-cable rate of a list at
which multi-ring stays within --target (1.10) x ideal (it stops at the first rate that fails).

Before the emulated cases, a loopback run (no root needed for it) splits the workers' CPU by
thread: the Python main thread (the schedule loop, copies and the reduce), libzmq's I/O
thread (TCP send / receive system calls) and pyzmq's garbage thread (zero-copy sends); see
docs/dataplane.md.

    .venv/bin/python benchmarks/dataplane.py                 # everything (~15 min quiet machine)
    .venv/bin/python benchmarks/dataplane.py --quick         # topoopt-12 @ 100 Mbit/s, 16 MiB
    .venv/bin/python benchmarks/dataplane.py --cases 12@400,32-ring --no-search

Writes benchmarks/results/dataplane.json.

Over 300 lines: the cases, the iperf3 comparison, the rate search and the loopback split by
thread all feed one table and one JSON document, and must run in one session to compare.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner import build_plan, load_scenario
from planner.collectives import multiring_allreduce, topoopt_rings
from planner.collectives.from_plan import allreduce_for_plan
from topolab.collective import auto_segment, measure

OUT = Path(__file__).resolve().parent / "results"
SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
IPERF_BASE_PORT = 5201  # + the sending rank: one iperf3 server per (destination, source)
IPERF_SERVER_START_S = 1.0  # iperf3 servers are listening well within this on a busy machine
IPERF_TIMEOUT_S = 300.0
IPERF_LEN = 128 << 10  # iperf3's own default write size for TCP
TARGET = 1.10
SEARCH_RATES = {12: [100, 200, 300, 400, 500, 600, 800], 32: [50, 100, 150, 200, 300, 400]}
SEARCH_BYTES = {12: 64 << 20, 32: 16 << 20}
LOOPBACK_RANKS, LOOPBACK_BYTES, LOOPBACK_STRIDES = 12, 64 << 20, [1, 5]  # the topoopt-12 rings
GB = 1e9


@dataclass(frozen=True)
class Case:
    name: str
    scenario: str
    servers: int
    algorithm: str  # topolab collective's name: topoopt = multi-ring, ring = single ring
    nbytes: int
    link_mbps: float


CASES = [
    Case("12@100", "topoopt-12.toml", 12, "topoopt", 64 << 20, 100),
    Case("12@400", "topoopt-12.toml", 12, "topoopt", 64 << 20, 400),
    Case("32@100", "topoopt-32.toml", 32, "topoopt", 16 << 20, 100),
    Case("32-ring", "topoopt-32.toml", 32, "ring", 16 << 20, 100),
    Case("64@100", "topoopt-32.toml", 64, "topoopt", 16 << 20, 100),
]
QUICK = Case("quick", "topoopt-12.toml", 12, "topoopt", 16 << 20, 100)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def machine_cpu() -> dict[str, float]:
    """Whole-machine CPU seconds so far by kind (/proc/stat's first line)."""
    tick = os.sysconf("SC_CLK_TCK")
    v = [int(x) for x in open("/proc/stat").readline().split()[1:8]]
    return {"user": (v[0] + v[1]) / tick, "system": v[2] / tick, "softirq": (v[5] + v[6]) / tick, "idle": v[3] / tick}


def cpu_split(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before[k], 2) for k in before}


def plan_for(case: Case):
    scenario = load_scenario(SCENARIOS / case.scenario)
    if scenario.cluster.servers != case.servers:
        scenario = dataclasses.replace(scenario, cluster=dataclasses.replace(scenario.cluster, servers=case.servers))
    return scenario, build_plan(scenario)


def pair_bytes(schedule) -> dict[tuple[int, int], int]:
    """Bytes each (source, destination) pair sends in one iteration of ``schedule``."""
    pairs: dict[tuple[int, int], int] = defaultdict(int)
    for rank, streams in enumerate(schedule.programs):
        for ops in streams.values():
            for op in ops:
                if op.kind == "send":
                    pairs[(rank, op.peer)] += op.length
    return dict(pairs)


def iperf_same_bytes(net, pairs: dict[tuple[int, int], int]) -> dict[str, float]:
    """iperf3 moving ``pairs``' bytes between the same hosts at once: its CPU-s per GB during
    the transfers (iperf3's own rusage figures for client and server, start-up excluded like
    the workers' program CPU), and with start-up (the children's rusage)."""
    quiet = {"stdin": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    servers = [
        net.popen(
            dst,
            ["iperf3", "-s", "-1", "-p", str(IPERF_BASE_PORT + src), "-B", net.host_address(dst)],
            stdout=subprocess.DEVNULL,
            **quiet,
        )
        for src, dst in pairs
    ]
    time.sleep(IPERF_SERVER_START_S)
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    clients = [
        net.popen(
            src,
            ["iperf3", "-J", "-c", net.host_address(dst), "-p", str(IPERF_BASE_PORT + src)]
            + ["-n", str(n), "-l", str(IPERF_LEN)],
            stdout=subprocess.PIPE,
            text=True,
            **quiet,
        )
        for (src, dst), n in pairs.items()
    ]
    reports = [p.communicate(timeout=IPERF_TIMEOUT_S)[0] for p in clients]
    codes = [p.returncode for p in clients] + [p.wait(IPERF_TIMEOUT_S) for p in servers]
    elapsed = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    with_start = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    transfer_cpu = 0.0
    for text in reports:
        end = json.loads(text)["end"]
        seconds, cpu = end["sum_sent"]["seconds"], end["cpu_utilization_percent"]
        transfer_cpu += (cpu["host_total"] + cpu["remote_total"]) / 100 * seconds
    gb = sum(pairs.values()) / GB
    return {
        "ok": all(c == 0 for c in codes),
        "time_s": elapsed,
        "cpu_s": transfer_cpu,
        "cpu_s_per_gb": transfer_cpu / gb,
        "cpu_s_per_gb_with_start": with_start / gb,
        "gbit_s": gb * 8 / elapsed,
    }


def run_case(case: Case, repeat: int, iperf: bool, wait_s: float) -> dict:
    from emulator import EmulatedNetwork

    scenario, plan = plan_for(case)
    sched = allreduce_for_plan(plan, case.algorithm, case.nbytes, auto_segment(case.nbytes))
    pairs = pair_bytes(sched)
    moved = sum(pairs.values())
    config = dict(dataclasses.asdict(scenario.emulation), link_mbps=case.link_mbps, lock_wait_s=wait_s)
    row = dataclasses.asdict(case) | {"gb_per_iteration": moved / GB}
    with EmulatedNetwork(plan, config, log=log) as net:
        m0 = machine_cpu()
        (res,) = measure(net, plan, [case.algorithm], [case.nbytes], repeat=repeat, log=log)
        row["machine_cpu_s"] = cpu_split(m0, machine_cpu())
        cpu = statistics.median(res.cpu_s)
        row |= {
            "verified": res.verified,
            "time_s": res.time_s,
            "ideal_s": res.ideal_s,
            "measured_over_ideal": res.ratio,
            "worker_cpu_s": cpu,
            "worker_cores": cpu / res.time_s,
            "worker_cpu_s_per_gb": cpu / (moved / GB),
        }
        if iperf:
            row["iperf3"] = iperf_same_bytes(net, pairs)
            row["worker_over_iperf3_cpu"] = row["worker_cpu_s_per_gb"] / row["iperf3"]["cpu_s_per_gb"]
    return row


def search(servers: int, repeat: int, wait_s: float, target: float) -> dict:
    """Highest rate of `SEARCH_RATES` at which multi-ring stays within ``target`` x ideal."""
    best, rows = None, []
    scenario = "topoopt-12.toml" if servers == 12 else "topoopt-32.toml"
    for rate in SEARCH_RATES[servers]:
        row = run_case(
            Case(f"{servers}@{rate}", scenario, servers, "topoopt", SEARCH_BYTES[servers], rate), repeat, False, wait_s
        )
        rows.append(row)
        log(f"search {servers} servers @ {rate:g} Mbit/s: {row['measured_over_ideal']:.3f}x ideal")
        if not (row["verified"] and row["measured_over_ideal"] <= target):
            break
        best = rate
    return {"servers": servers, "bytes": SEARCH_BYTES[servers], "target": target, "highest_mbps": best, "rows": rows}


def thread_cpu(pids: list[int]) -> dict[tuple[int, str], tuple[str, float, float]]:
    """(pid, tid) -> (thread role, user s, system s) of every thread of ``pids``."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            role = "python main" if tid == str(pid) else ("pyzmq garbage" if name.startswith("python") else name)
            f = stat[stat.rindex(")") + 2 :].split()
            out[(pid, tid)] = (role, int(f[11]) / tick, int(f[12]) / tick)
    return out


def loopback_split(iterations: int = 3) -> dict:
    """Workers' CPU per GB by thread on a loopback multi-ring AllReduce (12 ranks, 64 MiB),
    and the CPU of an idle second between iterations."""
    from workers.coordinator import Coordinator

    sched = multiring_allreduce(LOOPBACK_RANKS, LOOPBACK_BYTES, topoopt_rings(LOOPBACK_RANKS, LOOPBACK_STRIDES))
    moved = sum(sched.bytes_sent()) * iterations
    with Coordinator(sched.to_dict(), ["127.0.0.1"] * LOOPBACK_RANKS, timeout_s=30) as coord:
        coord.run_iteration(0)
        before, m0 = thread_cpu(coord.pids()), machine_cpu()
        ok, program_cpu = True, 0.0
        for i in range(iterations):
            res = coord.run_iteration(1 + i)
            ok = ok and res.ok
            program_cpu += sum(r["cpu_s"] for r in res.ranks)
        after, m1 = thread_cpu(coord.pids()), machine_cpu()
        time.sleep(1.0)
        idle = thread_cpu(coord.pids())
    split: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for key, (role, user, system) in after.items():
        if key in before:
            split[role][0] += user - before[key][1]
            split[role][1] += system - before[key][2]
    gb = moved / GB
    return {
        "ranks": LOOPBACK_RANKS,
        "bytes": LOOPBACK_BYTES,
        "verified": ok,
        "program_cpu_s_per_gb": program_cpu / gb,
        "threads_s_per_gb": {role: {"user": u / gb, "system": s / gb} for role, (u, s) in sorted(split.items())},
        "machine_cpu_s": cpu_split(m0, m1),
        "idle_second_cpu_s": max(
            0.0, sum(idle[k][1] + idle[k][2] - after[k][1] - after[k][2] for k in idle if k in after)
        ),
        "note": "thread totals include filling and verifying the buffers; program_cpu_s_per_gb does not",
    }


def print_table(rows: list[dict]) -> None:
    print(
        f"{'case':>8} {'alg':>8} {'size':>6} {'Mbit/s':>7} {'meas/ideal':>10} {'cores':>6} {'cpu s/GB':>9} "
        f"{'iperf3 s/GB':>11} {'x iperf3':>8} {'verified':>8}"
    )
    for r in rows:
        ip = r.get("iperf3")
        print(
            f"{r['name']:>8} {r['algorithm']:>8} {r['nbytes'] >> 20:>5}M {r['link_mbps']:>7g} "
            f"{r['measured_over_ideal']:>10.3f} {r['worker_cores']:>6.2f} {r['worker_cpu_s_per_gb']:>9.3f} "
            f"{ip['cpu_s_per_gb'] if ip else float('nan'):>11.3f} {r.get('worker_over_iperf3_cpu', float('nan')):>8.2f} "
            f"{'yes' if r['verified'] else 'NO':>8}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one small case: topoopt-12 at 100 Mbit/s, 16 MiB")
    ap.add_argument("--cases", default=",".join(c.name for c in CASES), help="comma-separated case names")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-iperf", action="store_true", help="skip the iperf3 comparison")
    ap.add_argument("--no-search", action="store_true", help="skip the highest-rate search")
    ap.add_argument("--no-loopback", action="store_true", help="skip the loopback CPU split")
    ap.add_argument("--target", type=float, default=TARGET)
    ap.add_argument("--wait", type=float, default=600.0, help="wait this long for another emulation run's lock")
    ap.add_argument("--out", default=str(OUT / "dataplane.json"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("dataplane: needs root (emulated network)", file=sys.stderr)
        return 2
    by_name = {c.name: c for c in CASES}
    unknown = [n for n in args.cases.split(",") if n not in by_name]
    if unknown and not args.quick:
        print(f"dataplane: --cases: unknown {unknown} (known: {', '.join(by_name)})", file=sys.stderr)
        return 2
    cases = [QUICK] if args.quick else [by_name[n] for n in args.cases.split(",")]
    doc: dict = {
        "format": "topolab.dataplane/1",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "loadavg_before": os.getloadavg()},
        "repeat": args.repeat,
    }
    if not args.no_loopback:
        doc["loopback"] = lb = loopback_split()
        print(
            f"# loopback, {lb['ranks']} ranks multi-ring {lb['bytes'] >> 20} MiB: "
            f"{lb['program_cpu_s_per_gb']:.3f} CPU-s/GB in the program; idle second {lb['idle_second_cpu_s']:.3f} CPU-s"
        )
        for role, t in lb["threads_s_per_gb"].items():
            print(f"#   {role:>14}: user {t['user']:.3f} system {t['system']:.3f} s/GB")
    doc["cases"] = rows = [run_case(c, args.repeat, not args.no_iperf, args.wait) for c in cases]
    print_table(rows)
    for r in rows:
        print(f"# {r['name']}: whole machine CPU-s during the case {r['machine_cpu_s']}")
    if not (args.no_search or args.quick):
        doc["search"] = [search(n, args.repeat, args.wait, args.target) for n in (12, 32)]
        for s in doc["search"]:
            print(
                f"# highest per-cable rate within {s['target']:.2f}x ideal, {s['servers']} servers multi-ring "
                f"{s['bytes'] >> 20} MiB: {s['highest_mbps'] or 'none tried'} Mbit/s"
            )
    doc["machine"]["loadavg_after"] = os.getloadavg()
    out = Path(args.out)
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(doc, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
