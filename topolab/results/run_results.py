"""The results of `topolab run` as types: what results.json and iterations.jsonl hold.

`RunResults` is the document (format `RESULTS_FORMAT`); its parts are `Iteration` (one line
of iterations.jsonl), `EmulationFacts` (the network that was built), `Prediction` (the
flow-level model of the iteration's schedule), `Calibration` (the workers' measured cost per
op), `ScheduleSummary`, `Environment` (what reproduces the run), `Measured` (the cables' tx
counters), `TraceFacts` (the timeline a run with ``--trace`` wrote) and the derived `Summary`
and `FaultPhase` rows. Each has ``to_dict()`` and
``from_dict()``: the JSON layout is theirs alone. Byte counts are integers.

`check_format` is the check every reader of a topolab document makes (an unknown or newer
format is a `UsageError` naming the file and the format, exit 2); `topolab.results.journal` reads and
writes the results folder. The layout is described in docs/schedules.md ("Results documents").

Over 300 lines: one small dataclass per part of the document, each with its JSON both ways.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from contract.errors import UsageError

RESULTS_FORMAT = "topolab.results/1"
MAX_RESULTS_BYTES = 256 << 20
"""Largest results document read (results.json, iterations.jsonl, a rank's log): a run of
100,000 iterations at 128 servers writes about 60 MB."""
Status = Literal["running", "complete", "interrupted", "failed", "incomplete"]
LINK_BYTES_NOTE = "wire bytes (payload and headers) per timed iteration, from tx counters"


def check_format(doc: Mapping[str, Any], current: str, source: str) -> None:
    """``doc["format"]`` is ``current`` or an older version of it; else a one-line
    `UsageError` naming ``source`` and the format (formats are ``name/version``)."""
    fmt = doc.get("format")
    name, _, version = current.rpartition("/")
    if isinstance(fmt, str):
        got_name, _, got_version = fmt.rpartition("/")
        if got_name == name and got_version.isdigit():
            if int(got_version) <= int(version):
                return
            raise UsageError(f"{source}: format {fmt!r} is newer than this topolab reads ({current}); update topolab")
    raise UsageError(f"{source}: format {fmt!r} is not one this topolab reads ({current})")


def _known(cls: type, d: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``d`` that are fields of dataclass ``cls``."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


def _without_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


@dataclass
class LinkBytes:
    """Bytes one directed link carries per iteration (``src`` -> ``dst``, node indices)."""

    src: int
    dst: int
    bytes: int

    def to_dict(self) -> dict[str, int]:
        return {"src": self.src, "dst": self.dst, "bytes": self.bytes}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LinkBytes:
        return cls(int(d["src"]), int(d["dst"]), round(d["bytes"]))


def link_rows(rows: Iterable[Mapping[str, Any]]) -> list[LinkBytes]:
    """``{"src", "dst", "bytes"}`` rows (the predictor's, the counters') as `LinkBytes`,
    bytes rounded to whole bytes."""
    return [LinkBytes.from_dict(row) for row in rows]


@dataclass
class Iteration:
    """One measured iteration, as iterations.jsonl and results.json record it."""

    index: int  # timed iterations from 0; a failed warm-up keeps its negative index
    warmup: bool
    measured_s: float  # emulated seconds
    measured_real_ms: float
    compute_real_ms: float  # the busiest rank's compute
    verified: bool
    errors: list[str] = field(default_factory=list)
    # a run with faults: the prediction of the routes the iteration ran on, and how many
    # faults preceded it
    predicted_real_ms: float | None = None
    faults_before: int | None = None
    worker_cpu_s: float | None = None  # the workers' CPU seconds (user + system, all ranks)
    # when each phase ended, emulated seconds from the iteration's start
    # (topolab.common.phases.measured_phase_ends; None: the workers reported no streams)
    phase_end_s: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return _without_none(asdict(self))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Iteration:
        return cls(**_known(cls, d))


CPU_BOUND_LOAD = 0.85
"""A run whose workers kept this share of the machine's cores busy was CPU-bound: it measured
the processor more than the cables (`Summary.cpu_bound`)."""

BUILT_FACTS = ("time_scale", "link_mbps", "mtu")
"""What the network that was built decides over the scenario (`EmulationFacts.add_network`)."""


@dataclass
class EmulationFacts:
    """The emulated network: the rate and time scale the run used, and once it is up, what
    the network reports of itself (``network``: the emulator's facts, flat in the JSON)."""

    time_scale: float  # real link rate / emulated link rate
    link_mbps: float
    plan_link_gbps: float
    mtu: int
    payload_scale: float
    netem: bool | None = None  # None until the network is up
    teardown_s: float | None = None
    dilation: dict[str, Any] | None = None  # the rate's choice (topolab.run.time_dilation.Dilation)
    network: dict[str, Any] = field(default_factory=dict)

    def add_network(self, facts: Mapping[str, Any], netem: bool) -> None:
        """The built network's facts: its time scale, link rate and MTU replace what the run
        planned (a network over several machines runs at its tunnels' MTU), the others are added."""
        for key in BUILT_FACTS:
            if key in facts:
                setattr(self, key, facts[key])
        own = {f.name for f in fields(self)}
        self.network.update({k: v for k, v in facts.items() if k not in own})
        self.netem = netem

    def to_dict(self) -> dict[str, Any]:
        d = _without_none({f.name: getattr(self, f.name) for f in fields(self) if f.name != "network"})
        return {**d, **self.network}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EmulationFacts:
        own = _known(cls, d)
        own.pop("network", None)
        return cls(**own, network={k: v for k, v in d.items() if k not in own})


@dataclass
class Prediction:
    """The flow-level model's time for the iteration's schedule on the emulated links."""

    emulated_s: float
    real_ms: float
    alpha_s: float  # per-hop latency the model charged
    op_overhead_s: float  # the workers' cost per op (0 before calibration)
    model_seconds: float  # how long the model took
    time_scale: float | None = None  # the network's it predicts (the built network's once it is up)
    mtu: int | None = None  # its cables' MTU (over several machines: the tunnels')
    link_bytes: list[LinkBytes] = field(default_factory=list)
    relayed_link_bytes: list[LinkBytes] = field(default_factory=list)  # of those, relayed by another server
    phase_end_s: dict[str, float] = field(
        default_factory=dict
    )  # when each phase ends (topolab.common.phases.phase_ends)
    cores: int | None = None  # the processors the model's ranks share (None: one each)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["link_bytes"] = [row.to_dict() for row in self.link_bytes]
        d["relayed_link_bytes"] = [row.to_dict() for row in self.relayed_link_bytes]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Prediction:
        own = _known(cls, d)
        own["link_bytes"] = link_rows(d.get("link_bytes", []))
        own["relayed_link_bytes"] = link_rows(d.get("relayed_link_bytes", []))
        return cls(**own)


@dataclass
class Calibration:
    """The workers' software cost per op, from the zero-payload twin (topolab.common.calibrate)."""

    op_overhead_s: float
    twin_seconds: float  # the twin's measured iteration
    critical_ops: float  # K: ops on the twin's critical path
    twin_ops: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Calibration:
        return cls(**_known(cls, d))


@dataclass
class AppliedFault:
    """One fault as the run applied it (topolab.run.faults): the cable, what happened to it, before
    which timed iteration, how long applying it took and the prediction made after it."""

    iteration: int
    cable: str  # its name, "h3-h4"
    cable_index: int
    action: str  # "down" | "degrade"
    factor: float
    reroute: bool
    applied_s: float
    predicted_real_ms: float
    predicted_emulated_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AppliedFault:
        return cls(**_known(cls, d))


@dataclass
class ScheduleSummary:
    """What the iteration's schedule is: its ops, buckets and the AllReduce each group ran."""

    ops: int
    streams_per_rank: int
    allreduce_buckets: int
    payload_scale: float
    bytes_sent_per_rank: list[int]
    # group size -> {"algorithm", "why"}: the schedule's params["allreduce"]
    allreduce: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, schedule: Any, payload_scale: float) -> ScheduleSummary:
        """The summary of a `contract.schedule.Schedule`."""
        return cls(
            ops=schedule.op_count(),
            streams_per_rank=len(schedule.programs[0]),
            allreduce_buckets=schedule.params.get("buckets", 0),
            payload_scale=payload_scale,
            bytes_sent_per_rank=[int(n) for n in schedule.bytes_sent()],
            allreduce=dict(schedule.params.get("allreduce", {})),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ScheduleSummary:
        return cls(**_known(cls, d))


@dataclass
class Environment:
    """What a reader needs to reproduce the run: the code's commit, the kernel, the CPUs,
    and a hash of the scenario file as it was read."""

    topolab: str
    commit: str
    kernel: str
    cpus: int | None
    python: str
    scenario_sha256: str

    @classmethod
    def capture(cls, scenario_source: str | Path) -> Environment:
        """This machine and checkout, and the scenario file's hash ('' when unreadable)."""
        import hashlib
        import os
        import platform
        import subprocess

        from topolab import __version__

        repo = Path(__file__).resolve().parents[2]
        try:
            commit = subprocess.run(
                ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
            ).stdout.strip()
            dirty = subprocess.run(
                ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=5,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            commit, dirty = "", ""
        try:
            scenario_sha256 = hashlib.sha256(Path(scenario_source).read_bytes()).hexdigest()
        except OSError:
            scenario_sha256 = ""
        return cls(
            topolab=__version__,
            commit=(commit + ("+changes" if dirty else "")) or "unknown (not a git checkout)",
            kernel=platform.release(),
            cpus=os.cpu_count(),
            python=platform.python_version(),
            scenario_sha256=scenario_sha256,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Environment:
        return cls(**_known(cls, d))


@dataclass
class Measured:
    """What the cables' tx counters saw per timed iteration."""

    link_bytes: list[LinkBytes]
    link_bytes_note: str = LINK_BYTES_NOTE

    def to_dict(self) -> dict[str, Any]:
        return {"link_bytes": [row.to_dict() for row in self.link_bytes], "link_bytes_note": self.link_bytes_note}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Measured:
        return cls(link_rows(d.get("link_bytes", [])), d.get("link_bytes_note", LINK_BYTES_NOTE))


TRACE_FILE = "trace.json"  # the timeline `topolab run --trace` writes in the results folder


@dataclass
class TraceFacts:
    """The timeline of one timed iteration a run with ``--trace`` wrote (topolab.results.trace_events):
    its file in the results folder, which timed iteration it is, the ranks it shows of all,
    how the ranks' clocks were put on the driver's and the largest offset applied."""

    file: str
    iteration: int  # index among the timed iterations (the last one)
    ranks: int
    ranks_shown: int
    clocks: str
    clock_max_applied_us: float = 0.0
    clock_max_rtt_us: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TraceFacts:
        return cls(**_known(cls, d))


@dataclass
class Summary:
    """Median measured time, prediction error and verification over the recorded iterations."""

    iterations: int
    verified: bool
    median_measured_s: float | None = None
    median_real_ms: float | None = None
    error: float | None = None  # |predicted - measured| / measured
    tolerance: float | None = None
    error_over_tolerance: bool | None = None
    cpu_load: float | None = None  # median share of the machine's cores the workers kept busy
    cpu_bound: bool | None = None  # cpu_load above CPU_BOUND_LOAD

    def to_dict(self) -> dict[str, Any]:
        return _without_none(asdict(self))


@dataclass
class FaultPhase:
    """The timed iterations between two faults: median measured and predicted time, and
    their slowdown against the first phase."""

    faults_before: int
    iterations: list[int]
    measured_real_ms: float
    predicted_real_ms: float | None
    measured_slowdown: float | None = None
    predicted_slowdown: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.measured_slowdown is None:  # the first phase has no slowdown
            del d["measured_slowdown"], d["predicted_slowdown"]
        return d


def fault_phases(iterations: Sequence[Iteration]) -> list[FaultPhase]:
    """Per phase (timed iterations between faults): median measured and predicted time."""
    out = []
    for k in sorted({it.faults_before or 0 for it in iterations}):
        its = [it for it in iterations if (it.faults_before or 0) == k and not it.warmup]
        if its:
            out.append(
                FaultPhase(
                    faults_before=k,
                    iterations=[it.index for it in its],
                    measured_real_ms=statistics.median(it.measured_real_ms for it in its),
                    predicted_real_ms=its[0].predicted_real_ms,
                )
            )
    first = out[0] if out else None
    if len(out) > 1 and first is not None and first.predicted_real_ms:
        for ph in out[1:]:
            ph.measured_slowdown = ph.measured_real_ms / first.measured_real_ms
            if ph.predicted_real_ms is not None:
                ph.predicted_slowdown = ph.predicted_real_ms / first.predicted_real_ms
    return out


def relative_error(measured: float, predicted: float) -> float:
    """A prediction's error: |predicted - measured| / measured (a run's, an arm's, a
    collective's)."""
    return abs(predicted - measured) / measured


def default_tolerance() -> float:
    """A run's tolerance when its results predate recording one: the scenario default."""
    from planner.scenario import Run

    return Run().tolerance


WORKER_COST_NOTABLE = 0.25
"""A run whose workers' cost is this share of its iteration or more says so beside its verdict."""


@dataclass
class RunResults:
    """results.json of `topolab run`."""

    scenario: dict[str, Any]  # the scenario as read (dataclasses.asdict of planner.Scenario)
    plan: dict[str, Any]  # topolab.common.prediction.plan_dict: the plan without its routes table
    emulation: EmulationFacts
    schedule: ScheduleSummary
    environment: Environment
    tolerance: float  # the scenario's run.tolerance
    started: str  # ISO 8601 local time
    status: Status = "running"
    notes: list[str] = field(default_factory=list)
    iterations: list[Iteration] = field(default_factory=list)
    predicted: Prediction | None = None
    calibration: Calibration | None = None
    measured: Measured | None = None
    # a run with faults: what was applied, when, and the new prediction (topolab.run.faults)
    faults: list[AppliedFault] | None = None
    error: str | None = None
    trace: TraceFacts | None = None  # a run with --trace: the timeline it wrote

    def summarize(self) -> Summary:
        its = self.iterations
        out = Summary(iterations=len(its), verified=bool(its) and all(it.verified for it in its))
        if its:
            med = statistics.median(it.measured_s for it in its)
            out.median_measured_s = med
            out.median_real_ms = med / self.emulation.time_scale * 1e3
            if self.predicted is not None:
                out.error = relative_error(med, self.predicted.emulated_s)
                out.tolerance = self.tolerance
                out.error_over_tolerance = out.error > self.tolerance
            loads = [it.worker_cpu_s / it.measured_s for it in its if it.worker_cpu_s is not None and it.measured_s > 0]
            if loads and self.environment.cpus:
                out.cpu_load = statistics.median(loads) / self.environment.cpus
                out.cpu_bound = out.cpu_load > CPU_BOUND_LOAD
        return out

    def worker_cost_share(self) -> float | None:
        """The share of the measured iteration that the workers' own cost per op accounts for
        (the calibrated cost per op x the ops on the twin's critical path, over the median
        measured iteration); None before calibration or iterations. Above
        `WORKER_COST_NOTABLE`, a verdict on the topology is partly one on the emulator."""
        med = self.summarize().median_measured_s
        if self.calibration is None or not med:
            return None
        return self.calibration.op_overhead_s * self.calibration.critical_ops / med

    def cpu_bound_note(self) -> str | None:
        """One line when the run was CPU-bound (`CPU_BOUND_LOAD`), else None."""
        summ = self.summarize()
        if not summ.cpu_bound or summ.cpu_load is None:
            return None
        rate = self.emulation.link_mbps
        return (
            f"CPU-bound: the workers kept {summ.cpu_load:.0%} of the {self.environment.cpus} cores busy at "
            f"{rate:g} Mbit/s per cable, so the time measured is this machine's more than the cables' "
            f'(emulation.link_mbps = "auto" picks a rate the cores keep up with)'
        )

    def fault_phases(self) -> list[FaultPhase]:
        return fault_phases(self.iterations) if self.faults is not None else []

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "format": RESULTS_FORMAT,
            "status": self.status,
            "scenario": self.scenario,
            "plan": self.plan,
            "emulation": self.emulation.to_dict(),
            "iterations": [it.to_dict() for it in self.iterations],
            "notes": list(self.notes),
            "schedule": self.schedule.to_dict(),
            "started": self.started,
            "environment": self.environment.to_dict(),
            "tolerance": self.tolerance,
        }
        if self.predicted is not None:
            d["predicted"] = self.predicted.to_dict()
        if self.calibration is not None:
            d["calibration"] = self.calibration.to_dict()
        if self.faults is not None:
            d["faults"] = [f.to_dict() for f in self.faults]
            d["fault_phases"] = [ph.to_dict() for ph in self.fault_phases()]
        if self.measured is not None:
            d["measured"] = self.measured.to_dict()
        if self.error is not None:
            d["error"] = self.error
        if self.trace is not None:
            d["trace"] = self.trace.to_dict()
        d["summary"] = self.summarize().to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunResults:
        """The results of ``d`` (its format checked by `read_results`; the summary and fault
        phases are recomputed from the iterations)."""
        return cls(
            scenario=dict(d["scenario"]),
            plan=dict(d["plan"]),
            emulation=EmulationFacts.from_dict(d["emulation"]),
            schedule=ScheduleSummary.from_dict(d["schedule"]),
            environment=Environment.from_dict(d["environment"]),
            tolerance=float(d["tolerance"]) if "tolerance" in d else default_tolerance(),
            started=str(d["started"]),
            status=d["status"],
            notes=list(d.get("notes", [])),
            iterations=[Iteration.from_dict(it) for it in d.get("iterations", [])],
            predicted=Prediction.from_dict(d["predicted"]) if d.get("predicted") else None,
            calibration=Calibration.from_dict(d["calibration"]) if d.get("calibration") else None,
            measured=Measured.from_dict(d["measured"]) if d.get("measured") else None,
            faults=[AppliedFault.from_dict(f) for f in d["faults"]] if d.get("faults") is not None else None,
            error=d.get("error"),
            trace=TraceFacts.from_dict(d["trace"]) if d.get("trace") else None,
        )


def recover(results: RunResults, journal: Sequence[Iteration]) -> RunResults:
    """``results`` with the iterations of its journal; a run that never finished is marked
    incomplete (its process was killed before it could write its status)."""
    if len(journal) > len(results.iterations):
        results = replace(results, iterations=list(journal))
    if results.status == "running":
        results = replace(
            results,
            status="incomplete",
            error=f"the run stopped without finishing (killed?); {len(results.iterations)} iteration(s) were on disk",
        )
    return results
