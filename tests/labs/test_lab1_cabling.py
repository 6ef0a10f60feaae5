"""Exercise 1, part 2 (cable your own): the checker reads the student's hypercube-16.csv
beside the checked file with read_cabling, passes exactly the 4-D hypercube, names what is
wrong in any other file (the reader's own line where it cannot use the file), and predicts
and measures the hypercube beside TopoOpt at the same degree."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from planner import build_plan
from planner.collectives.from_plan import allreduce_rings
from planner.topology.cabling_file import CablingFileError, read_cabling
from topolab.lab.command import exercises, load_checker, run_check

FOLDER = exercises()[1]
CHECKER = load_checker(1)
SOLUTION_CSV = FOLDER / "solution" / CHECKER.CABLING_FILE
STARTER_CSV = FOLDER / "starter" / CHECKER.CABLING_FILE


def cable_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#") and not line.startswith("server")]


def submission(tmp_path: Path, csv: str | None) -> Path:
    """The reference compare.py in a folder of its own, with ``csv`` beside it (None: none)."""
    shutil.copy(FOLDER / "solution" / CHECKER.STUDENT_FILE, tmp_path / CHECKER.STUDENT_FILE)
    if csv is not None:
        (tmp_path / CHECKER.CABLING_FILE).write_text(csv)
    return tmp_path / CHECKER.STUDENT_FILE


def edited(replacements: dict[str, str]) -> str:
    """The solution's cabling with some of its lines replaced (by "" to drop them)."""
    text = SOLUTION_CSV.read_text()
    for old, new in replacements.items():
        assert f"\n{old}\n" in text, old
        text = text.replace(f"\n{old}\n", f"\n{new}\n" if new else "\n")
    return text


def test_the_solution_is_the_rule_of_the_readme_and_the_starter_lacks_dimension_3():
    """Server i's port k to server i XOR 2^k at 25 Gbps, each pair once: the solution holds
    exactly those 32 cables; the starter the 24 of dimensions 0 to 2."""
    solution = read_cabling(SOLUTION_CSV, CHECKER.cube_gbps())
    rule = {(i, k, i ^ 1 << k, k, 25.0) for i in range(16) for k in range(4) if i < i ^ 1 << k}
    assert set(solution.cables) == rule and len(solution.cables) == 32
    starter = {tuple(map(int, line.split(",")[:4])) for line in cable_lines(STARTER_CSV.read_text())}
    assert starter == {(a, k, b, k) for a, k, b, _, _ in rule if k < 3} and len(starter) == 24
    assert CHECKER.cube_gbps() == 25.0


def test_the_starters_cabling_fails_with_the_readers_own_line_and_the_hint():
    result = run_check(1)
    with pytest.raises(CablingFileError) as err:
        read_cabling(STARTER_CSV, CHECKER.cube_gbps())
    assert "disconnected" in str(err.value)
    cabling = [p for p in result.problems if CHECKER.CABLING_FILE in p]
    assert len(cabling) == 1 and cabling[0].endswith(f"starter/{CHECKER.CABLING_FILE}: {err.value.problem}")
    assert "i XOR 2^k" in result.hint and result.hint == CHECKER.HINT


def test_a_right_cabling_beside_the_submission_passes_and_prints_both_predictions(tmp_path, capsys):
    assert run_check(1, submission(tmp_path, SOLUTION_CSV.read_text())).passed
    out = capsys.readouterr().out
    assert "hypercube-16: 2 rings" in out and "topoopt-16: 4 rings" in out
    # any order, any orientation, rates left to the default: still the hypercube
    lines = cable_lines(SOLUTION_CSV.read_text())
    shuffled = [",".join([b, pb, a, pa]) for a, pa, b, pb, _ in (line.split(",") for line in reversed(lines))]
    assert run_check(1, submission(tmp_path, "\n".join(shuffled) + "\n")).passed


def renumbered_from_1() -> str:
    """The solution's cables with the servers numbered 1 to 16."""
    lines = [line.split(",") for line in cable_lines(SOLUTION_CSV.read_text())]
    return "".join(f"{int(a) + 1},{pa},{int(b) + 1},{pb},{g}\n" for a, pa, b, pb, g in lines)


SLIPS = {  # slip -> (the cabling file's text, None for no file; what the checker says)
    "no file beside the submission": (lambda: None, "no such cabling file"),
    "a cable written from both ends": (lambda: edited({"0,0,1,0,25": "0,0,1,0,25\n1,0,0,0,25"}), "used twice"),
    "a cable across two bits": (
        lambda: edited({"0,0,1,0,25": "0,0,3,4,25", "2,0,3,0,25": "2,0,1,4,25"}),
        "cable 0-3: 0000 and 0011 differ in 2 bits, not in one",
    ),
    "a slow cable": (lambda: edited({"4,1,6,1,25": "4,1,6,1,10"}), "cable 4-6: 10 Gbps, not 25"),
    "a parallel cable": (lambda: edited({"0,3,8,3,25": "0,3,8,3,25\n0,4,8,4,25"}), "cable 0-8 is written 2 times"),
    "a dimension-3 cable left out": (
        lambda: edited({"5,3,13,3,25": ""}),
        "dimension 3 (port 3): 1 of 8 cables missing: 5-13",
    ),
    "a server too many": (
        lambda: edited({"7,3,15,3,25": "7,3,15,3,25\n15,4,16,0,25"}),
        "17 servers, a 4-D hypercube has 16",
    ),
    "servers numbered from 1": (renumbered_from_1, "no server 0"),
}


@pytest.mark.parametrize("slip", sorted(SLIPS))
def test_a_plausible_slip_in_the_cabling_fails_with_what_is_wrong(tmp_path, slip, capsys):
    csv, expected = SLIPS[slip]
    result = run_check(1, submission(tmp_path, csv()))
    assert not result.passed
    assert any(expected in p and CHECKER.CABLING_FILE in p for p in result.problems), result.problems
    assert "rings" not in capsys.readouterr().out  # no prediction of a network that is no hypercube


def test_the_predictions_are_each_plans_rings_at_the_same_degree():
    """The student's cabling planned as the exercise's scenario says, and TopoOpt on the same
    16 servers at degree 4 and 25 Gbps: the same job, each plan's rings, predicted as part 1's
    (within 1% of the README's formula with that plan's P, k and h)."""
    scenarios = CHECKER.cube_scenarios(SOLUTION_CSV)
    plans = {setup: build_plan(s) for setup, s in scenarios.items()}
    assert [plans[s].topology for s in CHECKER.CUBE_SETUPS] == ["file", "topoopt"]
    assert all((p.servers, p.degree, p.link_gbps) == (16, 4, 25.0) for p in plans.values())
    assert scenarios["topoopt-16"].workload == scenarios["hypercube-16"].workload
    predicted = CHECKER.cube_predictions(SOLUTION_CSV, CHECKER.SIZES)
    goodput = 25e9 * (9000 - 52) / (9000 + 14) / 8
    for setup, plan in plans.items():
        rings = allreduce_rings(plan)
        assert predicted[setup][0] == len(rings) == {"hypercube-16": 2, "topoopt-16": 4}[setup]
        for nbytes, seconds in predicted[setup][1].items():
            k = plan.servers
            formula = 2 * (k - 1) * nbytes / (k * len(rings) * goodput) + 2 * (k - 1) * 1 * plan.latency_us * 1e-6
            assert seconds == pytest.approx(formula, rel=CHECKER.TOLERANCE), (setup, nbytes)


def test_the_exercise_scenario_is_the_shipped_hypercube_job():
    """hypercube-16.toml of the exercise on the solution's cables predicts what
    scenarios/hypercube-16.toml (the same job, its own copy of the cables) predicts."""
    from topolab.lab.command import allreduce_real_seconds

    predicted = CHECKER.cube_predictions(SOLUTION_CSV, CHECKER.SIZES)["hypercube-16"][1]
    shipped = CHECKER.SCENARIOS / "hypercube-16.toml"
    for nbytes, seconds in predicted.items():
        assert seconds == pytest.approx(allreduce_real_seconds(shipped, CHECKER.CUBE_ALGORITHM, nbytes), rel=1e-12)


class FakeResult:
    def __init__(self, algorithm: str):
        self.algorithm, self.time_s, self.time_scale, self.verified = algorithm, 2.5, 250.0, True


def test_emulate_measures_the_three_setups_and_both_cabled_networks(monkeypatch, capsys):
    """``--emulate`` (its network replaced here: no root) runs part 1's three setups and the
    hypercube and TopoOpt-16, each with its plan's algorithm, printed beside its prediction."""
    import topolab.collective.command

    ran = []

    def fake_run_on_emulator(scenario, plan, algorithms, sizes, **kwargs):
        ran.append((plan.topology, plan.servers, tuple(algorithms), tuple(sizes)))
        return None, [FakeResult(algorithms[0])]

    monkeypatch.setattr(topolab.collective.command, "run_on_emulator", fake_run_on_emulator)
    assert run_check(1, solution=True, emulate=True).passed
    size = (CHECKER.EMULATED_BYTES,)
    assert ran == [
        ("topoopt", 12, ("ring",), size),
        ("topoopt", 12, ("topoopt",), size),
        ("switch", 12, ("ring",), size),
        ("file", 16, ("topoopt",), size),
        ("topoopt", 16, ("topoopt",), size),
    ]
    measured = [line for line in capsys.readouterr().out.splitlines() if "measured" in line]
    assert [line.split(",")[0].strip() for line in measured] == [*CHECKER.SETUPS, *CHECKER.CUBE_SETUPS]
    cube = CHECKER.cube_predictions(SOLUTION_CSV, [CHECKER.EMULATED_BYTES])
    assert f"predicted {cube['hypercube-16'][1][CHECKER.EMULATED_BYTES] * 1e3:.3f} ms" in measured[3]
    assert all("measured 10.000 ms" in line and line.endswith("verified") for line in measured)


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TOPOLAB_LAB_EMULATE") != "1", reason="emulated checks: set TOPOLAB_LAB_EMULATE=1")
def test_exercise_1_solution_measures_every_setup_on_the_emulator(capsys):
    assert run_check(1, solution=True, emulate=True).passed
    measured = [line for line in capsys.readouterr().out.splitlines() if "measured" in line]
    assert len(measured) == 5 and all(line.endswith("verified") for line in measured)
