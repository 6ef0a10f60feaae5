"""The command line itself: lazy imports, --version, one-line errors with their exit codes,
and `topolab report` of a folder a killed run left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from contract.errors import RunError, UsageError
from tests.fixtures.sample_results import smoke_results
from topolab import __version__
from topolab.cli import COMMANDS, main
from topolab.plan import plan_command as plan_cmd
from topolab.results.journal import write_results_file
from topolab.results.run_results import Iteration, recover

REPO = Path(__file__).resolve().parents[2]


def _modules_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_help_loads_no_subcommand_and_lists_them_all():
    loaded = _modules_after("from topolab.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass")
    assert not {"planner", "emulator", "workers", "numpy", "matplotlib"} & loaded
    assert not {module for module, _ in COMMANDS.values()} & loaded
    out = subprocess.run([sys.executable, "-m", "topolab", "--help"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0 and all(name in out.stdout for name in COMMANDS)


def test_plan_loads_neither_the_emulator_nor_matplotlib():
    loaded = _modules_after("from topolab.cli import main\nmain(['plan', 'scenarios/topoopt-12.toml'])")
    assert "planner" in loaded
    assert not {"emulator", "workers", "matplotlib", "topolab.run.command", "topolab.sweep.command"} & loaded


def test_version():
    out = subprocess.run([sys.executable, "-m", "topolab", "--version"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == f"topolab {__version__}"


@pytest.mark.parametrize(
    "error,code,fragment",
    [
        (UsageError("--flag: bad"), 2, "--flag: bad"),
        (RunError("rank 3 died"), 1, "rank 3 died"),
        (OSError(28, "No space left on device", "/tmp/x"), 1, "No space left on device: /tmp/x"),
        (RecursionError("maximum recursion depth exceeded"), 1, "nested too deeply"),
        (MemoryError(), 1, "out of memory"),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), 1, "not UTF-8"),
        (KeyboardInterrupt(), 130, "interrupted"),
        (RunError("two\nlines"), 1, "two lines"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_errors_are_one_line_with_their_exit_code(monkeypatch, capsys, error, code, fragment):
    """Faults a test cannot cause for real (memory, a full disk) are raised by the subcommand."""

    def fail(args):
        raise error

    monkeypatch.setattr(plan_cmd, "run_plan", fail)
    assert main(["plan", "scenarios/topoopt-12.toml"]) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("topolab: ") and fragment in err, err


def test_an_unexpected_bug_still_shows_its_traceback(monkeypatch):
    def fail(args):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(plan_cmd, "run_plan", fail)
    with pytest.raises(ZeroDivisionError):
        main(["plan", "scenarios/topoopt-12.toml"])


def test_recover_marks_a_killed_run_incomplete():
    results = smoke_results("running", [], predicted_ms=2.0)
    journal = smoke_results("running", [2.0, 2.4, 2.8], predicted_ms=2.0).iterations
    out = recover(results, journal)
    assert out.status == "incomplete" and out.error and "3 iteration(s)" in out.error
    summary = out.summarize()
    assert summary.iterations == 3 and summary.median_real_ms == pytest.approx(2.4)
    finished = recover(smoke_results("complete", [2.0, 2.4, 2.8], predicted_ms=2.0), journal)
    assert finished.status == "complete" and "error" not in finished.to_dict()


def test_report_renders_a_results_folder(tmp_path, capsys):
    write_results_file(smoke_results("running", [], predicted_ms=2.0), tmp_path)
    lines = [
        Iteration(index=i, warmup=False, measured_s=0.5, measured_real_ms=2.0, compute_real_ms=1.0, verified=True)
        for i in range(2)
    ]
    (tmp_path / "iterations.jsonl").write_text(
        "".join(json.dumps(x.to_dict()) + "\n" for x in lines) + '{"index": 2, "meas'
    )
    assert main(["report", str(tmp_path)]) == 0
    assert "incomplete, 2 iterations" in capsys.readouterr().out
    text = (tmp_path / "report.md").read_text()
    assert "Status: **incomplete**" in text and text.count("| yes |") == 2
    assert (tmp_path / "iterations.png").stat().st_size > 1000


@pytest.mark.parametrize(
    "scenario, rate",
    [("hierarchical-12", "100 Gbps per server shared by its dimensions"), ("topoopt-12", "25 Gbps per link")],
)
def test_plan_summary_names_what_the_rate_is_per(scenario: str, rate: str) -> None:
    # a hierarchical server splits one budget over its dimensions (its cables run at 9.1 and
    # 27.3 Gbps here): its rate is per server, not per link
    from planner import build_plan, load_scenario

    first = plan_cmd.describe(build_plan(load_scenario(REPO / "scenarios" / f"{scenario}.toml"))).splitlines()[0]
    assert rate in first, first


def test_compare_of_a_hierarchical_scenario_keeps_the_budget_per_server() -> None:
    # the other topologies get [cluster] degree links sharing the hierarchical budget
    from planner import build_plan, load_scenario
    from topolab.common.plan_text import bandwidth_of
    from topolab.results.comparison import scenario_for

    base = load_scenario(REPO / "scenarios" / "hierarchical-12.toml")
    assert (base.topology.budget_gbps, base.emulation.budget_mbps, base.cluster.degree) == (100, 400, 4)
    for kind, bandwidth in (("topoopt", "4 x 25 Gbps"), ("switch", "1 x 100 Gbps"), ("ring", "4 x 25 Gbps")):
        s = scenario_for(base, kind)
        assert s.topology.kind == kind and s.topology.dims == () and s.emulation.budget_mbps == 0
        assert s.emulation.link_mbps == 100  # 400 Mbit/s per server over 4 links: same time scale
        assert bandwidth_of(build_plan(s).to_dict()) == bandwidth
    same = scenario_for(base, "hierarchical")
    assert same == base
    assert bandwidth_of(build_plan(same).to_dict()) == "100 Gbps over dims 4 x 3"


def test_plan_summary_lists_model_parallel_cables_and_allocates_only_when_asked(tmp_path) -> None:
    from planner import build_plan, load_scenario
    from planner.scenario import with_overrides

    path = tmp_path / "bert-16.toml"
    path.write_text(
        '[cluster]\nservers = 16\ndegree = 4\n[workload]\nmodel = "bert"\n[parallelism]\nstrategy = "hybrid"\nmp_degree = 4\n'
    )
    s = load_scenario(path)
    plan = build_plan(s)
    cables = plan_cmd.mp_cables(plan)
    assert len(cables) == 16 * plan.extra["d_mp"] // 2  # every model-parallel port is one cable end
    flows = {(min(f.src, f.dst), max(f.src, f.dst)) for f in plan.demand.mp}
    assert sum(carried > 0 for _, _, carried in cables) == len({(min(a, b), max(a, b)) for a, b, _ in cables} & flows)
    text = plan_cmd.describe(plan)
    assert f"model-parallel  16 of {len(plan.links)} cables" in text
    assert plan_cmd.bandwidth_phases(plan) == []  # routing = "single": no allocation lines
    planned = with_overrides(s, topology={"routing": "planned"})
    assert plan_cmd.bandwidth_phases(build_plan(planned))


@pytest.mark.parametrize("scenario, remarks", [("topoopt-12", 0), ("resnet50-128", 2)])
def test_plan_summary_remarks_on_a_large_diameter_and_a_low_bisection(scenario: str, remarks: int) -> None:
    from planner import build_plan, load_scenario

    plan = build_plan(load_scenario(REPO / "scenarios" / f"{scenario}.toml"))
    lines = plan_cmd.remarks(plan)
    assert len(lines) == remarks
    if remarks:
        assert f"diameter {plan.summary.diameter}:" in lines[0] and "bisection" in lines[1]
        assert plan.summary.diameter >= plan_cmd.LARGE_DIAMETER


@pytest.mark.parametrize("machines", ["0", "13", "-1"])
def test_plan_partition_out_of_range_is_refused_before_any_planning(capsys, machines: str) -> None:
    assert main(["plan", "scenarios/topoopt-12.toml", "--partition", machines]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # nothing planned, nothing printed
    assert err == f"topolab: --partition must be between 1 and 12 (the scenario's servers), not {machines}\n"


def test_plan_summary_says_the_degree_split_in_interfaces_and_the_iteration() -> None:
    from planner import build_plan, load_scenario

    plan = build_plan(load_scenario(REPO / "scenarios" / "topoopt-12.toml"))
    text = plan_cmd.describe(plan)
    assert plan.extra["d_mp"] == 0 and plan.demand.mp_bytes > 0  # DLRM's tables send, over the ring cables
    assert (
        "degree split    4 of 4 interfaces per server for AllReduce rings, 0 for model-parallel matchings "
        "(the model-parallel traffic below crosses the ring cables)"
    ) in text
    assert "model-parallel interfaces" not in text
    iteration = [line for line in text.splitlines() if line.startswith("iteration")]
    assert iteration == [
        "iteration       one training step on a global batch of 1,536 samples (128 per server on 12 servers); "
        "times are the real cluster's, in ms"
    ]
