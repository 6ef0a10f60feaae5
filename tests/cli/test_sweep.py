"""`topolab sweep` logic: table, JSON, PNG, progress on stderr, one-line errors."""

import argparse
import json

import pytest

from topolab import sweep
from topolab.cli import main


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
