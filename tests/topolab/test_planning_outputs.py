"""What every planning command (plan, predict, place, alloc, sweep) says of its figures: once,
what one iteration is and that its times are the real cluster's milliseconds; and nothing of
the emulation (its time scale, netem), since none of them builds a network."""

from __future__ import annotations

from pathlib import Path

import pytest

from topolab.cli import main
from topolab.common.plan_text import REAL_TIMES

REPO = Path(__file__).resolve().parents[2]
TOPOOPT = str(REPO / "scenarios" / "topoopt-12.toml")
HIERARCHICAL = str(REPO / "scenarios" / "hierarchical-12.toml")
EMULATION_WORDS = ("netem", "emulates at", "emulated s", "x250", "time scale")


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", TOPOOPT],
        ["predict", TOPOOPT],
        ["predict", TOPOOPT, "--topologies", "topoopt,switch"],
        ["place", TOPOOPT, "--time-limit", "2"],
        ["alloc", HIERARCHICAL],
        ["alloc", HIERARCHICAL, "--sweep", "--bytes", "1M", "--out", "{tmp}/alloc"],
        ["sweep", TOPOOPT, "--topologies", "topoopt", "--steps", "2", "--no-plot", "--out", "{tmp}/sweep"],
    ],
    ids=["plan", "predict", "predict-topologies", "place", "alloc", "alloc-sweep", "sweep"],
)
def test_planning_outputs_state_the_iteration_once_and_nothing_of_the_emulation(tmp_path, capsys, argv):
    assert main([a.format(tmp=tmp_path) for a in argv]) == 0
    out = capsys.readouterr().out
    assert out.count(REAL_TIMES) == 1, out
    lowered = out.lower()
    for words in EMULATION_WORDS:
        assert words not in lowered, words
