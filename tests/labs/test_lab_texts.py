"""What the exercises' READMEs teach and quote is what the code does: exercise 1's formula,
written as the README prints it, passes its checker and the usual slips fail; every figure
of a "What to observe" section and every example output is recomputed here."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.addressing import identity
from emulator.checks import parse_traceroute
from planner import build_plan, load_scenario
from planner.collectives.from_plan import allreduce_rings
from planner.topology.routing import coin_change_first_strides
from topolab.lab.command import LABS_DIR, exercises, load_checker, load_module

REPO = LABS_DIR.parent
TOPOOPT_12 = REPO / "scenarios" / "topoopt-12.toml"


def readme(number: int) -> str:
    return (exercises()[number] / "README.md").read_text()


def flat(text: str) -> str:
    """Whitespace as one space, so a phrase matches however the README wraps it."""
    return " ".join(text.split())


def section(text: str, title: str) -> str:
    return flat(text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0])


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g}"


def module(number: int, part: str):
    folder = exercises()[number]
    checker = load_checker(number)
    return load_module(folder / part / checker.STUDENT_FILE, f"lab{number}_{part}")


# ---------------------------------------------------------------- exercise 1: the formula


def readme_formula(number: int = 1) -> str:
    """The code block of exercise ``number``'s README: the formulas a student writes."""
    return re.search(r"```python\n(.*?)```", readme(number), re.S).group(1)


def formula_lines(number: int) -> list[str]:
    """The code lines of the README's block, comment lines left out."""
    return [line for line in readme_formula(number).strip().splitlines() if not line.lstrip().startswith("#")]


def indented(lines: list[str], spaces: int) -> str:
    return "\n".join(" " * spaces + line for line in lines)


def setup_parameters(setup: str) -> dict[str, float]:
    """Each setup's quantities of the formula, read from its plan: servers k, rings at once
    P, the rate of a ring's link, the hops h of a ring step, the latency and the MTU."""
    scenario_file, algorithm = load_checker(1).SETUPS[setup]
    scenario = load_scenario(str(REPO / "scenarios" / scenario_file))
    plan = build_plan(scenario)
    rings = allreduce_rings(plan)
    path = plan.path(rings[0][0], rings[0][1])
    hop_gbps = {frozenset((link.a, link.b)): link.gbps for link in plan.links}
    return {
        "k": plan.servers,
        "P": len(rings) if algorithm == "topoopt" else 1,
        "link_bps": min(hop_gbps[frozenset(hop)] for hop in zip(path, path[1:])) * 1e9,
        "h": len(path) - 1,
        "alpha": plan.latency_us * 1e-6,
        "MTU": scenario.emulation.mtu,
    }


def answer_module(tmp_path: Path, formula: str) -> Path:
    """A student's compare.py: ``formula`` as written, once per setup (with the reference
    cabling of part 2 beside it)."""
    params = {setup: setup_parameters(setup) for setup in load_checker(1).SETUPS}
    body = "\n".join(f"        {line}" for line in formula.strip().splitlines())
    path = tmp_path / "compare.py"
    path.write_text(
        f"PARAMS = {params!r}\n\n\n"
        "def allreduce_seconds(nbytes):\n"
        "    times = {}\n"
        "    for setup, p in PARAMS.items():\n"
        '        k, P, link_bps, h, alpha, MTU = (p[x] for x in ("k", "P", "link_bps", "h", "alpha", "MTU"))\n'
        "        S = nbytes\n"
        f"{body}\n"
        "        times[setup] = T\n"
        "    return times\n"
    )
    shutil.copy(exercises()[1] / "solution" / load_checker(1).CABLING_FILE, tmp_path)
    return path


def test_the_formula_as_the_readme_writes_it_passes_the_checker(tmp_path):
    from topolab.lab.command import run_check

    result = run_check(1, answer_module(tmp_path, readme_formula()))
    assert result.passed, result.problems


SLIPS = {
    "no 2(k-1)/k": ("2 * (k - 1) * S / (k * P * B)", "S / (P * B)"),
    "raw link rate, not TCP goodput": ("link_bps * (MTU - 52) / (MTU + 14) / 8", "link_bps / 8"),
    "no latency": (" + 2 * (k - 1) * h * alpha", ""),
    "latency once per step, not per hop": ("2 * (k - 1) * h * alpha", "2 * (k - 1) * alpha"),
}


@pytest.mark.parametrize("slip", sorted(SLIPS))
def test_a_plausible_slip_in_the_formula_fails_the_checker(tmp_path, slip):
    from topolab.lab.command import run_check

    right, wrong = SLIPS[slip]
    formula = readme_formula()
    assert right in formula
    assert not run_check(1, answer_module(tmp_path, formula.replace(right, wrong))).passed


def test_the_reference_solution_is_the_readme_formula_on_the_plans_quantities():
    solution = module(1, "solution")
    source = (exercises()[1] / "solution" / "compare.py").read_text()
    for line in readme_formula().strip().splitlines():
        assert line.strip() in source, line
    for setup, (rings, link_bps, hops) in solution.SETUPS.items():
        p = setup_parameters(setup)
        assert (rings, link_bps, hops) == (p["P"], p["link_bps"], p["h"]), setup
        assert (solution.SERVERS, solution.MTU, solution.ALPHA_S) == (p["k"], p["MTU"], p["alpha"])


def test_the_checkers_prediction_is_docs_closed_form_with_the_reduce_term():
    """docs/algorithms.md section 6: per step one chunk at the goodput, hops x alpha, and the
    receiver's reduce at REDUCE_BYTES_PER_S, which on the real cluster's clock runs time
    scale times faster: 0.6% of the bandwidth term, the part the README's formula leaves out."""
    from contract.physics import REDUCE_BYTES_PER_S, time_scale

    checker = load_checker(1)
    for setup, (scenario_file, _algorithm) in checker.SETUPS.items():
        p = setup_parameters(setup)
        scenario = load_scenario(str(REPO / "scenarios" / scenario_file))
        scale = time_scale(build_plan(scenario).link_gbps, scenario.emulation.link_mbps)
        k, rings = p["k"], p["P"]
        goodput = p["link_bps"] * (p["MTU"] - 52) / (p["MTU"] + 14) / 8
        for nbytes in checker.SIZES:
            bandwidth = 2 * (k - 1) * nbytes / (k * rings * goodput)
            reduce = 2 * (k - 1) * nbytes / (k * rings * REDUCE_BYTES_PER_S * scale)
            closed = bandwidth + 2 * (k - 1) * p["h"] * p["alpha"] + reduce
            assert checker.planner_seconds(setup, nbytes) == pytest.approx(closed, rel=1e-3), (setup, nbytes)
            assert 0.005 < reduce / bandwidth < 0.007


def test_exercise_1_observations_are_the_planners():
    checker = load_checker(1)
    t = {(s, n): checker.planner_seconds(s, n) for s in checker.SETUPS for n in (1 << 20, 64 << 20)}
    observe = section(readme(1), "What to observe")
    for setup in checker.SETUPS:
        assert f"| {setup} | {ms(t[setup, 1 << 20])} ms | {ms(t[setup, 64 << 20])} ms |" in observe
    small = t["ring", 1 << 20] / t["topoopt", 1 << 20]
    large = t["ring", 64 << 20] / t["topoopt", 64 << 20]
    assert f"{small:.1f}x faster than one ring at 1 MiB and {large:.1f}x at 64 MiB" in observe
    steps = 2 * (setup_parameters("ring")["k"] - 1)
    assert f"the latency of its {steps} steps" in observe
    apart = t["switch", 64 << 20] / t["topoopt", 64 << 20] - 1
    slower = t["switch", 1 << 20] / t["topoopt", 1 << 20] - 1
    assert f"at 64 MiB ({apart:.1%} apart)" in observe and f"at 1 MiB the switch is {slower:.0%} slower" in observe
    hops = (setup_parameters("topoopt")["h"], setup_parameters("switch")["h"])
    assert hops == (1, 2) and "its two hops per step" in observe
    assert f"within {checker.TOLERANCE:.0%} of the planner's" in flat(readme(1))


def test_exercise_1_part_2_observations_are_the_checkers_and_the_plans(capsys, monkeypatch):
    """What the checker prints on the reference cabling is the README's block, line for
    line; the ratios, steps, plan facts and the starter's error the text quotes are recomputed."""
    from topolab.lab.command import run_check

    checker = load_checker(1)
    folder = exercises()[1]
    assert run_check(1, solution=True).passed
    printed = capsys.readouterr().out.splitlines()
    observe = readme(1).split("## What to observe\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```text\n(.*?)```", observe, re.S).group(1).splitlines()
    assert block == printed and len(block) == 3
    text = section(readme(1), "What to observe")
    solution_csv = folder / "solution" / checker.CABLING_FILE
    rings, seconds = zip(*(checker.cube_predictions(solution_csv, checker.SIZES)[s] for s in checker.CUBE_SETUPS))
    small, large = (seconds[0][n] / seconds[1][n] for n in checker.SIZES)
    assert f"TopoOpt is {small:.1f}x faster at 1 MiB and {large:.1f}x at 64 MiB" in text
    assert f"{rings[0]} rings on 2 of every server's 4 cables, where TopoOpt runs {rings[1]} on all 4" in text
    plans = [build_plan(s) for s in checker.cube_scenarios(solution_csv).values()]
    hypercube, topoopt = plans
    assert f"the latency of the same {2 * (hypercube.servers - 1)} steps of one hop" in text
    assert hypercube.summary.diameter == topoopt.summary.diameter == 4
    assert f"{hypercube.summary.mean_hops:.3f}" == f"{topoopt.summary.mean_hops:.3f}" == "2.133"
    assert "both networks diameter 4 and mean hops 2.133" in text
    bisections = (f"{hypercube.summary.bisection_gbps:g}", f"{topoopt.summary.bisection_gbps:g}")
    assert f"{bisections[0]} Gbps on the hypercube, {bisections[1]} Gbps on TopoOpt's strides ±1, ±5" in text
    assert topoopt.strides == (1, 5)
    ring_note = next(n for n in hypercube.notes if n.startswith("AllReduce ring:"))
    assert f"`{ring_note}`" in text
    # step 5: the starter's error, as `make check` shows it in the exercise's folder
    monkeypatch.chdir(folder)
    problems = run_check(1, Path("starter") / checker.STUDENT_FILE).problems
    starter_error = next(p for p in problems if checker.CABLING_FILE in p)
    assert f"the starter's: `{starter_error}`" in section(readme(1), "Steps")


def test_docs_lab_section_points_at_exercise_1():
    """docs/topologies.md's lab exercise is told once, in exercise 1's part 2."""
    docs = (REPO / "docs" / "topologies.md").read_text()
    lab = docs.split("## Lab exercise: a hypercube against TopoOpt at the same degree\n", 1)[1].split("\n## ", 1)[0]
    assert "labs/01-ring-vs-topoopt/README.md" in lab and not re.search(r"^\d+\. ", lab, re.M)
    assert "Part 2: cable your own" in readme(1)


# ---------------------------------------------------------------- exercises 2 to 6


def test_exercise_2_diameters():
    checker = load_checker(2)
    smallest = checker.diameter(1024, module(2, "starter").select_strides(1024, 8))
    geometric = checker.diameter(1024, module(2, "solution").select_strides(1024, 8))
    observe = section(readme(2), "What to observe")
    assert f"the smallest strides give diameter {smallest}; the geometric choice gives {geometric}" in observe


def strides_module(tmp_path: Path, lines: list[str]) -> Path:
    """A student's strides.py: the rule of exercise 2's README (ratio, target, pick) as
    written, in the loop its text describes."""
    ratio, target, pick = lines
    path = tmp_path / "strides.py"
    path.write_text(
        "from math import gcd\n\n\n"
        "def select_strides(n, d):\n"
        "    candidates = [p for p in range(1, n) if gcd(p, n) == 1]\n"
        "    lo, hi, m = candidates[0], candidates[-1], d // 2\n"
        f"    {ratio}\n"
        "    chosen, taken = [], set()\n"
        "    for i in range(m):\n"
        f"        {target}\n"
        "        free = [p for p in candidates if p not in taken]\n"
        f"        {pick}\n"
        "        chosen.append(pick)\n"
        "        taken.update({pick, n - pick})\n"
        "    return chosen\n"
    )
    return path


def test_exercise_2_rule_as_the_readme_writes_it_is_the_planners(tmp_path):
    """The literal reading of the README's rule passes and is select_permutations exactly,
    wherever there are rings enough to choose from."""
    from planner.topology.totient import select_permutations, totient_strides
    from topolab.lab.command import run_check

    lines = formula_lines(2)
    assert len(lines) == 3
    path = strides_module(tmp_path, lines)
    assert run_check(2, path).passed
    select_strides = load_module(path, "lab2_readme").select_strides
    compared = 0
    for n in range(5, 200):
        for d in (2, 4, 6, 8):
            if d // 2 <= len(totient_strides(n)) // 2:
                assert select_strides(n, d) == select_permutations(totient_strides(n), d // 2, n), (n, d)
                compared += 1
    assert compared > 500


def test_exercise_2_a_sequence_ending_at_the_largest_candidate_fails(tmp_path):
    """The reading that led a student astray: the geometric sequence including hi."""
    from topolab.lab.command import run_check

    right, wrong = "(1 / m)", "(1 / (m - 1))"
    lines = formula_lines(2)
    assert right in lines[0]
    path = strides_module(tmp_path, [lines[0].replace(right, wrong)] + lines[1:])
    assert not run_check(2, path).passed


def test_exercise_2_worked_examples():
    checker = load_checker(2)
    text = flat(readme(2))
    assert f"ratio = 11^(1/2) = {11**0.5:.4g}, targets 1 and {11**0.5:.4g}, strides 1 and 5" in text
    assert module(2, "solution").select_strides(12, 4) == [1, 5]
    ratio = 1023 ** (1 / 4)
    targets = [f"{ratio**i:.4g}" for i in range(4)]
    strides = module(2, "solution").select_strides(1024, 8)
    assert (
        f"ratio = 1023^(1/4) = {ratio:.4g}, targets {', '.join(targets[:3])} and {targets[3]}, "
        f"strides {', '.join(map(str, strides[:3]))} and {strides[3]}" in text
    )
    inclusive = strides_module_inclusive(1024, 8)
    assert inclusive == [1, 11, 103, 3] and 1023 in module(2, "starter").candidates(1024)
    assert (
        f"takes {inclusive[0]}, {inclusive[1]}, {inclusive[2]} and then, n - 1 being taken, the smallest "
        f"free candidate, {inclusive[3]}: diameter {checker.diameter(1024, inclusive)} instead of "
        f"{checker.diameter(1024, strides)}" in text
    )


def strides_module_inclusive(n: int, d: int) -> list[int]:
    """The README's own example of the wrong reading: ratio (hi/lo)^(1/(m-1))."""
    candidates = module(2, "starter").candidates(n)
    lo, hi, m = candidates[0], candidates[-1], d // 2
    ratio = (hi / lo) ** (1 / (m - 1))
    chosen: list[int] = []
    taken: set[int] = set()
    for i in range(m):
        free = [p for p in candidates if p not in taken]
        pick = next((p for p in free if p >= lo * ratio**i - 1e-9), free[0])
        chosen.append(pick)
        taken.update({pick, n - pick})
    return chosen


def test_exercise_3_bytes_per_rank_and_peers():
    n, nbytes = 12, 12 * 1024
    sched = module(3, "solution").ring_allreduce(n, nbytes)
    assert sched.bytes_sent() == [2 * (n - 1) * nbytes // n] * n
    assert {(e["src"], e["dst"]) for e in sched.edge_bytes()} == {(r, (r + 1) % n) for r in range(n)}
    assert "Every rank sends exactly 2(n-1)S/n bytes, only to its right neighbour." in section(
        readme(3), "What to observe"
    )


def test_exercise_4_equal_split_over_the_bound():
    checker = load_checker(4)
    plan = checker.slow_plan()
    rings = allreduce_rings(plan)
    ratio = checker.predicted_seconds(plan, rings, [1.0] * len(rings)) / checker.bound_seconds(plan)
    assert f"{ratio:.2f}x the bound" in section(readme(4), "What to observe")


def route_text(path: list[int]) -> str:
    return " -> ".join(str(v) for v in path)


def test_exercise_5_route_is_the_plans():
    plan = build_plan(load_scenario(str(TOPOOPT_12)))
    path = list(plan.path(0, 4))
    assert len(path) - 1 == 2  # "two hops"
    first = list(coin_change_first_strides(plan.servers, list(plan.strides)))
    n = plan.servers
    moves = [(b - a + n // 2) % n - n // 2 for a, b in zip(path, path[1:])]  # signed strides taken
    assert moves[0] == first[4]
    text = flat(readme(5))
    hops = " then ".join(f"{identity(v)} (h{v})" for v in path[1:])
    signed = ", then ".join(f"{m:+d}" if i else f"first stride {m:+d}" for i, m in enumerate(moves))
    assert f"two hops, {hops}: the route {route_text(path)}, {signed}." in text
    greedy = module(5, "starter").first_strides(n, list(plan.strides))
    bfs = module(5, "solution").first_strides(n, list(plan.strides))
    observe = section(readme(5), "What to observe")
    assert f"Greedy takes {walk(greedy, 4, n)} hops for offset 4" in observe
    assert f"BFS takes {walk(bfs, 4, n)}: {moves[0]:+d} then {moves[1]:+d} in the planner's table" in observe


def walk(first: list[int], offset: int, n: int) -> int:
    node, hops = 0, 0
    while node != offset:
        node, hops = (node + first[(offset - node) % n]) % n, hops + 1
    return hops


def test_exercise_6_predictions_and_latency_share():
    checker = load_checker(6)
    real_ms = [checker.planner_real_ms(s) for s in checker.SIZES]
    observe = section(readme(6), "What to observe")
    sizes = ", ".join(str(s >> 20) for s in checker.SIZES[:-1]) + f" and {checker.SIZES[-1] >> 20} MiB"
    values = ", ".join(f"{v:.4g}" for v in real_ms[:-1]) + f" and {real_ms[-1]:.4g} ms"
    assert f"The planner predicts {values} for `topoopt` at {sizes}" in observe
    plan = build_plan(load_scenario(str(TOPOOPT_12)))
    steps = 2 * (plan.servers - 1)
    latency_ms = steps * 1 * plan.latency_us * 1e-3  # one hop per step on TopoOpt's own rings
    assert f"({steps} steps of one {plan.latency_us:g} us hop)" in observe
    shares = f"{latency_ms / real_ms[0]:.0%} of the time at 1 MiB and {latency_ms / real_ms[-1]:.1%} at 16 MiB"
    assert checker.SIZES[0] == 1 << 20 and checker.SIZES[-1] == 16 << 20 and f"is {shares}" in observe
    # the data shape's example in check.py (the README points there)
    assert f'"bytes": {checker.SIZES[0]}, "predicted_real_ms": {real_ms[0]:.4g},' in checker.__doc__


@pytest.mark.root
def test_exercise_5_traceroute_takes_the_route_the_readme_shows(tmp_path):
    """Step 4's command in `topolab shell`: the packets take the plan's route."""
    command = re.search(r"then `(h0 traceroute[^`]*)`", readme(5)).group(1)
    proc = subprocess.run(
        [sys.executable, "-m", "topolab", "shell", str(TOPOOPT_12), "--run-dir", str(tmp_path)],
        cwd=REPO,
        input=f"{command}\nexit\n",
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-1500:]
    trace = proc.stdout.split("traceroute to ", 1)[1].split("topolab>", 1)[0]
    observed = parse_traceroute(trace, 0)
    plan = build_plan(load_scenario(str(TOPOOPT_12)))
    assert observed == list(plan.path(0, 4))
    assert f"the route {route_text(observed)}" in flat(readme(5))
