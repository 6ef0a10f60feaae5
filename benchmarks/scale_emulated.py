"""The emulated side of the scale benchmark (`benchmarks/scale.py` measures the planner's): how
one machine emulates n servers, and the scale matrix of jobs x sizes x degrees. Needs root
(``--plot-only`` and ``--table`` do not).

For n servers on TopoOpt of degree d and a job (ResNet-50 data parallel from
scenarios/resnet50-128.toml, DLRM hybrid from scenarios/dlrm-128.toml, NCF hybrid from
scenarios/ncf-128.toml, BERT data parallel from scenarios/bert-128.toml, with ``servers`` and
``degree`` replaced; ``--jobs dlrm:data`` takes another strategy than the scenario's), one run
as `topolab run` makes it with default settings (``link_mbps = "auto"``: the rate and payload
scale chosen for this machine), through the product's own stages (`topolab.run.measured_run`);
right after, on the same network, iperf3 moves the same bytes between the same pairs at once
(when the schedule has at most ``--iperf-max-pairs`` pairs: DLRM's all-to-all has n (n - 1)).
Per cell:

- the rate, time scale and payload scale chosen, the iteration's ops and bytes;
- the workers' CPU per iteration (the median over the timed iterations, all ranks), seen two
  ways: us per op (all of it over the ops) and s per GB sent (all of it over the bytes; the
  figure to hold against iperf3's s/GB), each charging everything to one cause, so a job
  of few large transfers shows a high per-op figure; beside them the machine probe's split
  (`topolab.run.machine_probe`: us per op, s per GB) that chose the rate;
- measured and predicted ms, the error |predicted - measured| / measured, verified, the
  workers' load (share of the machine's cores);
- wall seconds per iteration (the iterations stage over the iterations run, warm-up
  included), seconds to bring the hosts up and to take them down, the whole cell's seconds;
- the machine's peak memory in use during the cell, over what was in use before.

The scale matrix, one command (4 jobs x 4 sizes x 2 degrees: about 3.5 h on 2 cores, BERT most of it):

    sudo .venv/bin/python benchmarks/scale_emulated.py --jobs resnet50,dlrm,ncf,bert --matrix-only

Every cell is written to benchmarks/results/scale_matrix.json as soon as it ends (a run killed
keeps what it measured; each cell keeps the command that measures it again alone), and
``--resume`` skips the cells measured there already (a failed cell is tried again). The heat
map benchmarks/results/scale_matrix.png (rows job / strategy / degree, columns sizes, colour
the error) is drawn from that JSON alone at the end, or with ``--plot-only``; ``--table`` prints
the JSON as a Markdown table (rate, errors, the commit and day of each cell). When a cell
fails, the larger sizes of its job and degree are not run (they need more of the machine).

    sudo .venv/bin/python benchmarks/scale_emulated.py [--sizes 12,32,64,128] [--jobs resnet50,dlrm]
        [--degrees 4,8] [--iterations 2] [--iperf-max-pairs 600] [--run-dir DIR]
        [--resume] [--matrix-only] [--matrix-out FILE]
    .venv/bin/python benchmarks/scale_emulated.py --plot-only
    .venv/bin/python benchmarks/scale_emulated.py --table

Prints a table; unless ``--matrix-only``, writes the section "emulated" of
benchmarks/results/scale.json (other sections kept; the rows of the cells asked) and
benchmarks/results/scale-emulated.png.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

RESULTS = REPO / "benchmarks" / "results"
MATRIX_JSON = RESULTS / "scale_matrix.json"
JOB_SCENARIOS = {
    "resnet50": "resnet50-128.toml",
    "dlrm": "dlrm-128.toml",
    "ncf": "ncf-128.toml",
    "bert": "bert-128.toml",
}
JOB_NAMES = {"resnet50": "ResNet-50", "dlrm": "DLRM", "ncf": "NCF", "bert": "BERT"}
DEFAULT_JOBS = ("resnet50", "dlrm")  # the README's table; the matrix is --jobs resnet50,dlrm,ncf,bert
MATRIX_JOBS = tuple(JOB_SCENARIOS)
SIZES, DEGREES = (12, 32, 64, 128), (4, 8)
ITERATIONS, IPERF_MAX_PAIRS = 2, 600
CELL_BOUND, MEDIAN_TARGET = 0.10, 0.05  # issue 50's acceptance: every cell within 10%, the median within 5%
GB = 1e9
SCRIPT = "benchmarks/scale_emulated.py"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass(frozen=True, order=True)
class Cell:
    """One cell of the matrix: a job with a parallel strategy on n servers of degree d."""

    job: str
    strategy: str
    degree: int
    servers: int

    @property
    def key(self) -> tuple[str, str, int, int]:
        return (self.job, self.strategy, self.servers, self.degree)

    @property
    def row_label(self) -> str:
        return f"{JOB_NAMES.get(self.job, self.job)} {self.strategy}, d = {self.degree}"

    def command(self, iterations: int, iperf_max_pairs: int, matrix_out: Path) -> str:
        """The command that measures this cell again, alone, into the same matrix JSON."""
        job = self.job if self.strategy == scenario_strategy(self.job) else f"{self.job}:{self.strategy}"
        words = ["sudo", ".venv/bin/python", SCRIPT, "--jobs", job, "--sizes", str(self.servers)]
        words += ["--degrees", str(self.degree), "--iterations", str(iterations)]
        if iperf_max_pairs != IPERF_MAX_PAIRS:
            words += ["--iperf-max-pairs", str(iperf_max_pairs)]
        if matrix_out.resolve() != MATRIX_JSON:
            words += ["--matrix-out", str(matrix_out)]
        return shlex.join([*words, "--matrix-only"])

    @classmethod
    def of(cls, row: dict[str, Any]) -> Cell:
        return cls(row["job"], row.get("strategy") or scenario_strategy(row["job"]), row["degree"], row["servers"])


_STRATEGIES: dict[str, str] = {}


def scenario_strategy(job: str) -> str:
    """The parallel strategy of the job's scenario (data for ResNet-50 and BERT, hybrid for
    the jobs with embedding tables, DLRM and NCF), read once from the file."""
    if job not in _STRATEGIES:
        import tomllib

        with open(REPO / "scenarios" / JOB_SCENARIOS[job], "rb") as f:
            _STRATEGIES[job] = tomllib.load(f).get("parallelism", {}).get("strategy", "hybrid")
    return _STRATEGIES[job]


def parse_jobs(text: str) -> list[tuple[str, str]]:
    """``--jobs``: ``job`` (its scenario's strategy) or ``job:strategy``, comma separated; a
    bad name is a `ValueError` naming the flag and the value."""
    jobs = []
    for word in (w.strip() for w in text.split(",") if w.strip()):
        job, _, strategy = word.partition(":")
        if job not in JOB_SCENARIOS:
            raise ValueError(f"--jobs {job}: known jobs are {', '.join(JOB_SCENARIOS)}")
        if strategy and strategy not in ("data", "hybrid"):
            raise ValueError(f"--jobs {word}: the strategy after ':' is data or hybrid")
        jobs.append((job, strategy or scenario_strategy(job)))
    if not jobs:
        raise ValueError(f"--jobs {text!r}: no job named")
    return jobs


def parse_ints(text: str, flag: str, lowest: int) -> list[int]:
    """``--sizes`` / ``--degrees``: positive integers, comma separated."""
    try:
        values = [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        raise ValueError(f"{flag} {text!r}: comma-separated integers, e.g. 12,32") from None
    if not values or min(values) < lowest:
        raise ValueError(f"{flag} {text!r}: integers of at least {lowest}")
    return values


def matrix_cells(jobs: Iterable[tuple[str, str]], sizes: Iterable[int], degrees: Iterable[int]) -> list[Cell]:
    """The cells in the order they run: job by job, degree by degree, the sizes rising (a
    failed cell skips the larger sizes of its job and degree)."""
    return [Cell(job, strategy, d, n) for job, strategy in jobs for d in degrees for n in sorted(sizes)]


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


def scenario_for(cell: Cell, iterations: int):
    from planner import load_scenario
    from planner.scenario import with_overrides

    base = load_scenario(REPO / "scenarios" / JOB_SCENARIOS[cell.job])
    return with_overrides(
        base,
        cluster={"servers": cell.servers, "degree": cell.degree},
        parallelism={"strategy": cell.strategy},
        run={"iterations": iterations, "warmup": 1},
    )


def run_case(
    cell: Cell, iterations: int, iperf_max_pairs: int, run_dir: str | None, row: dict[str, Any]
) -> dict[str, Any]:
    """One emulated run of the cell, then iperf3 on the same network (module docstring). The
    facts go into ``row`` as they are known, so a cell that fails keeps those it reached."""
    from topolab.run.measured_run import with_rate_checks

    s = scenario_for(cell, iterations)
    out_dir = Path(tempfile.mkdtemp(prefix=f"scale-{cell.job}-{cell.servers}-"))
    row["out_dir"] = str(out_dir)
    t_case = time.monotonic()
    rebuilt: list[float] = []

    def rebuilt_from(high: Any) -> None:
        rebuilt.append(high.at_mbps)
        row["rates_rebuilt_from"] = rebuilt

    return with_rate_checks(  # as `topolab run` does
        s,
        lambda scenario, retune, notes: run_attempt(
            scenario, out_dir, iperf_max_pairs, run_dir, row, t_case, retune, notes
        ),
        log,
        rebuilt_from,
    )


def run_attempt(
    s: Any,
    out_dir: Path,
    iperf_max_pairs: int,
    run_dir: str | None,
    row: dict[str, Any],
    t_case: float,
    retune: bool,
    notes: list[str],
) -> dict[str, Any]:
    """One attempt of `run_case` (a warm-up over the workers' share ends it with `RateTooHigh`)."""
    from dataplane import iperf_same_bytes, pair_bytes  # the same iperf3 comparison

    from topolab.common.network import NetworkFlags, network_config, open_network
    from topolab.run.measured_run import calibrate, iterate, network_facts, prepare_run, record

    with PeakMemory() as memory:
        t0 = time.monotonic()
        run = prepare_run(s, out_dir, None, None, None, log, retune=retune, notes=notes)
        row["prepare_s"] = time.monotonic() - t0
        results, schedule = run.results, run.schedule
        row.update(
            link_mbps=run.scenario.emulation.link_mbps,
            time_scale=results.emulation.time_scale,
            payload_scale=results.emulation.payload_scale,
            commit=results.environment.commit,
        )
        config = network_config(run.scenario.emulation, NetworkFlags(run_dir=run_dir))
        try:
            with open_network(run.plan, config, log=log) as net:
                workers = network_facts(run, net)
                calibrate(run, net, workers)
                row["predicted_ms"] = results.predicted.real_ms if results.predicted else None
                t0 = time.monotonic()
                try:
                    iterate(run, net, workers)
                finally:
                    row.update(measured_facts(results))
                row["wall_s_per_iteration"] = (time.monotonic() - t0) / (run.iterations + s.run.warmup)
                pairs = pair_bytes(schedule)
                if len(pairs) <= iperf_max_pairs:
                    row["iperf3"] = iperf_same_bytes(net, pairs)
                else:
                    row["iperf3"] = None
                    row["iperf3_skipped"] = f"{len(pairs)} pairs > --iperf-max-pairs {iperf_max_pairs}"
            results.emulation.teardown_s = net.facts.get("teardown_s")
            results.status = "complete"
        except BaseException as err:
            results.status = "interrupted" if isinstance(err, KeyboardInterrupt) else "failed"
            results.error = f"{type(err).__name__}: {err}"
            raise
        finally:
            if results.emulation.netem is not None:  # the network came up: results.json and the report
                record(run, None)
    row["peak_memory_gib"] = memory.growth_gib
    row["case_s"] = time.monotonic() - t_case
    dilation = results.emulation.dilation or {}
    ops, sent, cpu = int(dilation.get("ops", 0)), int(dilation.get("bytes_sent", 0)), row.get("worker_cpu_s")
    row.update(
        link_mbps=results.emulation.link_mbps,
        ops=ops,
        bytes_sent=sent,
        us_per_op=cpu / ops * 1e6 if cpu and ops else None,
        probe_us_per_op=dilation.get("op_cpu_s", 0.0) * 1e6,
        probe_s_per_gb=dilation.get("byte_cpu_s", 0.0) * 1e9,
        cpu_s_per_gb=cpu / (sent / GB) if cpu and sent else None,
        hosts_up_s=results.emulation.network.get("build_s"),
        hosts_down_s=results.emulation.teardown_s,
    )
    if row.get("iperf3") and row["cpu_s_per_gb"]:
        row["cpu_over_iperf3"] = row["cpu_s_per_gb"] / row["iperf3"]["cpu_s_per_gb"]
    return row


def measured_facts(results: Any) -> dict[str, Any]:
    """What the iterations run so far measured: median ms, error, verified, load, CPU."""
    summary = results.summarize()
    timed = [it for it in results.iterations if not it.warmup]
    cpus = [it.worker_cpu_s for it in timed if it.worker_cpu_s is not None]
    measured, predicted = summary.median_real_ms, results.predicted.real_ms if results.predicted else None
    return {
        "iterations_run": len(timed),
        "measured_ms": measured,
        "predicted_ms": predicted,
        "error": summary.error,
        "measured_over_predicted": measured / predicted if measured and predicted else None,
        "verified": summary.verified,
        "cpu_load": summary.cpu_load,
        "worker_cpu_s": statistics.median(cpus) if cpus else None,
    }


# --- the matrix JSON: one document, rewritten whole after every cell -----------------------------


def load_matrix(path: Path) -> dict[str, Any]:
    """The matrix document at ``path`` (an empty one when there is none)."""
    from contract.files import read_capped_text

    if not path.exists():
        return {"cells": []}
    doc = json.loads(read_capped_text(path, 64 << 20, "scale matrix JSON"))
    doc.setdefault("cells", [])
    return doc


def put_cell(doc: dict[str, Any], row: dict[str, Any]) -> None:
    """``row`` in ``doc`` in place of an earlier measurement of the same cell."""
    key = Cell.of(row).key
    doc["cells"] = [r for r in doc["cells"] if Cell.of(r).key != key] + [row]
    doc["cells"].sort(key=lambda r: sort_key(Cell.of(r)))


def save_matrix(doc: dict[str, Any], path: Path) -> None:
    """Write ``doc`` whole: to a file beside ``path``, then renamed over it (a kill leaves the
    previous version or this one, never half of one)."""
    from contract.files import write_file

    doc["about"] = (
        f"the scale matrix of {SCRIPT}: one topolab run per cell (default settings, link_mbps auto), "
        "the latest measurement of each cell; error = |predicted - measured| / measured; command: the cell alone"
    )
    doc["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    doc["cpus"] = os.cpu_count()
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    write_file(partial, json.dumps(doc, indent=1) + "\n")
    os.replace(partial, path)


def sort_key(cell: Cell) -> tuple:
    order = list(JOB_SCENARIOS)
    return (
        order.index(cell.job) if cell.job in order else len(order),
        cell.job,
        cell.strategy,
        cell.degree,
        cell.servers,
    )


def measured_cells(doc: dict[str, Any]) -> set[tuple[str, str, int, int]]:
    """The keys of the cells ``doc`` holds a measurement of (failed ones excluded)."""
    return {Cell.of(r).key for r in doc["cells"] if r.get("status") == "measured"}


# --- how long the rest takes -------------------------------------------------------------------


def prior_seconds(doc: dict[str, Any], legacy_rows: Iterable[dict[str, Any]]) -> dict[tuple, float]:
    """What each cell took the last time it was measured (the matrix JSON, else the rows of
    scale.json's section "emulated"): the ETA's first guess."""
    prior: dict[tuple, float] = {}
    for row in [*legacy_rows, *doc["cells"]]:  # the matrix's figure wins; a failure's time says nothing
        if row.get("case_s") and row.get("status", "measured") == "measured" and "failed" not in row:
            prior[Cell.of(row).key] = float(row["case_s"])
    return prior


def estimate_seconds(
    cell: Cell, prior: dict[tuple, float], done: dict[tuple, float], default_s: float = 120.0
) -> float:
    """Seconds ``cell`` will take: its prior figure times how this session compares with the
    priors so far (the median ratio); without a prior, the same job and degree's largest size
    known, grown to this size as another job of that degree grew (one of the same strategy
    first; linearly in servers when none is known at both sizes), else the mean cell of this
    session, else ``default_s``."""
    ratios = [done[k] / prior[k] for k in done if k in prior and prior[k] > 0]
    pace = statistics.median(ratios) if ratios else 1.0
    if cell.key in prior:
        return prior[cell.key] * pace
    known = {**prior, **done}
    smaller = [
        (k[2], s) for k, s in known.items() if k[:2] == cell.key[:2] and k[3] == cell.degree and k[2] <= cell.servers
    ]
    if smaller:
        n, s = max(smaller)
        references = sorted(
            (k[1] != cell.strategy, k[0], k[1])
            for k in known
            if k[3] == cell.degree and k[2] == n and (k[0], k[1], cell.servers, cell.degree) in known
        )
        if references:
            _, job, strategy = references[0]
            return s * known[(job, strategy, cell.servers, cell.degree)] / known[(job, strategy, n, cell.degree)]
        return s * cell.servers / n
    if done:
        return statistics.mean(done.values())
    return default_s


def duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min"


# --- the table and the plots -------------------------------------------------------------------


def fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'job':>8} {'strat':>6} {'n':>4} {'d':>2} {'Mbit/s':>7} {'scale':>6} {'us/op':>6} {'s/GB':>6} {'iperf3':>7} "
        f"{'probe':>10} {'meas ms':>9} {'pred ms':>9} {'err':>6} {'ok':>3} {'load':>5} {'s/iter':>7} {'up s':>6} "
        f"{'down s':>6} {'GiB':>5}"
    )
    for r in rows:
        strategy = r.get("strategy") or scenario_strategy(r["job"])
        if "failed" in r:
            print(f"{r['job']:>8} {strategy:>6} {r['servers']:>4} {r['degree']:>2}  failed: {r['failed']}")
            continue
        iperf = r.get("iperf3") or {}
        print(
            f"{r['job']:>8} {strategy:>6} {r['servers']:>4} {r['degree']:>2} {r['link_mbps']:>7g} "
            f"{r['payload_scale']:>6g} {fmt(r['us_per_op'], '6.1f')} {fmt(r['cpu_s_per_gb'], '6.2f')} "
            f"{fmt(iperf.get('cpu_s_per_gb'), '7.2f')} {r['probe_us_per_op']:>4.0f}us/{r['probe_s_per_gb']:.2f} "
            f"{fmt(r['measured_ms'], '9.3f')} {fmt(r['predicted_ms'], '9.3f')} {fmt(r['error'], '6.1%')} "
            f"{'yes' if r['verified'] else 'NO':>3} {fmt(r['cpu_load'], '5.0%')} {r['wall_s_per_iteration']:>7.1f} "
            f"{fmt(r['hosts_up_s'], '6.2f')} {fmt(r['hosts_down_s'], '6.2f')} {r['peak_memory_gib']:>5.1f}"
        )


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """scale-emulated.png: rate chosen, error and wall time per iteration against servers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if "failed" not in r]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    lines = sorted({(r["job"], r.get("strategy") or scenario_strategy(r["job"]), r["degree"]) for r in ok})
    for (job, strategy, degree), marker in zip(lines, "osd^v<>ph*"):
        mine = sorted(
            (
                r
                for r in ok
                if (r["job"], r.get("strategy") or scenario_strategy(r["job"]), r["degree"]) == (job, strategy, degree)
            ),
            key=lambda r: r["servers"],
        )
        n = [r["servers"] for r in mine]
        label = f"{job} d={degree}" if strategy == scenario_strategy(job) else f"{job} {strategy} d={degree}"
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


def seconds(value: float | None) -> str:
    """Wall seconds for a heat-map cell: one decimal below 10 s."""
    return "-" if value is None else f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def short_reason(failure: str, width: int = 28, lines: int = 3) -> str:
    """A failed cell's reason in a few short lines: the message after the exception's name."""
    import textwrap

    message = re.sub(r" \([^)]*\)", "", failure.split(": ", 1)[-1])  # "(host ..., pid ...)": in the JSON
    wrapped = textwrap.wrap(message, width)
    return "\n".join(wrapped[:lines]) + ("..." if len(wrapped) > lines else "")


HEAT_MAX = 0.20  # the colour scale's top: 20% and over are the darkest red
NOT_RUN_GREY, FAILED_GREY = "#e4e4e4", "#a8a8a8"


def heat_grid(doc: dict[str, Any], cells: Iterable[Cell]) -> tuple[list[tuple[str, str, int]], list[int], dict]:
    """The heat map's rows (job, strategy, degree), columns (sizes) and the matrix's row of
    each cell it holds: the cells given (the default matrix: grey where not run) and every
    cell of ``doc``."""
    held = {Cell.of(r).key: r for r in doc["cells"]}
    every = set(cells) | {Cell.of(r) for r in doc["cells"]}
    ordered = sorted(every, key=sort_key)
    rows = list(dict.fromkeys((c.job, c.strategy, c.degree) for c in ordered))
    sizes = sorted({c.servers for c in every})
    return rows, sizes, held


def matrix_table(doc: dict[str, Any], cells: Iterable[Cell] = ()) -> str:
    """The matrix JSON as a Markdown table, a line per cell in the heat map's order (the
    cells given, "not run" where the JSON has none): the rate and payload scale chosen (and
    the rates the warm-up rebuilt from), predicted and measured ms, the error, wall seconds an
    iteration, the workers' load, and the commit and day each cell was measured at."""
    rows, sizes, held = heat_grid(doc, cells)
    lines = [
        "| job | d | servers | rate | payload | predicted | measured | error | s/it | load | commit, day |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for job, strategy, degree in rows:
        for n in sizes:
            row = held.get((job, strategy, n, degree))
            name = f"{JOB_NAMES.get(job, job)} {strategy}"
            if row is None:
                lines.append(f"| {name} | {degree} | {n} | not run | | | | | | | |")
                continue
            if row.get("status") != "measured" or row.get("error") is None:
                why = short_reason(row.get("failed") or "").replace("\n", " ")
                lines.append(f"| {name} | {degree} | {n} | failed: {why} | | | | | | | {row.get('commit', '')} |")
                continue
            rate = f"{row['link_mbps']:g} Mbit/s"
            if row.get("rates_rebuilt_from"):
                rate += " (from " + ", ".join(f"{r:g}" for r in row["rates_rebuilt_from"]) + ")"
            error = f"{100 * row['error']:.1f}%" + ("" if row.get("verified") else " NOT VERIFIED")
            lines.append(
                f"| {name} | {degree} | {n} | {rate} | {row['payload_scale']:g} | {row['predicted_ms']:.3f} ms "
                f"| {row['measured_ms']:.3f} ms | {error} | {seconds(row.get('wall_s_per_iteration'))} "
                f"| {fmt(row.get('cpu_load'), '.0%')} | {row.get('commit', '')}, {str(row.get('started', ''))[:10]} |"
            )
    return "\n".join(lines)


def heat_map(doc: dict[str, Any], path: Path, cells: Iterable[Cell] = ()) -> None:
    """scale_matrix.png from the matrix JSON alone: a row per job / strategy / degree, a
    column per size, the colour and the figure the cell's error (grey: not run or failed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import Normalize
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    rows, sizes, held = heat_grid(doc, cells)
    cmap, norm = plt.get_cmap("YlOrRd"), Normalize(0, 100 * HEAT_MAX)
    fig, ax = plt.subplots(figsize=(2.2 + 1.7 * len(sizes), 1.6 + 0.72 * len(rows)))
    errors = []
    for y, (job, strategy, degree) in enumerate(rows):
        for x, n in enumerate(sizes):
            row = held.get((job, strategy, n, degree))
            measured = row is not None and row.get("status") == "measured" and row.get("error") is not None
            if measured:
                pct = 100 * row["error"]
                errors.append(row["error"])
                face = cmap(norm(min(pct, 100 * HEAT_MAX)))
                dark = norm(min(pct, 100 * HEAT_MAX)) > 0.6
                text = f"{pct:.1f}%"
                ratio = row.get("measured_over_predicted")
                detail = (f"measured {ratio:.2f}x predicted\n" if ratio else "") + (
                    f"{seconds(row.get('wall_s_per_iteration'))}/it, load {fmt(row.get('cpu_load'), '.0%')}"
                )
                if not row.get("verified"):
                    detail = "NOT VERIFIED"
            elif row is not None:
                face, dark, text = FAILED_GREY, False, "failed"
                detail = short_reason(row.get("failed") or "")
            else:
                face, dark, text, detail = NOT_RUN_GREY, False, "not run", ""
            ax.add_patch(Rectangle((x, y), 1, 1, facecolor=face, edgecolor="white", linewidth=2))
            colour = "white" if dark else "black"
            ax.text(
                x + 0.5,
                y + 0.36,
                text,
                ha="center",
                va="center",
                fontsize=12,
                fontweight="bold" if measured else "normal",
                color=colour if measured else "#555555",
            )
            if detail:
                ax.text(
                    x + 0.5,
                    y + 0.72,
                    detail,
                    ha="center",
                    va="center",
                    fontsize=7,
                    linespacing=1.3,
                    color=colour if measured else "#555555",
                )
            if measured and row["error"] > CELL_BOUND:
                ax.add_patch(Rectangle((x + 0.03, y + 0.03), 0.94, 0.94, fill=False, edgecolor="black", linewidth=1.5))
    ax.set_xlim(0, len(sizes))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([x + 0.5 for x in range(len(sizes))], [f"{n} servers" for n in sizes])
    ax.set_yticks([y + 0.5 for y in range(len(rows))], [Cell(j, s, d, 0).row_label for j, s, d in rows])
    ax.tick_params(length=0)
    ax.xaxis.tick_top()
    for side in ax.spines.values():
        side.set_visible(False)
    bar = fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, fraction=0.05, pad=0.03, extend="max")
    bar.set_label("prediction error |predicted - measured| / measured (%)")
    for bound, style in ((MEDIAN_TARGET, ":"), (CELL_BOUND, "--")):
        bar.ax.axhline(100 * bound, color="black", linestyle=style, linewidth=1.2)
    summary = (
        f"{len(errors)} cells measured: median {statistics.median(errors):.1%}, worst {max(errors):.1%}"
        if errors
        else "no cell measured yet"
    )
    when = doc.get("updated", "")[:10]
    commits = sorted({r.get("commit") for r in doc["cells"] if r.get("commit")})
    measured_at = "\n".join(textwrap.wrap(f"commits {', '.join(commits)}", 110)) if commits else ""
    ax.set_title(
        "Scale matrix: the predicted iteration against the emulated one (topolab run, default settings)\n"
        f"{summary}; {doc.get('cpus', '?')} cores, {when}" + (f"\n{measured_at}" if measured_at else ""),
        fontsize=10,
        pad=28,
    )
    legend = [
        Line2D([], [], color="black", linestyle=":", label=f"target median {MEDIAN_TARGET:.0%}"),
        Rectangle((0, 0), 1, 1, fill=False, edgecolor="black", linewidth=1.5, label=f"cell over {CELL_BOUND:.0%}"),
        Line2D([], [], color="black", linestyle="--", label=f"bound per cell {CELL_BOUND:.0%}"),
        Patch(facecolor=NOT_RUN_GREY, label="not run"),
        Patch(facecolor=FAILED_GREY, label="failed"),
    ]
    ax.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=5, fontsize=8, frameon=False)
    fig.text(
        0.01,
        0.005,
        "in each cell: the error; measured / predicted; wall seconds per iteration (warm-up included); "
        "the workers' load (share of the cores)",
        fontsize=7,
        color="#555555",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- the command -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--jobs",
        default=",".join(DEFAULT_JOBS),
        help=f"jobs, each 'job' (its scenario's strategy) or 'job:data' / 'job:hybrid'; known: "
        f"{', '.join(JOB_SCENARIOS)}; the matrix: {','.join(MATRIX_JOBS)} (default: %(default)s)",
    )
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="servers (default: %(default)s)")
    ap.add_argument("--degrees", default=",".join(map(str, DEGREES)), help="degrees (default: %(default)s)")
    ap.add_argument("--iterations", type=int, default=ITERATIONS, help="timed iterations per case (after one warm-up)")
    ap.add_argument("--iperf-max-pairs", type=int, default=IPERF_MAX_PAIRS)
    ap.add_argument("--run-dir", help="where the emulator's run lock lives (default: /run/topolab)")
    ap.add_argument(
        "--out", type=Path, default=RESULTS / "scale.json", help="its section 'emulated' (default: %(default)s)"
    )
    ap.add_argument("--matrix-out", type=Path, default=MATRIX_JSON, help="the matrix JSON (default: %(default)s)")
    ap.add_argument("--matrix-only", action="store_true", help="write the matrix JSON and its heat map only, not --out")
    ap.add_argument("--resume", action="store_true", help="skip the cells measured in the matrix JSON already")
    ap.add_argument("--plot-only", action="store_true", help="draw the heat map from the matrix JSON; run nothing")
    ap.add_argument(
        "--table", action="store_true", help="print the matrix JSON as a Markdown table, a line per cell; run nothing"
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        jobs = parse_jobs(args.jobs)
        sizes = parse_ints(args.sizes, "--sizes", 2)
        degrees = parse_ints(args.degrees, "--degrees", 1)
    except ValueError as err:
        print(f"scale_emulated: {err}", file=sys.stderr)
        return 2
    heat_png = args.matrix_out.with_suffix(".png")
    default_matrix = matrix_cells([(j, scenario_strategy(j)) for j in MATRIX_JOBS], SIZES, DEGREES)
    if args.plot_only or args.table:
        if not args.matrix_out.exists():
            print(f"scale_emulated: --matrix-out {args.matrix_out}: no such file", file=sys.stderr)
            return 2
        if args.table:
            print(matrix_table(load_matrix(args.matrix_out), default_matrix))
        if args.plot_only:
            heat_map(load_matrix(args.matrix_out), heat_png, default_matrix)
            print(f"wrote {heat_png}")
        return 0
    if os.geteuid() != 0:
        print("scale_emulated: needs root (emulated network)", file=sys.stderr)
        return 2
    doc = load_matrix(args.matrix_out)
    legacy = json.loads(args.out.read_text()) if args.out.exists() else {}
    prior = prior_seconds(doc, (legacy.get("emulated") or {}).get("rows", []))
    cells = matrix_cells(jobs, sizes, degrees)
    skip = measured_cells(doc) if args.resume else set()
    todo = [c for c in cells if c.key not in skip]
    if len(todo) < len(cells):
        log(f"--resume: {len(cells) - len(todo)} of {len(cells)} cells measured in {args.matrix_out} already")
    done: dict[tuple, float] = {}
    shown = {c.key for c in cells if c.key in skip}  # the table's cells: those measured now or resumed
    failed: set[tuple[str, str, int]] = set()
    interrupted = False
    t_start = time.monotonic()
    for index, cell in enumerate(todo):
        if (cell.job, cell.strategy, cell.degree) in failed:
            log(f"== skipped {cell.row_label}, {cell.servers} servers: a smaller size failed")
            continue
        left = sum(estimate_seconds(c, prior, done) for c in todo[index:])
        log(
            f"== [{index + 1}/{len(todo)}] {cell.row_label}, {cell.servers} servers "
            f"({duration(time.monotonic() - t_start)} so far; ETA ~{duration(left)} for this and the rest)"
        )
        row: dict[str, Any] = {
            "job": cell.job,
            "strategy": cell.strategy,
            "servers": cell.servers,
            "degree": cell.degree,
        }
        row.update(
            iterations=args.iterations,
            command=cell.command(args.iterations, args.iperf_max_pairs, args.matrix_out),
            started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        )
        t_cell = time.monotonic()
        try:
            run_case(cell, args.iterations, args.iperf_max_pairs, args.run_dir, row)
            row["status"] = "measured"
        except KeyboardInterrupt:
            log(f"interrupted: the cells measured so far are in {args.matrix_out}")
            interrupted = True
            break
        except Exception as err:  # a failed cell is a row; the larger sizes of its job and degree are skipped
            row.update(status="failed", failed=f"{type(err).__name__}: {err}", case_s=time.monotonic() - t_cell)
            failed.add((cell.job, cell.strategy, cell.degree))
        done[cell.key] = time.monotonic() - t_cell
        shown.add(cell.key)
        put_cell(doc, row)
        save_matrix(doc, args.matrix_out)
        log(
            f"   {row['status']}: "
            + (
                f"error {fmt(row.get('error'), '.1%')}, {'verified' if row.get('verified') else 'NOT verified'}, "
                f"{fmt(row.get('wall_s_per_iteration'), '.1f')} s per iteration, cell {done[cell.key]:.0f} s"
                if row["status"] == "measured"
                else row["failed"]
            )
        )
    rows = [r for r in doc["cells"] if Cell.of(r).key in shown]
    print_table(rows)
    heat_map(doc, heat_png, default_matrix)
    print(f"wrote {args.matrix_out} and {heat_png}")
    if not args.matrix_only:
        legacy["emulated"] = {"measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpus": os.cpu_count(), "rows": rows}
        args.out.write_text(json.dumps(legacy, indent=1) + "\n")
        plot(rows, args.out.with_name("scale-emulated.png"))
        print(f"wrote {args.out} (section 'emulated') and {args.out.with_name('scale-emulated.png')}")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
