"""Forest AllReduce vs TopoOpt's multi-ring (equal and rate-weighted split) vs one ring.

The TopoOpt-12 plan (12 servers, cables i±1, i±5 at 25 Gbit/s) with some cables degraded to
5 Gbit/s (emulated at link_mbps = 100, so 20 Mbit/s). For 64 MiB it prints, per algorithm,
the predicted time (planner.cost.predict on the emulated rates) and the two lower bounds
(the slowest server's egress bound and the spanning-tree packing bound S / tau, docs/
algorithms.md section 10), for 0..6 degraded cables. With ``--measure`` (root) it
also runs each algorithm on the emulated network for the degraded counts given by
``--measure-degraded`` (``all``: 0..6), every run verified by the workers: one warm-up and
``--repeat`` timed runs of the multi-rings (median), ``--forest-repeat`` of the forest, and
``--ring-repeat`` of the single ring (~50 s a run once a slow cable is on it), no warm-up. It prints the sweep's expected wall time and
its progress per point, and writes benchmarks/results/forest.json and forest.png (time
per algorithm vs degraded cables, predicted lines, measured markers) after every point.

``--case stride5-quarter`` instead runs one network: every ±5 cable at a quarter of the ±1
cables' rate, where the rate-weighted multi-ring should beat the equal split (written to
forest-stride5-quarter.json). ``--algorithms`` picks a subset; ``--out DIR`` writes the files
there instead (a subset or a quick check that should not replace the full sweep's figures).

    .venv/bin/python benchmarks/forest.py [--degraded 0,1,...,6] [--measure] [--measure-degraded 3|all]
        [--algorithms forest,multiring,weighted,ring] [--repeat 2] [--forest-repeat 3] [--ring-repeat 1]
        [--case degraded|stride5-quarter]
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from contract.emulation import EmulationConfig
from contract.files import FileInputError, make_owned_folder, write_file
from planner import build_plan, load_scenario
from planner.collectives.forest import build_forest, plan_capacities
from planner.collectives.from_plan import allreduce_for_plan, plan_rings, ring_weights
from planner.collectives.rings import multiring_allreduce, ring_allreduce
from planner.collectives.tree_packing import allreduce_bounds
from planner.cost.predict import plan_network, predict

OUT = Path(__file__).resolve().parent / "results"
SCENARIO = "scenarios/topoopt-12.toml"
# Cables degraded in this order: the task's three first, then three more spread out.
DEGRADED_ORDER = ((0, 1), (7, 8), (4, 9), (2, 3), (5, 10), (6, 11))
DEGRADED_GBPS = 5.0
NBYTES = 64 << 20
ALGORITHMS = ("forest", "multiring", "weighted", "ring")
QUARTER_STRIDE, QUARTER_FACTOR = 5, 0.25  # the weighted-split case: ±5 cables at 1/4 the rate
LARGE_SERVERS, LARGE_DEGREE, LARGE_DEGRADED_SHARE = 128, 8, 0.10
# Wall-time estimate of a measured point (seen on the 2-core machine): building and removing
# the 12-namespace network, and starting 12 workers per run of a schedule.
NETWORK_SETUP_S, RUN_START_S = 15.0, 2.0


def degraded_plan(plan, count: int):
    slow = set(DEGRADED_ORDER[:count])
    links = tuple(
        dataclasses.replace(link, gbps=DEGRADED_GBPS) if (min(link.a, link.b), max(link.a, link.b)) in slow else link
        for link in plan.links
    )
    return dataclasses.replace(plan, links=links)


def stride_plan(plan, stride: int, factor: float):
    """Every cable of ``stride`` (either direction) at ``factor`` of its rate."""
    n = plan.servers
    links = tuple(
        dataclasses.replace(link, gbps=link.gbps * factor) if (link.b - link.a) % n in (stride, n - stride) else link
        for link in plan.links
    )
    return dataclasses.replace(plan, links=links)


def schedules(plan, nbytes: int, algorithms) -> dict:
    """``forest`` as `topolab collective --algorithm forest` runs it; ``multiring``: the
    equal split over the plan's rings; ``weighted``: split by the rings' bottleneck rates."""
    rings = plan_rings(plan)
    make = {
        "forest": lambda: allreduce_for_plan(plan, "forest", nbytes),
        "multiring": lambda: multiring_allreduce(plan.servers, nbytes, rings),
        "weighted": lambda: multiring_allreduce(plan.servers, nbytes, rings, weights=ring_weights(plan, rings)),
        "ring": lambda: ring_allreduce(plan.servers, nbytes, rings[0]),
    }
    return {name: make[name]() for name in algorithms}


@dataclasses.dataclass(frozen=True)
class Repeats:
    """Timed runs per algorithm: the single ring, ~50 s a run once a slow cable is on it,
    runs ``ring`` timed runs and no warm-up (connection set-up is milliseconds of a run that
    long); the forest (~3 s a run, and the most sensitive to the other processes on the
    machine) one warm-up and ``forest``; the multi-rings one warm-up and ``others``."""

    others: int
    ring: int
    forest: int

    def of(self, name: str) -> tuple[int, int]:
        """(warm-up, timed) runs of algorithm ``name``."""
        if name == "ring":
            return 0, self.ring
        return 1, self.forest if name == "forest" else self.others


def expected_wall_s(predicted: dict[str, float], repeats: Repeats) -> float:
    """Wall time of measuring one point: the emulated network's set-up and tear-down, and
    every run at its predicted time plus the workers' start."""
    return NETWORK_SETUP_S + sum(sum(repeats.of(name)) * (seconds + RUN_START_S) for name, seconds in predicted.items())


def measure(plan, scheds: dict, emulation: EmulationConfig, repeats: Repeats, timeout_s: float) -> dict[str, dict]:
    """Median of the timed runs (`Repeats`) per schedule on the plan's emulated network, every
    run verified by the workers (the pattern of topolab.collective.command.measure)."""
    from emulator import EmulatedNetwork
    from workers.coordinator import Coordinator

    out = {}
    with EmulatedNetwork(plan, emulation, log=lambda m: print(m, file=sys.stderr)) as net:
        hosts = [net.host_address(i) for i in range(plan.servers)]

        def spawn(rank: int, argv: list[str]) -> subprocess.Popen:
            return net.popen(rank, argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

        for name, sched in scheds.items():
            warmup, timed = repeats.of(name)
            started = time.monotonic()
            with Coordinator(sched.to_dict(), hosts, spawn=spawn, timeout_s=timeout_s) as coord:
                runs = [coord.run_iteration(i) for i in range(warmup + timed)]
            times = [r.time_s for r in runs[warmup:]]
            out[name] = {
                "times_s": times,
                "median_s": statistics.median(times),
                "verified": all(r.ok for r in runs),
                "warmup_runs": warmup,
            }
            print(
                f"  measured {name}: {out[name]['median_s']:.3f} s ({timed} timed of {warmup + timed} runs, "
                f"all verified={out[name]['verified']}, {time.monotonic() - started:.0f} s wall, "
                f"load {os.getloadavg()[0]:.1f})",
                file=sys.stderr,
                flush=True,
            )
    return out


def planner_speed() -> dict[str, float]:
    """Seconds to plan the forest: 12 servers with overrides (schedule included), and the
    forest (packing, roots, shares) of 128 servers of degree 8
    (circulant, strides 1..4 both ways) with 10% of the cables at a fifth of the rate."""
    plan = degraded_plan(build_plan(load_scenario(SCENARIO)), 3)
    t0 = time.perf_counter()
    allreduce_for_plan(plan, "forest", NBYTES)
    small = time.perf_counter() - t0
    n = LARGE_SERVERS
    caps = {(v, (v + s) % n): 25.0 for v in range(n) for s in range(1, LARGE_DEGREE // 2 + 1)}
    for e in list(caps)[:: round(1 / LARGE_DEGRADED_SHARE)]:
        caps[e] = DEGRADED_GBPS
    t0 = time.perf_counter()
    forest, packing = build_forest(caps, n, NBYTES)
    large = time.perf_counter() - t0
    return {
        "servers_12_s": small,
        "servers_128_s": large,
        "servers_128_trees": len(forest),
        "servers_128_tau_over_upper": packing.tau / packing.tau_upper,
    }


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    xs = [r["degraded"] for r in rows]
    for name, style in (("forest", "o-"), ("multiring", "s-"), ("weighted", "d-"), ("ring", "^-")):
        if not all(name in r["predicted_s"] for r in rows):
            continue
        (line,) = ax.plot(xs, [r["predicted_s"][name] for r in rows], style, label=f"{name} (predicted)")
        measured = [(r["degraded"], r["measured"][name]["median_s"]) for r in rows if name in r.get("measured", {})]
        if measured:
            ax.plot(
                *zip(*measured),
                style[0],
                color=line.get_color(),
                markersize=11,
                fillstyle="none",
                label=f"{name} (measured)",
            )
    ax.plot(xs, [r["packing_bound_s"] for r in rows], "k--", label="packing bound S/tau")
    ax.set_yscale("log")
    ax.set_xlabel(f"cables degraded to {DEGRADED_GBPS:g} Gbit/s (of 24 at 25)")
    ax.set_ylabel("64 MiB AllReduce time (s, emulated at 100 Mbit/s)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside: the lines fill the axes
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=110)
    plt.close(fig)
    write_file(path, image.getvalue())  # O_NOFOLLOW: a link planted at its name is refused


def degraded_counts(text: str, flag: str) -> set[int]:
    """``0,3,6`` or ``all`` as a set of degraded-cable counts, each in 0..len(DEGRADED_ORDER)."""
    top = len(DEGRADED_ORDER)
    if text == "all":
        return set(range(top + 1))
    try:
        counts = {int(x) for x in text.split(",") if x}
    except ValueError:
        raise ValueError(f"{flag} {text!r}: expected comma-separated integers or all") from None
    if not counts or not counts <= set(range(top + 1)):
        raise ValueError(f"{flag} {text!r}: expected counts in 0..{top}")
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measure", action="store_true", help="also run on the emulated network (root)")
    ap.add_argument("--measure-degraded", default="3", help="comma-separated degraded counts to measure, or all")
    ap.add_argument("--degraded", default="0,1,2,3,4,5,6", help="comma-separated degraded counts to predict")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs of the multi-rings (after one warm-up)")
    ap.add_argument("--forest-repeat", type=int, default=3, help="timed runs of the forest (after one warm-up)")
    ap.add_argument("--ring-repeat", type=int, default=1, help="timed runs of the single ring (no warm-up)")
    ap.add_argument("--timeout", type=float, default=180.0, help="bound on one run (s)")
    ap.add_argument("--wait", type=float, default=900.0, help="wait this long for another emulation run to end")
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS), help=f"comma-separated subset of {ALGORITHMS}")
    ap.add_argument("--case", choices=("degraded", "stride5-quarter"), default="degraded")
    ap.add_argument("--no-speed", action="store_true", help="skip the planner speed figures (128 servers)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"folder of the JSON and the plot (default {OUT})")
    args = ap.parse_args()
    algorithms = [a for a in args.algorithms.split(",") if a]
    if not algorithms or set(algorithms) - set(ALGORITHMS):
        print(f"forest: --algorithms {args.algorithms!r}: expected a subset of {','.join(ALGORITHMS)}", file=sys.stderr)
        return 2
    if args.measure and os.geteuid() != 0:
        print("forest: --measure needs root (emulated network)", file=sys.stderr)
        return 2
    scenario = load_scenario(SCENARIO)
    base = build_plan(scenario)
    emulation = dataclasses.replace(scenario.emulation, lock_wait_s=args.wait)
    link_bps = emulation.link_mbps * 1e6
    mtu = emulation.mtu
    repeats = Repeats(args.repeat, args.ring_repeat, args.forest_repeat)
    if min(dataclasses.astuple(repeats)) < 1:
        print("forest: --repeat, --forest-repeat and --ring-repeat must be at least 1", file=sys.stderr)
        return 2
    try:
        predicted_counts = degraded_counts(args.degraded, "--degraded")
        to_measure = degraded_counts(args.measure_degraded, "--measure-degraded") if args.measure else set()
    except ValueError as exc:
        print(f"forest: {exc}", file=sys.stderr)
        return 2
    rows = []
    counts = sorted(predicted_counts | to_measure)
    if args.case == "stride5-quarter":
        counts = [0]
    plans, scheds_of = {}, {}
    for count in counts:
        plan = degraded_plan(base, count)
        if args.case == "stride5-quarter":
            plan = stride_plan(plan, QUARTER_STRIDE, QUARTER_FACTOR)
            to_measure = {0} if args.measure else set()
        plans[count] = plan
        scheds = scheds_of[count] = schedules(plan, NBYTES, algorithms)
        network = plan_network(plan, link_bps, mtu)
        bounds = allreduce_bounds(plan_capacities(plan, link_bps, mtu), plan.servers, NBYTES)
        row = {
            "degraded": count,
            "packing_bound_s": bounds.packing_s,
            "egress_bound_s": bounds.egress_s,
            "predicted_s": {},
        }
        if "forest" in scheds:
            params = scheds["forest"].params
            row["forest"] = {"shape": params["shape"], "why": params["why"], "trees": len(params.get("trees", []))}
            row["forest_ops_per_rank"] = scheds["forest"].op_count() / plan.servers
        for name, sched in scheds.items():
            row["predicted_s"][name] = predict(sched, network).seconds
        print(f"degraded {count} predicted: " + json.dumps({k: round(v, 3) for k, v in row["predicted_s"].items()}))
        rows.append(row)
    measured_rows = [row for row in rows if row["degraded"] in to_measure]
    expected = {row["degraded"]: expected_wall_s(row["predicted_s"], repeats) for row in measured_rows}
    if measured_rows:
        print(f"measuring {len(measured_rows)} points, about {sum(expected.values()) / 60:.0f} min", flush=True)
    started = time.monotonic()
    for point, row in enumerate(measured_rows, start=1):
        count = row["degraded"]
        print(
            f"[{point}/{len(measured_rows)}, {time.monotonic() - started:.0f} s] degraded {count}: "
            f"measuring {','.join(scheds_of[count])} (about {expected[count]:.0f} s)",
            flush=True,
        )
        row["measured"] = measure(plans[count], scheds_of[count], emulation, repeats, args.timeout)
        write(rows, {}, args.case, link_bps, args.out)
    speed = {} if args.no_speed else planner_speed()
    print(
        f"\n{'degraded':>8} {'algorithm':>10} {'predicted(s)':>12} {'measured(s)':>11} {'/bound':>7} {'meas/pred':>9}"
    )
    for row in rows:
        for name, pred in row["predicted_s"].items():
            meas = row.get("measured", {}).get(name, {}).get("median_s")
            print(
                f"{row['degraded']:>8} {name:>10} {pred:>12.3f} "
                f"{(f'{meas:.3f}' if meas else '-'):>11} {pred / row['packing_bound_s']:>7.3f} "
                f"{(f'{meas / pred:.3f}' if meas else '-'):>9}"
            )
        print(
            f"{row['degraded']:>8} {'bound':>10} {row['packing_bound_s']:>12.3f} (egress {row['egress_bound_s']:.3f})"
        )
    if speed:
        print(
            f"planner: 12 servers {speed['servers_12_s']:.2f} s; 128 servers d={LARGE_DEGREE} with "
            f"{LARGE_DEGRADED_SHARE:.0%} degraded {speed['servers_128_s']:.2f} s ({speed['servers_128_trees']} trees)"
        )
    write(rows, speed, args.case, link_bps, args.out)
    return 0


def write(rows: list[dict], speed: dict, case: str, link_bps: float, out: Path = OUT) -> None:
    """``out``/forest[-case].json and .png (default benchmarks/results; also after every
    measured point, so an interrupted sweep keeps what it measured)."""
    make_owned_folder(out)  # one root may own (not a link, not writable by others)
    doc = {"scenario": SCENARIO, "case": case, "bytes": NBYTES, "link_mbps": link_bps / 1e6, "rows": rows}
    if speed:
        doc["planner_speed"] = speed
    stem = "forest" if case == "degraded" else f"forest-{case}"
    write_file(out / f"{stem}.json", json.dumps(doc, indent=2))
    plot(rows, out / f"{stem}.png")
    print(f"wrote {out / f'{stem}.json'} and {out / f'{stem}.png'}", flush=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except FileInputError as err:  # --out not a folder root may own, or a link planted at a file's name
        print(f"forest: --out: {err}", file=sys.stderr)
        sys.exit(2)
