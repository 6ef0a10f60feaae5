"""Report plots students read in the labs: predicted and measured side by side, titles not
cut off, and a prediction error above the tolerance called out."""

from __future__ import annotations

from tests.fixtures.sample_results import smoke_results
from topolab.cli import main
from topolab.journal import write_results_file
from topolab.report import wrapped
from topolab.results import LinkBytes

TOLERANCE = 0.10


def _results_folder(tmp_path, measured_ms: float, with_measured_links: bool):
    from planner import build_plan, load_scenario
    from topolab.results import Measured

    plan = build_plan(load_scenario("scenarios/smoke-12.toml"))
    predicted_links = [LinkBytes(link.a, link.b, 2_000_000) for link in plan.links]
    results = smoke_results("complete", [measured_ms] * 3, 2.0, predicted_links, tolerance=TOLERANCE)
    if with_measured_links:
        results.measured = Measured([LinkBytes(r.src, r.dst, r.bytes * 11 // 10) for r in predicted_links])
    write_results_file(results, tmp_path)
    return tmp_path


def test_error_above_tolerance_is_called_out(tmp_path, capsys):
    # predicted 2.0 ms; measured 2.6 ms is 23% off, above the 10% tolerance
    folder = _results_folder(tmp_path, measured_ms=2.6, with_measured_links=True)
    before = (folder / "results.json").read_text()
    assert main(["report", str(folder)]) == 0
    text = (folder / "report.md").read_text()
    assert f"above the tolerance {TOLERANCE:.0%}" in text
    assert "Bytes on the cables per timed iteration: measured 52.80 MB" in text
    assert (folder / "results.json").read_text() == before  # untouched input
    for name in ("iterations.png", "link_bytes.png", "topology.png"):
        assert (folder / name).stat().st_size > 1000


def test_error_within_tolerance_is_not_called_out(tmp_path, capsys):
    folder = _results_folder(tmp_path, measured_ms=2.05, with_measured_links=False)
    assert main(["report", str(folder)]) == 0
    assert "above the tolerance" not in (folder / "report.md").read_text()


def test_long_titles_are_wrapped_not_cut():
    title = "smoke-12: bytes per directed link per iteration, predicted from the schedule and measured"
    lines = wrapped(title, 40).split("\n")
    assert len(lines) > 1 and all(len(line) <= 40 for line in lines)
    assert " ".join(lines) == title
