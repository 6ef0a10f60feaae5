"""The worker data plane at the machine's limit (issue 17): measured / ideal AllReduce time and
the workers' CPU per GB moved against iperf3 on the same cables, side by side in one session.
Needs root (emulated network).

Cases (one emulated network each, built at the case's per-cable rate):

    topoopt-12 multi-ring 64 MiB at 100 and 400 Mbit/s per cable
    topoopt-32 multi-ring and single ring 16 MiB at 100 Mbit/s
    a 64-server TopoOpt network (degree 4) multi-ring 16 MiB at 100 Mbit/s

Per case: the median of --repeat verified iterations over ideal = 2 (n-1) S / (n D)
(`topolab.collective.command.ideal_allreduce_s`), the workers' CPU seconds per GB sent (their user +
system time during the program, kernel TCP work in their system calls included), and iperf3
moving the same bytes between the same pairs of hosts at once (one client per pair the
schedule sends on, the pair's bytes with ``-n``): its CPU seconds per GB (clients and servers,
from the children's rusage). The whole machine's CPU split (user / system / softirq, from
/proc/stat) during the case is printed next to it: the machine is shared, so the per-process
figures are the ones to compare.

Next to the executor, on the same network: the floor (`floor_worker`), a minimal pyzmq +
numpy loop over the same schedule's rings (one PULL per ring, a whole piece per message, no
header, `np.add` from the frame; same inputs, same check), i.e. what pyzmq + numpy does on
this machine at that moment; with ``--baseline DIR`` also the workers of another checkout,
alternately with this tree's for ``--rounds`` rounds. Every figure is given over the ideal
and over the schedule's own bound (its busiest source-destination pair at one cable's
goodput: the ideal for multi-ring, d x the ideal for a single ring, which uses one cable
direction per server); iperf3 also as wall time and as its longest transfer over them.

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

Over 300 lines: the cases, the floor loop (its worker is this file run as
``dataplane.py floor-worker SPEC``, so nothing outside the benchmark carries it), the iperf3
comparison, the rate search and the loopback split by thread all feed one table and one
JSON document, and must run in one session to compare.
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


REPO = Path(__file__).resolve().parent.parent
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
    from planner import build_plan, load_scenario

    scenario = load_scenario(SCENARIOS / case.scenario)
    if scenario.cluster.servers != case.servers:
        scenario = dataclasses.replace(scenario, cluster=dataclasses.replace(scenario.cluster, servers=case.servers))
    return scenario, build_plan(scenario)


def pair_bytes(schedule) -> dict[tuple[int, int], int]:
    """Bytes each (source, destination) pair sends in one iteration of ``schedule``."""
    pairs: dict[tuple[int, int], int] = defaultdict(int)
    for edge in schedule.edge_bytes():  # per stream: summed over the streams here
        pairs[(edge["src"], edge["dst"])] += edge["bytes"]
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
    transfer_cpu, transfer_s = 0.0, 0.0
    for text in reports:
        end = json.loads(text)["end"]
        seconds, cpu = end["sum_sent"]["seconds"], end["cpu_utilization_percent"]
        transfer_cpu += (cpu["host_total"] + cpu["remote_total"]) / 100 * seconds
        transfer_s = max(transfer_s, seconds)
    gb = sum(pairs.values()) / GB
    return {
        "ok": all(c == 0 for c in codes),
        "time_s": elapsed,
        "transfer_s": transfer_s,
        "cpu_s": transfer_cpu,
        "cpu_s_per_gb": transfer_cpu / gb,
        "cpu_s_per_gb_with_start": with_start / gb,
        "gbit_s": gb * 8 / elapsed,
    }


def pair_plane_bytes(schedule) -> dict[tuple[int, int, int], int]:
    """Bytes each (source, destination, plane) sends in one iteration of ``schedule``."""
    out: dict[tuple[int, int, int], int] = defaultdict(int)
    for rank, streams in enumerate(schedule.programs):
        for ops in streams.values():
            for op in ops:
                if op.kind == "send":
                    out[(rank, op.peer, getattr(op, "plane", 0))] += op.length
    return dict(out)


def own_bound_s(schedule, cable_bps: float, goodput_fraction: float) -> float:
    """The schedule's own bound when every (source, destination, plane) it sends on is one
    cable direction: its busiest such pair's bytes at the cable's TCP goodput. For a
    multi-ring over all d cables it equals the egress ideal; a single ring uses one cable
    direction per server, so its own bound is d x the egress ideal."""
    return max(pair_plane_bytes(schedule).values()) * 8 / (cable_bps * goodput_fraction)


def measure_variant(net, plan, case: Case, repeat: int, workers_dir: Path) -> dict:
    """``measure`` with the workers of ``workers_dir`` (a checkout: the worker processes run
    ``python -m workers.worker`` in the current directory)."""
    from topolab.collective.command import measure

    here = os.getcwd()
    os.chdir(workers_dir)
    try:
        (res,) = measure(net, plan, [case.algorithm], [case.nbytes], repeat=repeat, log=log)
    finally:
        os.chdir(here)
    cpu = statistics.median(res.cpu_s)
    return {"verified": res.verified, "time_s": res.time_s, "ideal_s": res.ideal_s, "cpu_s": cpu}


def run_case(
    case: Case, repeat: int, iperf: bool, wait_s: float, baseline: Path | None = None, rounds: int = 1
) -> dict:
    """One emulated network: the executor (and the ``baseline`` checkout's, alternately, for
    ``rounds`` rounds), the floor loop, and iperf3 on the same pairs."""
    from contract.physics import tcp_goodput_fraction
    from emulator import EmulatedNetwork
    from planner.collectives.from_plan import allreduce_for_plan
    from topolab.collective.command import auto_segment

    scenario, plan = plan_for(case)
    sched = allreduce_for_plan(plan, case.algorithm, case.nbytes, auto_segment(case.nbytes))
    pairs = pair_bytes(sched)
    moved = sum(pairs.values())
    gb = moved / GB
    config = dataclasses.replace(scenario.emulation, link_mbps=case.link_mbps, lock_wait_s=wait_s)
    row = dataclasses.asdict(case) | {"gb_per_iteration": gb, "load_before": os.getloadavg()[0]}
    variants = [("executor", REPO)] + ([("baseline", baseline)] if baseline else [])
    runs: dict[str, list[dict]] = defaultdict(list)
    with EmulatedNetwork(plan, config, log=log) as net:
        own_s = own_bound_s(sched, min(net.link_rate_bps), tcp_goodput_fraction(net.mtu))
        m0 = machine_cpu()
        for rnd in range(rounds):
            order = variants if rnd % 2 == 0 else variants[::-1]
            for name, workers_dir in order:
                runs[name].append(measure_variant(net, plan, case, repeat, workers_dir))
            hosts = [net.host_address(i) for i in range(plan.servers)]
            runs["floor"].append(
                run_floor(sched.to_dict(), hosts, lambda r, argv: net.popen(r, argv, stdin=subprocess.DEVNULL), repeat)
            )
        row["machine_cpu_s"] = cpu_split(m0, machine_cpu())
        ideal = runs["executor"][0]["ideal_s"]
        row |= {"ideal_s": ideal, "own_bound_s": own_s, "own_bound_over_ideal": own_s / ideal}
        for name, rs in runs.items():
            t = statistics.median(r["time_s"] for r in rs)
            cpu = statistics.median(r["cpu_s"] for r in rs)
            row[name] = {
                "verified": all(r["verified"] for r in rs),
                "time_s": t,
                "measured_over_ideal": t / ideal,
                "measured_over_own_bound": t / own_s,
                "cores": cpu / t,
                "cpu_s_per_gb": cpu / gb,
                "rounds": [
                    {"time_s": r["time_s"], "over_ideal": r["time_s"] / ideal, "cpu_s_per_gb": r["cpu_s"] / gb}
                    for r in rs
                ],
            }
        ex = row["executor"]
        row |= {
            "verified": ex["verified"],
            "time_s": ex["time_s"],
            "measured_over_ideal": ex["measured_over_ideal"],
            "worker_cores": ex["cores"],
            "worker_cpu_s_per_gb": ex["cpu_s_per_gb"],
        }
        if iperf:
            ip = row["iperf3"] = iperf_same_bytes(net, pairs)
            ip["wall_over_ideal"] = ip["time_s"] / ideal
            ip["wall_over_own_bound"] = ip["time_s"] / own_s
            ip["transfer_over_own_bound"] = ip["transfer_s"] / own_s
            row["worker_over_iperf3_cpu"] = row["worker_cpu_s_per_gb"] / ip["cpu_s_per_gb"]
    row["load_after"] = os.getloadavg()[0]
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
    from planner.collectives import multiring_allreduce, topoopt_rings
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


# ---- the floor: a minimal pyzmq + numpy multi-ring loop -----------------------------------
FLOOR_TIMEOUT_S = 60.0  # every wait of the floor run is bounded by this
FLOOR_START_S = 180.0  # 64 Python processes starting on 2 busy cores: well within this


def floor_worker(spec_path: str) -> int:
    """One rank of the floor: the rank's streams of the same schedule, each a ring (one
    successor, one predecessor), run with one PULL socket per stream, a whole piece per
    message (one frame, zero-copy, no header), ``np.add`` straight from the frame, copies with
    ``recv_into``; inputs filled and results checked by the executor's own `workers.patterns`
    and `workers.verify`. Sends are untracked: a ring's piece region is next written only
    after its successor received it (the data comes back around the ring), and the next
    iteration's inputs only once every rank finished (``fill`` from the parent)."""
    import numpy as np
    import zmq

    from workers import patterns
    from workers.verify import verify

    spec = json.loads(Path(spec_path).read_text())
    rank = spec["rank"]
    ctx = zmq.Context()
    ctl = ctx.socket(zmq.DEALER)
    ctl.connect(spec["control"])
    raw, arrays, index = {}, {}, {}
    for i, b in enumerate(spec["buffers"]):
        raw[b["name"]] = r = np.zeros(int(b["bytes"]), dtype=np.uint8)
        arrays[b["name"]] = r.view(np.dtype(b.get("dtype", "float32")))
        index[b["name"]] = i
    streams = [ops for ops in spec["streams"].values() if ops]
    pulls = []
    for _ in streams:
        pull = ctx.socket(zmq.PULL)
        pull.bind(f"tcp://{spec['host']}:*")
        pulls.append(pull)
    ctl.send_json({"rank": rank, "endpoints": [p.getsockopt(zmq.LAST_ENDPOINT).decode() for p in pulls]})
    if not ctl.poll(FLOOR_START_S * 1000):
        return 1
    connect = ctl.recv_json()["connect"]  # per stream: the successor's PULL endpoint
    pushes = []
    for endpoint in connect:
        push = ctx.socket(zmq.PUSH)
        push.connect(endpoint)
        pushes.append(push)
    poller = zmq.Poller()
    for pull in pulls:
        poller.register(pull, zmq.POLLIN)
    which = {pull: s for s, pull in enumerate(pulls)}
    for name, arr in arrays.items():
        patterns.fill_input(arr, rank, index[name], 0)
    ctl.send_json({"rank": rank, "connected": True})
    while ctl.poll(FLOOR_TIMEOUT_S * 1000):
        msg = ctl.recv_json()
        if "fill" in msg:  # every rank finished the last iteration: no send reads the buffers
            for name, arr in arrays.items():
                patterns.fill_input(arr, rank, index[name], msg["fill"])
            ctl.send_json({"rank": rank, "filled": True})
            continue
        if "iteration" not in msg:
            break
        it = msg["iteration"]
        pos = [0] * len(streams)

        def sends(s: int, pos: list[int] = pos) -> None:
            ops = streams[s]
            while pos[s] < len(ops) and ops[pos[s]]["op"] == "send":
                op = ops[pos[s]]
                o = op["offset"]
                pushes[s].send(raw[op["buffer"]][o : o + op["length"]], copy=False)
                pos[s] += 1

        cpu0, t0 = time.process_time(), time.monotonic()
        for s in range(len(streams)):
            sends(s)
        left = sum(pos[s] < len(ops) for s, ops in enumerate(streams))
        ok = True
        while left:
            events = poller.poll(FLOOR_TIMEOUT_S * 1000)
            if not events:
                ok = False
                break
            for sock, _ in events:
                s = which[sock]
                op = streams[s][pos[s]]
                o, n, name = op["offset"], op["length"], op["buffer"]
                if op.get("mode") == "reduce":
                    frame = sock.recv(copy=False)
                    arr = arrays[name]
                    isz = arr.itemsize
                    target = arr[o // isz : (o + n) // isz]
                    np.add(target, np.frombuffer(frame, dtype=arr.dtype), out=target)
                else:
                    sock.recv_into(raw[name][o : o + n])
                pos[s] += 1
                sends(s)
                if pos[s] == len(streams[s]):
                    left -= 1
        t1, cpu = time.monotonic(), time.process_time() - cpu0
        ok = ok and not verify(rank, spec["checks"], arrays, index, it)
        ctl.send_json({"rank": rank, "ok": ok, "t_start": t0, "t_end": t1, "cpu_s": cpu})
    for sock in pulls + pushes + [ctl]:
        sock.close(linger=0)
    ctx.term()
    return 0


def run_floor(schedule: dict, hosts: list[str], spawn, repeat: int, warmup: int = 1) -> dict:
    """Run ``schedule`` (every stream a ring) with `floor_worker` on ``hosts``
    (``spawn(rank, argv)`` starts a process on rank's host): time, CPU, verified."""
    import tempfile

    import zmq

    n = int(schedule["ranks"])
    with tempfile.TemporaryDirectory(prefix="topolab-floor-") as tmp:
        ctx = zmq.Context()
        router = ctx.socket(zmq.ROUTER)
        router.bind(f"ipc://{tmp}/control")
        procs = []
        for rank in range(n):
            path = Path(tmp) / f"rank-{rank}.json"
            streams = schedule["programs"][rank]
            path.write_text(
                json.dumps(
                    {
                        "rank": rank,
                        "host": hosts[rank],
                        "control": f"ipc://{tmp}/control",
                        "buffers": schedule["buffers"],
                        "checks": schedule["checks"],
                        "streams": streams,
                    }
                )
            )
            procs.append(spawn(rank, [sys.executable, str(Path(__file__).resolve()), "floor-worker", str(path)]))
        try:

            def gather(what: str, timeout_s: float = FLOOR_TIMEOUT_S) -> dict[int, tuple[bytes, dict]]:
                got = {}
                while len(got) < n:
                    if not router.poll(timeout_s * 1000):
                        raise RuntimeError(f"floor: no {what} from ranks {sorted(set(range(n)) - set(got))}")
                    ident, body = router.recv_multipart()
                    msg = json.loads(body)
                    got[msg["rank"]] = (ident, msg)
                return got

            ready = gather("endpoints", FLOOR_START_S)
            names = [[name for name, ops in schedule["programs"][r].items() if ops] for r in range(n)]
            for rank, (ident, _) in ready.items():
                succ = []
                for name in names[rank]:
                    peer = next(op["peer"] for op in schedule["programs"][rank][name] if op["op"] == "send")
                    succ.append(ready[peer][1]["endpoints"][names[peer].index(name)])
                router.send_multipart([ident, json.dumps({"connect": succ}).encode()])
            idents = {r: ident for r, (ident, _) in gather("connected").items()}
            times, cpus, ok = [], [], True
            for it in range(warmup + repeat):
                if it:
                    for ident in idents.values():
                        router.send_multipart([ident, json.dumps({"fill": it}).encode()])
                    gather(f"filled {it}")
                for ident in idents.values():
                    router.send_multipart([ident, json.dumps({"iteration": it}).encode()])
                res = [m for _, m in gather(f"iteration {it}").values()]
                ok = ok and all(m["ok"] for m in res)
                if it >= warmup:
                    times.append(max(m["t_end"] for m in res) - min(m["t_start"] for m in res))
                    cpus.append(sum(m["cpu_s"] for m in res))
            for ident in idents.values():
                router.send_multipart([ident, b"{}"])
        finally:
            for p in procs:
                try:
                    p.wait(FLOOR_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            router.close(linger=0)
            ctx.term()
    return {"verified": ok, "time_s": statistics.median(times), "cpu_s": statistics.median(cpus), "times_s": times}


def print_table(rows: list[dict]) -> None:
    """Per case, side by side: this tree's executor, the baseline's (if run), the floor loop
    and iperf3, as measured / ideal (egress ideal), over the schedule's own bound, CPU s/GB."""
    print(
        f"{'case':>8} {'alg':>8} {'size':>6} {'Mbit/s':>7} {'who':>9} {'meas/ideal':>10} {'/own bnd':>8} "
        f"{'cores':>6} {'cpu s/GB':>9} {'verified':>8}"
    )
    for r in rows:
        head = f"{r['name']:>8} {r['algorithm']:>8} {r['nbytes'] >> 20:>5}M {r['link_mbps']:>7g}"
        for who in ("executor", "baseline", "floor"):
            if who in r:
                w = r[who]
                print(
                    f"{head} {who:>9} {w['measured_over_ideal']:>10.3f} {w['measured_over_own_bound']:>8.3f} "
                    f"{w['cores']:>6.2f} {w['cpu_s_per_gb']:>9.3f} {'yes' if w['verified'] else 'NO':>8}"
                )
                head = " " * len(head)
        ip = r.get("iperf3")
        if ip:
            print(
                f"{head} {'iperf3':>9} {ip['wall_over_ideal']:>10.3f} {ip['wall_over_own_bound']:>8.3f} "
                f"{ip['cpu_s'] / ip['time_s']:>6.2f} {ip['cpu_s_per_gb']:>9.3f} {'ok' if ip['ok'] else 'FAILED':>8}"
            )
        versus_iperf3 = (
            f"executor CPU {r['worker_over_iperf3_cpu']:.2f} x iperf3's; "
            f"iperf3 transfer / own bound {ip['transfer_over_own_bound']:.3f}; "
            if ip and "worker_over_iperf3_cpu" in r
            else ""
        )
        print(
            f"{'':>8} own bound = {r['own_bound_over_ideal']:.2f} x ideal; {versus_iperf3}"
            f"load {r['load_before']:.1f} -> {r['load_after']:.1f}"
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
    ap.add_argument("--baseline", type=Path, help="a checkout whose workers run alternately with this tree's")
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds of executor / baseline / floor")
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
        "format": "topolab.dataplane/2",
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
    doc["cases"] = rows = [
        run_case(c, args.repeat, not args.no_iperf, args.wait, args.baseline, args.rounds) for c in cases
    ]
    print_table(rows)
    for r in rows:
        print(f"# {r['name']}: whole machine CPU-s during the case {r['machine_cpu_s']}")
    if not (args.no_search or args.quick):
        doc["search"] = [search(n, args.repeat, args.wait, args.target) for n in (12, 32)]
        for s in doc["search"]:
            print(
                f"# highest per-cable rate within {s['target']:.2f}x ideal, {s['servers']} servers multi-ring "
                f"{s['bytes'] >> 20} MiB: "
                + (f"{s['highest_mbps']} Mbit/s" if s["highest_mbps"] else "none of the rates tried")
            )
    doc["machine"]["loadavg_after"] = os.getloadavg()
    out = Path(args.out)
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(doc, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["floor-worker"]:
        sys.exit(floor_worker(sys.argv[2]))
    sys.exit(main())
