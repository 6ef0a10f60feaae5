"""`topolab sweep` logic: table, JSON, PNG, progress on stderr, one-line errors."""

import argparse
import json

import pytest

from topolab.cli import main
from topolab.results import sweep_report
from topolab.sweep import command as sweep


def _args(tmp_path, scenario, **kw):
    parser = argparse.ArgumentParser()
    sweep.add_sweep_arguments(parser)
    argv = [str(scenario), "--out", str(tmp_path / "out")]
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}"] + ([] if v is True else [str(v)])
    return parser.parse_args(argv)


def test_sweep_writes_table_json_and_plot(tmp_path, scenario_dir, capsys):
    args = _args(
        tmp_path, scenario_dir / "topoopt-12.toml", models="dlrm,candle", topologies="topoopt,switch,fattree", steps=20
    )
    assert sweep.run_sweep(args) == 0
    out, err = capsys.readouterr()
    assert "[6/6] candle d=4 B=25 fattree" in err
    data = json.loads((tmp_path / "out" / "sweep.json").read_text())
    rows = data["rows"]
    assert {(r["model"], r["network"]) for r in rows} == {
        (m, t) for m in ("dlrm", "candle") for t in ("topoopt", "switch", "fattree")
    }
    for r in rows:
        assert 0 < r["iteration_s"] <= r["data_parallel_s"] * (1 + 1e-12)
        assert r["vs_topoopt"] == pytest.approx(
            r["iteration_s"]
            / next(x["iteration_s"] for x in rows if x["model"] == r["model"] and x["network"] == "topoopt")
        )
    fat = next(r for r in rows if r["network"] == "fattree")
    topo = next(r for r in rows if r["network"] == "topoopt")
    assert fat["cost_usd"] <= topo["cost_usd"]  # cost-matched
    # (at 12 servers one switch tier suffices, so the Fat-tree may even beat d x B)
    assert "fattree" in out and "vs TopoOpt" in out
    assert (tmp_path / "out" / "sweep.png").stat().st_size > 1000


def test_sweep_bad_input_is_one_line_exit_2(tmp_path, scenario_dir, capsys):
    code = main(
        ["sweep", str(scenario_dir / "topoopt-12.toml"), "--topologies", "topoopt,dragonfly", "--out", str(tmp_path)]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "dragonfly" in err
    code = main(["sweep", str(tmp_path / "missing.toml")])
    err = capsys.readouterr().err
    assert code == 2 and "no such file" in err
    code = main(["sweep", str(scenario_dir / "topoopt-12.toml"), "--degrees", "4,x", "--out", str(tmp_path)])
    assert code == 2 and "--degrees" in capsys.readouterr().err


def test_an_impossible_cell_is_skipped_with_a_note_not_the_whole_sweep(tmp_path, scenario_dir, capsys):
    args = _args(tmp_path, scenario_dir / "topoopt-12.toml", topologies="topoopt,torus", degrees="4,6", steps=5)
    assert sweep.run_sweep(args) == 0
    out, err = capsys.readouterr()
    data = json.loads((tmp_path / "out" / "sweep.json").read_text())
    ran = {(r["network"], r["degree"]) for r in data["rows"]}
    assert ran == {("topoopt", 4), ("topoopt", 6), ("torus", 4)}  # a 2-D torus has degree 4 only
    assert len(data["skipped"]) == 1 and "torus" in data["skipped"][0] and "d=6" in data["skipped"][0]
    assert data["skipped"][0] in err and data["skipped"][0] in out


def test_sweep_with_no_possible_cell_is_one_line_exit_2(tmp_path, scenario_dir, capsys):
    code = main(
        [
            "sweep",
            str(scenario_dir / "topoopt-12.toml"),
            "--topologies",
            "torus",
            "--degrees",
            "6",
            "--out",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "no possible cell" in err and "--degrees" in err


def test_sweep_results_go_under_results_and_the_table_explains_its_strategy_column(
    tmp_path, scenario_dir, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    code = main(
        ["sweep", str(scenario_dir / "topoopt-12.toml"), "--topologies", "topoopt", "--steps", "3", "--no-plot"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert (tmp_path / "results" / "sweep-topoopt-12" / "sweep.json").is_file()
    assert sweep_report.STRATEGY_LEGEND in out and sweep_report.NETWORK_LEGEND in out
    assert sweep_report.STRATEGY_LEGEND in (tmp_path / "results" / "sweep-topoopt-12" / "sweep.txt").read_text()


def test_sweep_takes_graph_files_and_factories_beside_zoo_names(tmp_path, scenario_dir, capsys, monkeypatch):
    """``--models`` as a scenario's [workload] takes them: a zoo name, an operator-graph file
    and a PyTorch factory, each path relative to the current folder."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(repo)
    models = "candle,examples/models/resnet50.json,tests/fixtures/models/tiny.py:build_meta"
    args = _args(tmp_path, scenario_dir / "topoopt-12.toml", models=models, topologies="topoopt", steps=2)
    args.no_plot = True
    assert sweep.run_sweep(args) == 0
    out = capsys.readouterr().out
    rows = json.loads((tmp_path / "out" / "sweep.json").read_text())["rows"]
    assert [r["model"] for r in rows] == models.split(",")
    assert all(r["iteration_s"] > 0 for r in rows)
    assert len({r["iteration_s"] for r in rows}) == 3  # three models, not the scenario's three times
    assert out.count("global batch of 1,536 samples (128 per server on 12 servers)") == 1


@pytest.mark.parametrize(
    "value, label",
    [(16.5, "16.5"), (100.0, "100"), (0.2, "0.2"), (1000.0, "1,000"), (0.0123, "0.0123"), (1.65, "1.65")],
)
def test_the_time_axis_labels_are_plain_numbers(value, label):
    assert sweep_report.plain_tick(value) == label  # never matplotlib's log-axis 1.65x10^1


def test_a_time_axis_over_a_small_range_starts_at_zero():
    scale, low, high = sweep_report.time_axis([16.5, 18.8])  # 14% apart: the gap looks like 14%
    assert scale == "linear" and low == 0.0 and 18.8 < high < 18.8 * 1.3
    scale, low, high = sweep_report.time_axis([0.5, 16.5, 800.0])  # three orders of magnitude
    assert scale == "log" and 0 < low < 0.5 and high > 800.0
