"""`topolab alloc`: LIBRA against equal shares on a hierarchical scenario, the share sweep's
files, its one-line errors, and (as root) one split measured on the emulated network."""

from __future__ import annotations

import json

import pytest

from planner import load_scenario
from topolab.alloc.command import SWEEP_SHARES, SweepCase, config_rows, format_splits, measure_row
from topolab.cli import main
from topolab.common.network import NetworkFlags, network_config

SCENARIO = "scenarios/hierarchical-12.toml"


def test_alloc_prints_libra_equal_and_their_predictions(capsys):
    assert main(["alloc", SCENARIO, "--json"]) == 0
    splits = json.loads(capsys.readouterr().out)
    libra, equal = splits["libra"], splits["equal"]
    assert sum(libra["gbps"]) == pytest.approx(100.0) and equal["gbps"] == [50.0, 50.0]
    assert libra["gbps"][0] > libra["gbps"][1]  # the fc dimension carries 4.5x the bytes
    # The allocator's choice is faster in its own model and in the flow model of the iteration.
    assert libra["model_ms"] < equal["model_ms"]
    assert libra["predicted_ms"] < 0.85 * equal["predicted_ms"]
    table = format_splits(load_scenario(SCENARIO), splits)  # the text output of the same figures
    assert "libra" in table and "equal" in table and " fc " in table and " ring " in table
    assert f"{libra['gbps'][0]:.2f}" in table


def test_sweep_writes_json_and_png_with_at_least_seven_shares(tmp_path, capsys):
    assert main(["alloc", SCENARIO, "--sweep", "--bytes", "2M", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "alloc.json").read_text())
    assert (tmp_path / "alloc.png").stat().st_size > 0
    rows = {r["name"]: r for r in doc["rows"]}
    pipelined = [r for r in doc["rows"] if r["mode"] == "pipelined"]
    assert len(pipelined) >= len(SWEEP_SHARES) >= 7
    libra = rows["libra"]
    # LIBRA's split is the fastest of the sweep in the model and in the flow model.
    assert all(libra["model_s"] <= r["model_s"] + 1e-12 for r in pipelined)
    assert libra["predicted_s"] <= min(r["predicted_s"] for r in pipelined) * 1.02
    assert all(r["predicted_s"] >= 0.98 * r["model_s"] for r in doc["rows"])  # nothing beats the bound
    assert "measured_s" not in libra and "<- LIBRA" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["alloc", "scenarios/topoopt-12.toml"], "topology.kind"),
        (["alloc", SCENARIO, "--measure"], "--measure"),
        (["alloc", SCENARIO, "--sweep", "--bytes", "1G"], "--bytes"),
        (["alloc", SCENARIO, "--sweep", "--bytes", "12Q"], "--bytes"),
        (["alloc", SCENARIO, "--repeat", "0"], "--repeat"),
        (["alloc", "no-such.toml"], "no-such.toml"),
    ],
)
def test_bad_input_is_one_line(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err


@pytest.mark.root
def test_one_split_measured_on_the_emulator_verifies(tmp_path):
    case = SweepCase((2, 2), ("ring", "ring"), 100.0, 400.0, 2 << 20)
    row = config_rows(case)[0]
    assert row["libra"]
    config = network_config(None, NetworkFlags(run_dir=str(tmp_path)))
    out = measure_row(case, row, repeat=1, config=config, log=lambda _msg: None)
    assert out["verified"]
    assert out["measured_s"] >= 0.95 * row["model_s"]  # shaped links cap it at the model


def test_sweep_reports_the_real_clusters_ms_as_alloc_does(tmp_path, capsys):
    """`alloc --sweep` gives its times in the real cluster's ms, as `alloc` does, not emulated
    seconds; alloc.json keeps both, the emulated ones over the time scale."""
    assert main(["alloc", SCENARIO, "--sweep", "--bytes", "2M", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "alloc.json").read_text())
    case = SweepCase.of(load_scenario(SCENARIO), 2 << 20)
    assert doc["time_scale"] == case.time_scale == 250.0  # 100 Gbit/s per server emulated at 400 Mbit/s
    libra = next(r for r in doc["rows"] if r["libra"])
    assert libra["predicted_ms"] == pytest.approx(libra["predicted_s"] / 250.0 * 1e3)
    assert libra["model_ms"] == pytest.approx(libra["model_s"] / 250.0 * 1e3)
    assert "times are the real cluster's, in ms" in out and "emulated seconds" not in out
    line = next(line for line in out.splitlines() if line.startswith("libra "))
    assert f"{libra['predicted_ms']:.3f}" in line
