"""`topolab predict`: the scenario's own plan predicted without root, the same time `topolab
run` predicts before it emulates, other strategies and other networks side by side."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from contract.emulation import DEFAULT_LINK_MBPS
from planner import load_scenario
from topolab.cli import main
from topolab.common import prediction
from topolab.plan.predict_command import STRATEGY_MARGIN, JobPrediction, strategy_remark

REPO = Path(__file__).resolve().parents[2]
TOPOOPT = REPO / "scenarios" / "topoopt-12.toml"
DLRM_128 = REPO / "scenarios" / "dlrm-128.toml"


def test_predict_prints_the_time_run_predicts_before_it_emulates(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(prediction.os, "geteuid", lambda: 1000)  # as a user without root
    assert main(["predict", str(TOPOOPT)]) == 0
    out = capsys.readouterr().out
    shown = float(re.search(r"predicted iteration\s+([\d.]+) ms", out).group(1))
    assert "netem" not in out  # a prediction builds no network: the assumption is the JSON's
    assert main(["predict", str(TOPOOPT), "--json"]) == 0
    assert "netem assumed absent" in json.loads(capsys.readouterr().out)["netem_note"]
    from topolab.run.measured_run import prepare_run

    # at the rate predict takes: run's automatic rate depends on this machine's cores (with
    # frames, topoopt-12 runs at 50 Mbit/s here), and the workers' reduction is not dilated
    s = load_scenario(TOPOOPT)
    s = replace(s, emulation=replace(s.emulation, auto_rate=False, link_mbps=DEFAULT_LINK_MBPS))
    lines: list[str] = []
    prepare_run(s, tmp_path, None, None, None, lines.append)
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


def test_predict_dlrm_128_data_and_hybrid_side_by_side_with_the_remark(capsys):
    assert main(["predict", str(DLRM_128), "--strategies", "data,hybrid"]) == 0
    out = capsys.readouterr().out
    rows = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(data|hybrid)\s+([\d.]+)\s", out, re.M)}
    assert set(rows) == {"data", "hybrid"}
    assert rows["data"] > 100 * rows["hybrid"]  # DLRM's tables replicated: every gradient AllReduced
    remark = [line for line in out.splitlines() if line.startswith("remark:")]
    assert len(remark) == 1 and "hybrid is the fastest" in remark[0] and "data" in remark[0]
    assert out.count("global batch of 16,384 samples (128 per server on 128 servers)") == 1


def test_predict_defaults_to_the_scenarios_strategy_and_data_parallel(capsys):
    assert main(["predict", str(TOPOOPT), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["strategy"] for r in doc["strategies"]] == ["hybrid", "data"]
    assert doc["strategies"][0] == doc["prediction"]  # the scenario's own, predicted once
    assert doc["iteration"] == {
        "servers": 12,
        "batch_per_server": 128,
        "global_batch": 1536,
        "times": "real cluster, ms",
    }


def _row(strategy: str, ms: float) -> JobPrediction:
    return JobPrediction("topoopt", "4 x 25 Gbps", ms, 0.0, ms, strategy=strategy)


@pytest.mark.parametrize(
    "own_ms, data_ms, words",
    [
        (10.0 * (1 + STRATEGY_MARGIN) * 1.01, 10.0, "hybrid is 1.06x slower than data"),  # loses by > 5%
        (10.0 * (1 + STRATEGY_MARGIN) * 0.99, 10.0, None),  # loses by < 5%: nothing to say
        (10.0, 10.0 * (1 + STRATEGY_MARGIN) * 0.99, None),  # wins by < 5%
        (10.0, 10.0 * (1 + STRATEGY_MARGIN) * 1.01, "hybrid is the fastest"),  # wins by > 5%
    ],
)
def test_the_strategy_remark_appears_only_beyond_five_percent(own_ms, data_ms, words):
    remark = strategy_remark([_row("data", data_ms), _row("hybrid", own_ms)], own="hybrid")
    if words is None:
        assert remark == ""
    else:
        assert remark.startswith("remark: the scenario's strategy") and words in remark and "\n" not in remark


def test_predict_bad_strategy_is_one_line_exit_2(capsys):
    assert main(["predict", str(TOPOOPT), "--strategies", "data,pipeline"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--strategies" in err and "pipeline" in err
