"""One way to get a network for a command (topolab/common/network.py): the shared ``--machines``,
``--run-dir`` and ``--wait`` of every command that builds one, the config they make, the
commands that refuse several machines in one line before anything is built, and the one time
axis of `topolab compare`. No network is built here (and no ssh: the refusals come first)."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from contract.physics import time_scale
from planner import build_plan, load_scenario
from topolab.cli import build_parser, main
from topolab.common.network import NetworkFlags, network_config
from topolab.results.comparison import scenario_for, time_axis

REPO = Path(__file__).resolve().parents[2]
NETWORK_COMMANDS = ("run", "compare", "collective", "verify", "shell", "place", "alloc", "train")
NETWORK_FLAGS = ("--machines", "--run-dir", "--wait")
UNREACHABLE = "192.0.2.9,192.0.2.10"  # TEST-NET-1: a command that tried ssh would hang, then fail otherwise


def _flag(command: str, flag: str):
    parser = build_parser([command])
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return next(a for a in sub._actions if flag in a.option_strings)


@pytest.mark.parametrize("flag", NETWORK_FLAGS)
def test_every_network_command_has_the_same_flag(flag: str) -> None:
    actions = {command: _flag(command, flag) for command in NETWORK_COMMANDS}
    run = actions["run"]
    for command, action in actions.items():
        assert (action.metavar, action.default, action.type is None) == (run.metavar, run.default, run.type is None)
        # the same help, after "with --run: " where the network is optional
        assert action.help.endswith(run.help), (command, action.help)
    if flag != "--wait":
        return
    wait = run.type
    assert wait("0") == 0.0 and wait("86400") == 86400.0  # a day at most, as before
    for bad in ("-1", "nan", "86401"):
        with pytest.raises(Exception, match="must be a finite number"):
            wait(bad)


def test_plan_has_a_partition_count_not_machines() -> None:
    with pytest.raises(StopIteration):
        _flag("plan", "--machines")
    assert _flag("plan", "--partition").type is int


def test_network_config_takes_the_scenario_then_the_flags_then_the_command() -> None:
    emulation = replace(
        load_scenario(REPO / "scenarios" / "topoopt-12.toml").emulation, machines=("10.0.0.1",), netem="off"
    )
    kept = network_config(emulation)
    assert (kept.machines, kept.run_dir, kept.lock_wait_s, kept.netem) == (("10.0.0.1",), "/run/topolab", 0.0, "off")
    flags = NetworkFlags(machines=("10.0.0.2", "10.0.0.3"), run_dir="/tmp/x", wait_s=5.0)
    given = network_config(emulation, flags, link_mbps=50.0, reference_gbps=100.0)
    assert given.machines == ("10.0.0.2", "10.0.0.3") and given.run_dir == "/tmp/x" and given.lock_wait_s == 5.0
    assert (given.link_mbps, given.reference_gbps, given.netem) == (50.0, 100.0, "off")
    # flags not given keep the scenario's machines and the default run dir
    assert network_config(emulation, NetworkFlags(wait_s=1.0)).machines == ("10.0.0.1",)


@pytest.fixture
def as_root(monkeypatch):
    """The refusals come after the root check: pretend, so they are checked for any user."""
    monkeypatch.setattr(os, "geteuid", lambda: 0)


def _scenario(tmp_path: Path, name: str, extra_emulation: str = "") -> str:
    text = (REPO / "scenarios" / name).read_text()
    if extra_emulation:
        assert text.count("[emulation]\n") == 1
        text = text.replace("[emulation]\n", "[emulation]\n" + extra_emulation)
    path = tmp_path / name
    path.write_text(text)
    return str(path)


CANDLE_12 = '[cluster]\nservers = 12\ndegree = 4\n\n[workload]\nmodel = "candle"\nbatch_per_server = 128\n'


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["shell", "{topoopt}", "--machines", UNREACHABLE], "--machines: topolab shell runs on this machine only"),
        (["shell", "{on_machines}"], "emulation.machines: topolab shell runs on this machine only"),
        (
            ["train", "{topoopt}", "--machines", UNREACHABLE, "--", sys.executable],
            "--machines: topolab train runs on this machine only",
        ),
        (
            ["train", "{on_machines}", "--", sys.executable],
            "emulation.machines: topolab train runs on this machine only",
        ),
        (["train", "{topoopt}", "--run-dir", "/dev/full", "--", sys.executable], "--run-dir"),
        (
            ["collective", "{topoopt}", "--algorithm", "alltoall", "--machines", UNREACHABLE],
            "--machines: --routing planned routes over per-destination planes",
        ),
        (
            ["collective", "{on_machines}", "--algorithm", "alltoall", "--routing", "rates,single"],
            "emulation.machines: --routing rates routes over per-destination planes",
        ),
        (
            ["place", "{candle}", "--run", "--multipath", "--machines", UNREACHABLE],
            "--machines: place --run --multipath enforces the allocation with per-destination planes",
        ),
        (["place", "{candle}", "--machines", UNREACHABLE], "--machines: only with --run"),
        (["alloc", "{hierarchical}", "--sweep", "--machines", UNREACHABLE], "--machines: only with --sweep --measure"),
        (
            ["run", "{topoopt}", "--cable-down", "0-1@0", "--machines", UNREACHABLE],
            "--machines: [[faults]] / --cable-down: not supported over several machines",
        ),
        (["compare", "{topoopt}", "--machines", "localhost"], "--machines: 'localhost' is this machine's loopback"),
        (["place", "{candle}", "--run", "--wait", "nan"], "--wait"),
        (["alloc", "{hierarchical}", "--sweep", "--measure", "--run-dir", "/dev/full"], "--run-dir"),
        (["compare", "{topoopt}", "--run-dir", "/dev/full"], "--run-dir"),
    ],
)
def test_what_cannot_run_over_machines_is_refused_in_one_line(as_root, tmp_path, capsys, argv, names) -> None:
    paths = {
        "topoopt": _scenario(tmp_path, "topoopt-12.toml"),
        "on_machines": _scenario(tmp_path, "smoke-12.toml", 'machines = ["192.0.2.9", "192.0.2.10"]\n'),
        "hierarchical": _scenario(tmp_path, "hierarchical-12.toml"),
        "candle": str(tmp_path / "candle-12.toml"),
    }
    Path(paths["candle"]).write_text(CANDLE_12)
    argv = [a.format(**paths) for a in argv]
    if argv[0] in ("run", "compare", "collective", "alloc"):
        argv += ["--out", str(tmp_path / "out")]
    elif argv[0] == "train":
        argv[2:2] = ["--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and names in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_time_axis_is_the_fastest_arms() -> None:
    # a 100 Gbps switch port and 25 Gbps links at the same emulated 100 Mbit/s, and a
    # hierarchical server budget of 100 Gbps emulated at 400 Mbit/s
    axis = time_axis({"topoopt": (25.0, 100.0), "switch": (100.0, 100.0), "hierarchical": (100.0, 400.0)})
    assert axis.time_scale == 1000.0 and axis.fastest == "switch"
    assert axis.reference_gbps == {"topoopt": 100.0, "switch": 100.0, "hierarchical": 400.0}
    assert "x1000" in axis.line() and "switch arm" in axis.line()
    # arms already on one axis stay as they are
    same = time_axis({"a": (25.0, 100.0), "b": (100.0, 400.0)})
    assert same.time_scale == 250.0 and same.reference_gbps == {"a": 25.0, "b": 100.0}


@pytest.mark.parametrize("base", ["topoopt-12.toml", "hierarchical-12.toml"])
def test_every_compare_arm_gets_the_same_time_scale(base: str) -> None:
    # on its own, each arm of topoopt-12 would run at its plan's scale: x250 for TopoOpt and
    # the expander, x1000 for the switch
    scenarios = {
        k: scenario_for(load_scenario(REPO / "scenarios" / base), k) for k in ("topoopt", "switch", "expander")
    }
    rates = {k: (build_plan(s).link_gbps, s.emulation.link_mbps) for k, s in scenarios.items()}
    own = {time_scale(g, m) for g, m in rates.values()}
    assert len(own) == 2
    axis = time_axis(rates)
    scales = {k: time_scale(axis.reference_gbps[k], m) for k, (_g, m) in rates.items()}
    assert set(scales.values()) == {axis.time_scale} == {max(own)}
