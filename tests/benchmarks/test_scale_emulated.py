"""The scale matrix of `benchmarks/scale_emulated.py` without a network: its cells, each
cell's command, the matrix JSON (kept whole, resumed) and the heat map drawn from it alone."""

import importlib.util
import json
import shlex
import struct
import sys
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).parents[2] / "benchmarks" / "scale_emulated.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("scale_emulated", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up by name
    path = list(sys.path)  # the script puts the checkout and benchmarks/ first
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]
        sys.path[:] = path


def test_matrix_has_every_job_size_and_degree_with_the_scenarios_strategy(bench):
    jobs = bench.parse_jobs("resnet50,dlrm,ncf,bert")
    assert jobs == [("resnet50", "data"), ("dlrm", "hybrid"), ("ncf", "hybrid"), ("bert", "data")]
    cells = bench.matrix_cells(jobs, [64, 12, 128, 32], [4, 8])
    assert len(cells) == 4 * 4 * 2 == len({c.key for c in cells})
    # job by job, degree by degree, sizes rising: a failure skips only the larger sizes after it
    assert [(c.job, c.degree, c.servers) for c in cells[:5]] == [
        ("resnet50", 4, 12),
        ("resnet50", 4, 32),
        ("resnet50", 4, 64),
        ("resnet50", 4, 128),
        ("resnet50", 8, 12),
    ]


def test_jobs_flag_takes_another_strategy_and_refuses_unknown_names(bench):
    assert bench.parse_jobs("dlrm:data") == [("dlrm", "data")]
    with pytest.raises(ValueError, match="--jobs vgg: known jobs are"):
        bench.parse_jobs("resnet50,vgg")
    with pytest.raises(ValueError, match="dlrm:search"):
        bench.parse_jobs("dlrm:search")
    with pytest.raises(ValueError, match="--sizes"):
        bench.parse_ints("12,x", "--sizes", 2)


@pytest.mark.parametrize("strategy", ["hybrid", "data"])
def test_a_cells_command_measures_that_cell_alone(bench, strategy):
    cell = bench.Cell("dlrm", strategy, 8, 64)
    words = shlex.split(cell.command(3, bench.IPERF_MAX_PAIRS, bench.MATRIX_JSON))
    assert words[:3] == ["sudo", ".venv/bin/python", "benchmarks/scale_emulated.py"]
    args = bench.parse_args(words[3:])
    cells = bench.matrix_cells(
        bench.parse_jobs(args.jobs), bench.parse_ints(args.sizes, "", 2), bench.parse_ints(args.degrees, "", 1)
    )
    assert cells == [cell]
    assert args.iterations == 3 and args.matrix_only and args.matrix_out == bench.MATRIX_JSON


def row(bench, job, servers, degree, error, status="measured"):
    strategy = bench.scenario_strategy(job)
    r = {"job": job, "strategy": strategy, "servers": servers, "degree": degree, "status": status}
    if status == "measured":
        r.update(error=error, verified=True, wall_s_per_iteration=3.2, cpu_load=0.5, case_s=40.0, commit="abc1234")
    else:
        r["failed"] = "RunError: tc refused the shaping: host h74: tc did not finish within 5 s"
    return r


def test_matrix_json_keeps_the_latest_of_each_cell_and_resume_retries_failures(bench, tmp_path):
    path = tmp_path / "matrix.json"
    doc = bench.load_matrix(path)
    bench.put_cell(doc, row(bench, "dlrm", 12, 4, 0.30))
    bench.put_cell(doc, row(bench, "ncf", 12, 4, None, status="failed"))
    bench.put_cell(doc, row(bench, "dlrm", 12, 4, 0.02))  # measured again: replaces the first
    bench.save_matrix(doc, path)
    again = bench.load_matrix(path)
    assert [(c["job"], c.get("error")) for c in again["cells"]] == [("dlrm", 0.02), ("ncf", None)]
    assert bench.measured_cells(again) == {("dlrm", "hybrid", 12, 4)}
    assert [p.name for p in tmp_path.iterdir()] == ["matrix.json"]  # no partial file left


def test_eta_scales_a_prior_by_this_sessions_pace_and_extrapolates_without_one(bench):
    a, b = bench.Cell("dlrm", "hybrid", 4, 12), bench.Cell("dlrm", "hybrid", 4, 32)
    c = bench.Cell("ncf", "hybrid", 4, 64)
    prior = {a.key: 10.0, b.key: 20.0}
    done = {a.key: 15.0}  # this session runs 1.5x the prior
    assert bench.estimate_seconds(b, prior, done) == pytest.approx(30.0)
    assert bench.estimate_seconds(c, prior, {bench.Cell("ncf", "hybrid", 4, 32).key: 8.0}) == pytest.approx(16.0)
    # grown as another job of the same strategy and degree grew from 32 to 64 servers
    prior.update({bench.Cell("dlrm", "hybrid", 4, 64).key: 60.0, bench.Cell("resnet50", "data", 4, 64).key: 25.0})
    assert bench.estimate_seconds(c, prior, {bench.Cell("ncf", "hybrid", 4, 32).key: 8.0}) == pytest.approx(24.0)
    failed = dict(row(bench, "ncf", 64, 4, None, status="failed"), case_s=5.0)
    assert bench.prior_seconds({"cells": [failed, row(bench, "dlrm", 12, 4, 0.01)]}, []) == {a.key: 40.0}


def png_size(path):
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def test_heat_map_is_drawn_from_the_json_alone(bench, tmp_path):
    path = tmp_path / "matrix.json"
    doc = {"cells": [row(bench, "resnet50", 12, 4, 0.01), row(bench, "ncf", 128, 8, None, status="failed")]}
    path.write_text(json.dumps(doc))
    assert bench.main(["--plot-only", "--matrix-out", str(path)]) == 0
    width, height = png_size(tmp_path / "matrix.png")
    assert width > 600 and height > 500
    default = bench.matrix_cells([(j, bench.scenario_strategy(j)) for j in bench.MATRIX_JOBS], [12, 128], [4, 8])
    rows, sizes, held = bench.heat_grid(doc, default)
    assert rows[0] == ("resnet50", "data", 4) and len(rows) == 8 and sizes == [12, 128]
    assert set(held) == {("resnet50", "data", 12, 4), ("ncf", "hybrid", 128, 8)}


def test_plot_only_without_the_json_is_one_line(bench, tmp_path, capsys):
    assert bench.main(["--plot-only", "--matrix-out", str(tmp_path / "none.json")]) == 2
    assert capsys.readouterr().err.strip() == f"scale_emulated: --matrix-out {tmp_path / 'none.json'}: no such file"


def test_table_prints_a_line_per_cell_with_its_rate_error_commit_and_day(bench, tmp_path, capsys):
    measured = row(bench, "dlrm", 64, 4, 0.022)
    measured.update(
        link_mbps=6.0,
        rates_rebuilt_from=[12.0],
        payload_scale=0.6,
        predicted_ms=0.645,
        measured_ms=0.660,
        started="2026-11-28T20:10:52+0000",
    )
    path = tmp_path / "matrix.json"
    path.write_text(json.dumps({"cells": [measured, row(bench, "ncf", 128, 8, None, status="failed")]}))
    assert bench.main(["--table", "--matrix-out", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| job | d | servers | rate |") and len(lines) == 2 + 32  # the default matrix
    assert (
        "| DLRM hybrid | 4 | 64 | 6 Mbit/s (from 12) | 0.6 | 0.645 ms | 0.660 ms | 2.2% | 3.2 s | 50% "
        "| abc1234, 2026-11-28 |"
    ) in lines
    assert any(line.startswith("| NCF hybrid | 8 | 128 | failed: tc refused the shaping:") for line in lines)
    assert "| BERT data | 8 | 32 | not run | | | | | | | |" in lines
    assert not (tmp_path / "matrix.png").exists()  # --table alone draws nothing
