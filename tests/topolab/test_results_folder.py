"""A default results folder that holds a run is kept under the run's start time, not
overwritten."""

import json

from topolab.run.command import keep_previous


def test_previous_run_is_renamed_after_its_start(tmp_path):
    out = tmp_path / "topoopt-12"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"started": "2026-11-23T15:45:12+0000"}))
    kept = keep_previous(out)
    assert kept == tmp_path / "topoopt-12-20261123-154512"
    assert (kept / "results.json").exists() and not out.exists()
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"started": "2026-11-23T15:45:12+0000"}))
    assert keep_previous(out) == tmp_path / "topoopt-12-20261123-154512-2"


def test_nothing_to_keep(tmp_path):
    assert keep_previous(tmp_path / "none") is None
    (tmp_path / "empty").mkdir()
    assert keep_previous(tmp_path / "empty") is None
