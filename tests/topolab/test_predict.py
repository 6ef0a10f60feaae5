"""`topolab predict`: the scenario's own plan predicted without root, the same time `topolab
run` predicts before it emulates, and other networks side by side."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from planner import load_scenario
from topolab import predict_cmd
from topolab.cli import main

REPO = Path(__file__).resolve().parents[2]
TOPOOPT = REPO / "scenarios" / "topoopt-12.toml"


def test_predict_prints_the_time_run_predicts_before_it_emulates(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(predict_cmd.os, "geteuid", lambda: 1000)  # as a user without root
    assert main(["predict", str(TOPOOPT)]) == 0
    out = capsys.readouterr().out
    shown = float(re.search(r"predicted iteration\s+([\d.]+) ms", out).group(1))
    assert "netem assumed absent" in out
    from topolab.measured_run import prepare_run

    lines: list[str] = []
    prepare_run(load_scenario(TOPOOPT), tmp_path, None, None, None, lines.append)
    run_shown = float(re.search(r"\[2/4\] predicted ([\d.]+) ms", "\n".join(lines)).group(1))
    assert shown == run_shown


def test_predict_splits_the_iteration_into_compute_exposed_communication_and_phases(capsys):
    assert main(["predict", str(TOPOOPT), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    p = doc["prediction"]
    assert p["strategy"] == load_scenario(TOPOOPT).parallelism.strategy  # its strategy as written
    assert p["iteration_ms"] == pytest.approx(p["compute_ms"] + p["exposed_ms"])
    assert set(p["phase_end_ms"]) >= {"compute", "AllReduce", "model-parallel"}  # hybrid DLRM
    assert max(p["phase_end_ms"].values()) == pytest.approx(p["iteration_ms"])  # the last phase ends the iteration


def test_predict_side_by_side_includes_the_similar_cost_fattree_and_its_prices(capsys):
    assert main(["predict", str(TOPOOPT), "--topologies", "topoopt,switch,fattree", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["network"]: r for r in doc["networks"]}
    assert set(rows) == {"topoopt", "switch", "fattree"}
    assert rows["fattree"]["cost_usd"] <= rows["topoopt"]["cost_usd"]  # similar cost: not above TopoOpt's
    assert rows["switch"]["bandwidth"] == "1 x 100 Gbps"  # ideal switch: d x B per server
    assert all(r["strategy"] == rows["topoopt"]["strategy"] for r in rows.values())
    assert doc["prices"]["switch_radix"] > 0


def test_predict_bad_topology_is_one_line_exit_2(capsys):
    assert main(["predict", str(TOPOOPT), "--topologies", "topoopt,dragonfly"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "dragonfly" in err
