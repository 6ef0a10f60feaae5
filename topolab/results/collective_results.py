"""Results of `topolab collective` and how they are printed: one `SizeResult` per algorithm
and size, gathered in a `CollectiveResults` document (results.json, format
`COLLECTIVE_FORMAT`); one `PhaseResult` per routing of an all-to-all phase, in an
`AlltoallResults` document (format `ALLTOALL_FORMAT`); nccl-tests' all_reduce_perf table
("# Avg bus bandwidth" footer included), our wider table, the all-to-all phase's table
(`format_phase_table`: `topolab collective --routing` prints it, `topolab report` redraws it)
and the time-left estimate of a sweep. Each document's ``from_dict`` checks its format
(`topolab.results.run_results.check_format`: an unknown or newer one is a one-line `UsageError`). Kept
apart from the command (parsing, the emulated measurement) so each stays readable; just under
400 lines, the two documents and the tables of their rows.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from contract.errors import UsageError
from contract.files import write_file

from .run_results import check_format

COLLECTIVE_FORMAT = "topolab.collective/1"
ALLTOALL_FORMAT = "topolab.alltoall/1"
ALLTOALL = "alltoall"  # measured by topolab.collective.routing_phase, alone: it is no AllReduce

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)


class CollectiveInputError(UsageError):
    """Bad command-line value; the message names the option."""


def parse_size(text: str, option: str = "--bytes") -> int:
    """``64M`` -> 67108864 (K, M, G are powers of 1024, as in nccl-tests)."""
    m = _SIZE_RE.match(text)
    if not m:
        raise CollectiveInputError(f"{option} {text!r}: expected a size such as 4096, 256K, 64M or 1G")
    size = int(m.group(1)) * UNITS[m.group(2).upper()]
    if size <= 0 or size % 4:
        raise CollectiveInputError(f"{option} {text!r}: must be a positive multiple of 4 bytes (float32 gradients)")
    return size


def format_size(nbytes: int) -> str:
    for unit in ("G", "M", "K"):
        if nbytes % UNITS[unit] == 0:
            return f"{nbytes // UNITS[unit]}{unit}"
    return str(nbytes)


@dataclass
class SizeResult:
    algorithm: str
    bytes: int
    ranks: int
    times_s: list[float]
    ideal_s: float
    verified: bool
    time_scale: float = 1.0
    mismatches: list[str] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)  # workers' CPU seconds per iteration
    # S / tau, tau the spanning-tree packing's rate (planner.collectives.tree_packing): the bound
    # of any AllReduce on the cables' rates; ``ideal_s`` is the slowest server's egress bound
    packing_bound_s: float | None = None
    schedule: dict[str, Any] = field(default_factory=dict)  # what the forest ran and why
    trace: str | None = None  # --trace: the file of its last timed iteration's timeline

    @property
    def time_s(self) -> float:
        return statistics.median(self.times_s) if self.times_s else float("nan")

    @property
    def algbw(self) -> float:
        """Bytes per second (nccl-tests' algbw)."""
        return self.bytes / self.time_s

    @property
    def busbw(self) -> float:
        return self.algbw * 2 * (self.ranks - 1) / self.ranks

    @property
    def ratio(self) -> float:
        return self.time_s / self.ideal_s

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            size=format_size(self.bytes),
            time_s=self.time_s,
            min_s=min(self.times_s, default=float("nan")),
            max_s=max(self.times_s, default=float("nan")),
            algbw_MBps=self.algbw / 1e6,
            busbw_MBps=self.busbw / 1e6,
            measured_over_ideal=self.ratio,
            time_real_ms=self.time_s / self.time_scale * 1e3,
            # share of the machine's cores the workers used (kernel TCP work included)
            worker_cpu_cores=(statistics.median(self.cpu_s) / self.time_s if self.cpu_s else None),
            ideal_real_ms=self.ideal_s / self.time_scale * 1e3,
            ideal_bound="egress of the slowest server: 2 (n-1) S / (n D_min)",
            measured_over_packing_bound=(self.time_s / self.packing_bound_s if self.packing_bound_s else None),
        )
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SizeResult:
        """A row of ``to_dict`` (its derived figures are recomputed, not read)."""
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


@dataclass
class CollectiveEmulation:
    """The network a collective sweep ran on, and the bound its ideal times use."""

    link_mbps: float
    mtu: int
    time_scale: float
    tcp_max_fraction: float  # goodput / shaped rate at the MTU
    egress_bps: float  # the slowest server's shaped egress
    egress_goodput_bps: float
    netem: bool


@dataclass
class CollectiveResults:
    """results.json of `topolab collective` (AllReduce algorithms and sizes)."""

    scenario: str
    topology: str
    servers: int
    degree: int
    emulation: CollectiveEmulation
    repeat: int
    chunk_bytes: int
    segment_bytes: int | None  # None: chosen per size ("auto" in the JSON)
    elapsed_s: float
    header: str  # the comment lines above the tables
    results: list[SizeResult]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": COLLECTIVE_FORMAT,
            "scenario": self.scenario,
            "topology": self.topology,
            "servers": self.servers,
            "degree": self.degree,
            "emulation": asdict(self.emulation),
            "repeat": self.repeat,
            "chunk_bytes": self.chunk_bytes,
            "segment_bytes": "auto" if self.segment_bytes is None else self.segment_bytes,
            "elapsed_s": self.elapsed_s,
            "header": self.header,
            "results": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "results.json") -> CollectiveResults:
        check_format(d, COLLECTIVE_FORMAT, source)
        segment = d["segment_bytes"]
        return cls(
            scenario=d["scenario"],
            topology=d["topology"],
            servers=int(d["servers"]),
            degree=int(d["degree"]),
            emulation=CollectiveEmulation(**d["emulation"]),
            repeat=int(d["repeat"]),
            chunk_bytes=int(d["chunk_bytes"]),
            segment_bytes=None if segment == "auto" else int(segment),
            elapsed_s=float(d["elapsed_s"]),
            header=d["header"],
            results=[SizeResult.from_dict(r) for r in d["results"]],
        )


@dataclass
class PhaseResult:
    """One routing variant of an all-to-all phase: predicted, LP bound and measured
    (emulated seconds)."""

    variant: str
    predicted_s: float
    bound_s: float  # the LP's phase time at TCP goodput (single: the best fixed-path rates)
    times_s: list[float] = field(default_factory=list)
    verified: bool = True
    errors: list[str] = field(default_factory=list)
    pairs_split: int = 0
    planes: int = 0

    @property
    def median_s(self) -> float:
        ordered = sorted(self.times_s)
        return ordered[len(ordered) // 2] if ordered else math.nan

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), median_s=self.median_s)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PhaseResult:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


@dataclass
class AlltoallResults:
    """results.json of `topolab collective --algorithm alltoall`: one phase, its routings."""

    scenario: str
    pairs: int
    bytes: int  # the phase's bytes as the workers move them (every pair, whole items)
    factor: float  # what the workload's phase was multiplied by
    link_mbps: float
    time_scale: float
    results: list[PhaseResult]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": ALLTOALL_FORMAT,
            "scenario": self.scenario,
            "algorithm": ALLTOALL,
            "pairs": self.pairs,
            "bytes": self.bytes,
            "factor": self.factor,
            "link_mbps": self.link_mbps,
            "time_scale": self.time_scale,
            "results": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "results.json") -> AlltoallResults:
        check_format(d, ALLTOALL_FORMAT, source)
        return cls(
            scenario=d["scenario"],
            pairs=int(d["pairs"]),
            bytes=int(d["bytes"]),
            factor=float(d["factor"]),
            link_mbps=float(d["link_mbps"]),
            time_scale=float(d["time_scale"]),
            results=[PhaseResult.from_dict(r) for r in d["results"]],
        )


class SweepEstimate:
    """Time left of a sweep: the seconds spent so far per byte moved times the bytes still
    to move (an iteration's time grows with its size). ``clock`` gives seconds (default:
    `time.perf_counter`)."""

    def __init__(
        self, sizes: Sequence[int], iterations_per_size: int, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.remaining_bytes = sum(sizes) * iterations_per_size
        self.remaining_steps = len(sizes) * iterations_per_size
        self.total_steps = self.remaining_steps
        self.done_bytes = 0
        self.clock = clock
        self.t0 = clock()

    def step(self, nbytes: int) -> None:
        self.remaining_bytes -= nbytes
        self.remaining_steps -= 1
        self.done_bytes += nbytes

    def seconds_left(self) -> float:
        elapsed = self.clock() - self.t0
        if not self.done_bytes:
            return float("nan")
        return elapsed / self.done_bytes * self.remaining_bytes

    def line(self) -> str:
        done = self.total_steps - self.remaining_steps
        left = self.seconds_left()
        return (
            f"{done}/{self.total_steps} done, about {left:.0f} s left" if left == left else f"{done}/{self.total_steps}"
        )


# nccl-tests' table (all_reduce_perf), one block per algorithm. Times and bandwidths are the
# real cluster's: emulated time / time scale; GB/s = 1e9 bytes/s as nccl-tests prints them.
NCCL_HEAD = (
    "#\n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
)
FLOAT32_BYTES = 4


def format_nccl_tests(results: Sequence[SizeResult]) -> str:
    """The rows and the "# Avg bus bandwidth" footer nccl-tests prints, per algorithm.
    Columns: size, count, type, redop, root (-1: no root), time (us), algbw and busbw (GB/s),
    #wrong (ranks' mismatching values; 0 when every worker verified)."""
    blocks = []
    for alg in dict.fromkeys(r.algorithm for r in results):
        rows = [r for r in results if r.algorithm == alg]
        lines = [f"# algorithm: {alg} (in place; one timed figure per size)", NCCL_HEAD]
        for r in rows:
            real_s = r.time_s / r.time_scale
            algbw = r.bytes / real_s / 1e9
            busbw = algbw * 2 * (r.ranks - 1) / r.ranks
            wrong = 0 if r.verified else max(1, len(r.mismatches))
            lines.append(
                f"{r.bytes:12d}  {r.bytes // FLOAT32_BYTES:12d}  {'float':>8}  {'sum':>6}  {-1:6d}"
                f"  {real_s * 1e6:7.1f}  {algbw:6.2f}  {busbw:6.2f}  {wrong:5d}"
            )
        avg = statistics.mean(r.busbw * r.time_scale / 1e9 for r in rows)
        wrong_total = sum(0 if r.verified else max(1, len(r.mismatches)) for r in rows)
        lines += [
            f"# Out of bounds values : {wrong_total} {'OK' if not wrong_total else 'FAILED'}",
            f"# Avg bus bandwidth    : {avg:g} ",
            "#",
        ]
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def format_table(results: Sequence[SizeResult]) -> str:
    width = max([9, *(len(r.algorithm) for r in results)])  # msccl:FILE names are long
    head = (
        f"{'algorithm':<{width}} {'size':>6} {'time(ms)':>10} {'algbw(MB/s)':>12} "
        f"{'busbw(MB/s)':>12} {'ideal(ms)':>10} {'meas/ideal':>10} {'real(ms)':>9} "
        f"{'verified':>8} {'cpu':>5}"
    )
    lines = [head]
    for r in results:
        lines.append(
            f"{r.algorithm:<{width}} {format_size(r.bytes):>6} {r.time_s * 1e3:>10.1f} "
            f"{r.algbw / 1e6:>12.2f} {r.busbw / 1e6:>12.2f} {r.ideal_s * 1e3:>10.1f} "
            f"{r.ratio:>10.3f} {r.time_s / r.time_scale * 1e3:>9.3f} "
            f"{'yes' if r.verified else 'NO':>8} "
            f"{(statistics.median(r.cpu_s) / r.time_s) if r.cpu_s else float('nan'):>5.2f}"
        )
    return "\n".join(lines)


def format_phase_table(results: Sequence[PhaseResult], title: str) -> str:
    """The all-to-all phase's table: a row per routing variant, its bound, prediction and
    measurement, and its speed-up over single-path routing."""
    base = next((r.median_s for r in results if r.variant == "single"), math.nan)
    lines = [
        title,
        f"{'variant':<10} {'planes':>6} {'split':>5} {'LP s':>7} {'pred s':>7} {'meas s':>7} "
        f"{'meas/pred':>9} {'meas/LP':>7} {'speed-up':>8}  verified",
    ]
    for r in results:
        lines.append(
            f"{r.variant:<10} {r.planes:>6} {r.pairs_split:>5} {r.bound_s:>7.3f} {r.predicted_s:>7.3f} "
            f"{r.median_s:>7.3f} {r.median_s / r.predicted_s:>9.3f} {r.median_s / r.bound_s:>7.3f} "
            f"{base / r.median_s:>7.2f}x  {'yes' if r.verified else 'NO'}"
        )
    return "\n".join(lines)


def plot_busbw(results: Sequence[SizeResult], title: str, path: Path) -> Path:
    """busbw (the planned cluster's GB/s) against the buffer size, one line per algorithm."""
    from .run_report import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.8, 4.0))
    for alg in dict.fromkeys(r.algorithm for r in results):
        rows = sorted((r for r in results if r.algorithm == alg), key=lambda r: r.bytes)
        ax.plot([r.bytes for r in rows], [r.busbw * r.time_scale / 1e9 for r in rows], "o-", label=alg)
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("buffer (bytes)")
    ax.set_ylabel("busbw (GB/s, planned cluster)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)


def write_collective_report(folder: Path, doc: CollectiveResults) -> Path:
    """nccl-tests.txt, table.txt, busbw.png and report.md of a `topolab collective` folder."""
    nccl = doc.header + "\n" + format_nccl_tests(doc.results)
    table = doc.header + "\n" + format_table(doc.results)
    write_file(folder / "nccl-tests.txt", nccl + "\n")
    write_file(folder / "table.txt", table + "\n")
    plot_busbw(doc.results, f"{doc.scenario}: AllReduce bus bandwidth", folder / "busbw.png")
    report = folder / "report.md"
    verified = all(r.verified for r in doc.results)
    write_file(
        report,
        f"# {doc.scenario}: AllReduce on the emulated network\n\n"
        f"Verification: **{'passed' if verified else 'FAILED'}**\n\n"
        f"```\n{nccl}\n```\n\n```\n{table}\n```\n\n![busbw](busbw.png)\n",
    )
    return report
