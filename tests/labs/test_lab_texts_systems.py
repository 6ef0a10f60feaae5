"""Exercises 8-10 (forest packing, LIBRA, placement): the formulas their READMEs print, written
into a student's file as they stand, pass the checker and the usual slips fail; the reference
solutions are those formulas; every figure the READMEs quote is recomputed; the instructor
page lists the ten exercises."""

from __future__ import annotations

import inspect
import re
from itertools import product
from pathlib import Path

import pytest

from planner import build_plan, load_scenario
from planner.collectives.from_plan import allreduce_rings, choose_forest
from tests.labs.test_lab_texts import flat, formula_lines, indented, readme, section
from topolab.lab.command import LABS_DIR, exercises, load_checker, load_module, run_check

MIB = 1 << 20


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g}"


def replaced(lines: list[str], right: str, wrong: str) -> list[str]:
    """``lines`` with the slip made: ``right`` (which must be there) replaced by ``wrong``."""
    assert any(right in line for line in lines), right
    return [line.replace(right, wrong) for line in lines]


def test_reference_solutions_are_the_readme_formulas():
    for number in (8, 9, 10):
        source = (exercises()[number] / "solution" / load_checker(number).STUDENT_FILE).read_text()
        for line in formula_lines(number):
            assert line.strip() in source, (number, line)


# ---------------------------------------------------------------- exercise 8: forest packing


def partitions(items):
    """Every partition of ``items`` into non-empty parts, by restricted growth strings (a
    second way to list them: item j joins part k <= 1 + the largest part used before it)."""
    items = list(items)

    def grow(labels, parts):
        if len(labels) == len(items):
            yield [{items[j] for j, k in enumerate(labels) if k == part} for part in range(parts)]
            return
        for k in range(parts + 1):
            yield from grow(labels + [k], max(parts, k + 1))

    yield from grow([], 0)


def lab8_parameters() -> dict:
    """The quantities of exercise 8's formulas, read from the plan of its scenario: its
    cables, each ring's slowest cable, the hops of a ring step, the latency and the MTU."""
    checker = load_checker(8)
    scenario = load_scenario(str(checker.SCENARIO))
    plan = build_plan(scenario)
    rate = {frozenset((link.a, link.b)): link.gbps for link in plan.links}
    assert len(rate) == len(plan.links)  # no parallel cables
    rings = allreduce_rings(plan)
    steps = [(ring[i], ring[(i + 1) % len(ring)]) for ring in rings for i in range(len(ring))]
    return {
        "n": plan.servers,
        "cables": [(link.a, link.b, link.gbps) for link in plan.links],
        "ring_gbps": [min(rate[frozenset((a, b))] for a, b in zip(ring, ring[1:] + ring[:1])) for ring in rings],
        "h": max(len(plan.path(a, b)) - 1 for a, b in steps),
        "alpha": plan.latency_us * 1e-6,
        "MTU": scenario.emulation.mtu,
    }


def lab8_module(tmp_path: Path, lines: list[str]) -> Path:
    tau, goodput, rings, bound = lines
    path = tmp_path / "forest.py"
    path.write_text(
        f"PARAMS = {lab8_parameters()!r}\n\n\n"
        f"{inspect.getsource(partitions)}\n\n"
        "def packing_rate(n, cables):\n"
        "    servers = list(range(n))\n\n"
        "    def crossing(P):\n"
        "        part = {v: i for i, members in enumerate(P) for v in members}\n"
        "        return sum(gbps for a, b, gbps in cables if part[a] != part[b])\n\n"
        f"    {tau}\n"
        "    return tau\n\n\n"
        "def allreduce_seconds(nbytes):\n"
        '    n, ring_gbps, h, alpha, MTU = (PARAMS[k] for k in ("n", "ring_gbps", "h", "alpha", "MTU"))\n'
        "    S = nbytes\n"
        '    tau = packing_rate(n, PARAMS["cables"])\n'
        f"{indented([goodput, rings, bound], 4)}\n"
        '    return {"rings": T_rings, "packing_bound": T_bound}\n'
    )
    return path


def test_exercise_8_formulas_as_the_readme_writes_them_pass(tmp_path):
    assert sum(1 for _ in partitions(range(8))) == 4140  # "8 servers have 4,140 partitions"
    assert "8 servers have 4,140 partitions" in flat(readme(8))
    result = run_check(8, lab8_module(tmp_path, formula_lines(8)))
    assert result.passed, result.problems


LAB8_SLIPS = {
    "the partition into single servers only": (
        "for P in partitions(servers) if len(P) >= 2",
        "for P in [[{v} for v in servers]]",
    ),
    "|P| parts instead of |P| - 1": ("(len(P) - 1)", "len(P)"),
    "the raw cable rate, not TCP goodput": ("(MTU - 52) / (MTU + 14) * 1e9 / 8", "1e9 / 8"),
    "every ring at the slowest ring's rate": ("sum(ring_gbps)", "len(ring_gbps) * min(ring_gbps)"),
    "no latency": (" + 2 * (n - 1) * h * alpha", ""),
}


@pytest.mark.parametrize("slip", sorted(LAB8_SLIPS))
def test_exercise_8_a_plausible_slip_fails(tmp_path, slip):
    assert not run_check(8, lab8_module(tmp_path, replaced(formula_lines(8), *LAB8_SLIPS[slip]))).passed


def test_exercise_8_observations_are_the_planners():
    checker = load_checker(8)
    p = lab8_parameters()
    n = p["n"]
    tau = checker.planner_packing_rate(p["cables"])
    singles = sum(g for _, _, g in p["cables"]) / (n - 1)
    assert tau == pytest.approx(singles, rel=1e-9)  # the partition into single servers binds
    observe = section(readme(8), "What to observe")
    total = sum(g for _, _, g in p["cables"])
    assert (
        f"tau = {tau:.2f} Gbit/s: the partition into single servers binds ({total:g} Gbit/s of cables over {n - 1})"
        in observe
    )
    rings = sum(p["ring_gbps"])
    assert sorted(p["ring_gbps"]) == [5.0, 5.0, 25.0, 25.0] and p["h"] == 1
    assert (
        f"The rings add up to {rings:g} Gbit/s but move the buffer at only {n} x {rings:g} / {2 * (n - 1)} = "
        f"{n * rings / (2 * (n - 1)):.2f} Gbit/s" in observe
    )
    t = {size: checker.planner_seconds(size) | {"forest": checker.forest_seconds(size)} for size in checker.SIZES}
    assert checker.SIZES == [MIB, 64 * MIB]
    for size, label in ((MIB, "1 MiB"), (64 * MIB, "64 MiB")):
        row = t[size]
        assert (
            f"| {label} | {ms(row['rings'])} ms | {ms(row['forest'])} ms | {ms(row['packing_bound'])} ms |" in observe
        )
    big, small = t[64 * MIB], t[MIB]
    trees = len(choose_forest(checker.lab_plan(), 64 * MIB).trees)
    assert (
        f"At 64 MiB the forest of {trees} trees is {big['rings'] / big['forest']:.2f}x faster than the rings and "
        f"{big['forest'] / big['packing_bound']:.2f}x its bound" in observe
    )
    assert abs(small["forest"] / small["rings"] - 1) < 0.02 and "at 1 MiB the two tie" in observe
    assert f"({small['forest'] / small['packing_bound']:.2f}x the bound)" in observe
    uniform = checker.planner_packing_rate([(a, b, 25.0) for a, b, _ in p["cables"]])
    assert uniform == pytest.approx(n * 4 * 25.0 / (2 * (n - 1)), rel=1e-9)
    assert f"tau = {uniform:.2f} Gbit/s, exactly what the four rings reach ({n} x 100 / {2 * (n - 1)})" in observe
    text = flat(readme(8))
    assert "the cable between servers 0 and 1, an older one at 5 Gbit/s" in text
    assert [(a, b, g) for a, b, g in p["cables"] if g != 25.0] == [(0, 1, 5.0)]
    # question 2: server 0's cables bound every ring AllReduce, and S / tau is below that bound
    egress = sum(g for a, b, g in p["cables"] if 0 in (a, b))
    assert egress == min(sum(g for a, b, g in p["cables"] if v in (a, b)) for v in range(n))
    assert f"Server 0 has {egress:g} Gbit/s of cables" in text and tau > n * egress / (2 * (n - 1))


# ---------------------------------------------------------------- exercise 9: LIBRA


def lab9_module(tmp_path: Path, lines: list[str]) -> Path:
    m0, a_d, shrink, pipelined, sequential, t, t_pipelined, t_sequential = lines
    path = tmp_path / "split.py"
    path.write_text(
        "from math import sqrt\n\n\n"
        "def dimension_bytes(dims, nbytes):\n"
        "    p, S = list(dims), nbytes\n"
        "    a = [0.0] * len(p)\n"
        f"    {m0}\n"
        "    for d in range(len(p)):\n"
        f"        {a_d}\n"
        f"        {shrink}\n"
        "    return a\n\n\n"
        "def libra_gbps(dims, nbytes, budget_gbps, schedule):\n"
        "    a, budget = dimension_bytes(dims, nbytes), budget_gbps\n"
        f"    {pipelined}\n"
        f"    {sequential}\n"
        '    return B_pipelined if schedule == "pipelined" else B_sequential\n\n\n'
        "def allreduce_seconds(dims, nbytes, gbps, schedule, mtu):\n"
        "    a, MTU = dimension_bytes(dims, nbytes), mtu\n"
        f"    {t}\n"
        f"    {t_pipelined}\n"
        f"    {t_sequential}\n"
        '    return T_pipelined if schedule == "pipelined" else T_sequential\n'
    )
    return path


def test_exercise_9_formulas_as_the_readme_writes_them_pass(tmp_path):
    result = run_check(9, lab9_module(tmp_path, formula_lines(9)))
    assert result.passed, result.problems


LAB9_SLIPS = {
    "sqrt(a_d) for the pipelined split": (
        "B_pipelined = [budget * x / sum(a) for x in a]",
        "B_pipelined = [budget * sqrt(x) / sum(sqrt(y) for y in a) for x in a]",
    ),
    "a_d for the sequential split": (
        "B_sequential = [budget * sqrt(x) / sum(sqrt(y) for y in a) for x in a]",
        "B_sequential = [budget * x / sum(a) for x in a]",
    ),
    "the message does not shrink": ("m = m / p[d]", "m = m"),
    "half the traffic (no all-gather)": ("a[d] = 2 * m *", "a[d] = m *"),
    "the raw rate, not TCP goodput": (" * (MTU - 52) / (MTU + 14)", ""),
    "the sum for the pipelined schedule": ("T_pipelined = max(t)", "T_pipelined = sum(t)"),
}


@pytest.mark.parametrize("slip", sorted(LAB9_SLIPS))
def test_exercise_9_a_plausible_slip_fails(tmp_path, slip):
    assert not run_check(9, lab9_module(tmp_path, replaced(formula_lines(9), *LAB9_SLIPS[slip]))).passed


def test_exercise_9_observations_are_the_planners():
    from contract.physics import tcp_goodput_fraction
    from topolab.alloc.command import SWEEP_SHARES

    checker = load_checker(9)
    t = checker.scenario().topology
    dims, S, budget = list(t.dims), checker.NBYTES, t.budget_gbps
    assert dims == [4, 3] and t.blocks == ("fc", "ring") and budget == 100 and t.schedule == "pipelined"
    a = checker.planner_bytes(dims, S)
    assert a == pytest.approx([1.5 * S, S / 3], rel=1e-12)
    observe = section(readme(9), "What to observe")
    libra = checker.planner_gbps(dims, S, budget, "pipelined")
    sequential = checker.planner_gbps(dims, S, budget, "sequential")
    assert (
        f"LIBRA gives dimension 0 {libra[0] / budget:.1%} of the budget pipelined, "
        f"{sequential[0] / budget:.1%} sequential" in observe
    )
    model = checker.planner_model_seconds(dims, S, libra, "pipelined", 9000)
    n = 4 * 3
    flat_bound = 2 * (n - 1) * S / (n * budget * 1e9 / 8 * tcp_goodput_fraction(9000))
    assert model == pytest.approx(flat_bound, rel=1e-9)
    equal = checker.planner_model_seconds(dims, S, [budget / 2] * 2, "pipelined", 9000)
    assert f"the model takes {ms(model)} ms for 64 MiB, exactly the flat bound" in observe
    assert f"and equal shares {ms(equal)} ms" in observe
    shares = [g / budget for g in libra]
    predicted = checker.predicted_real_seconds_at(shares, "pipelined")
    predicted_equal = checker.predicted_real_seconds_at([0.5, 0.5], "pipelined")
    assert (
        f"gives {ms(predicted)} ms at LIBRA's split (the chunks' pipeline costs {predicted / model - 1:.0%}) and "
        f"{ms(predicted_equal)} ms at equal shares, {predicted_equal / predicted:.2f}x slower" in observe
    )
    sweep = {share: checker.predicted_real_seconds_at([share, 1 - share], "pipelined") for share in SWEEP_SHARES}
    assert all(seconds > predicted for seconds in sweep.values())  # "LIBRA's split is the fastest row"
    assert (
        f"0.75 and 0.85 of the budget in dimension 0 are {sweep[0.75] / predicted - 1:.0%} and "
        f"{sweep[0.85] / predicted - 1:.0%} slower" in observe
    )


# ---------------------------------------------------------------- exercise 10: placement


def lab10_module(tmp_path: Path, lines: list[str]) -> Path:
    chain, free, start_f, end_f, free_f, barrier, start_b, end_b, free_b, makespan, best = lines
    path = tmp_path / "place.py"
    path.write_text(
        "from itertools import product\n\n\n"
        "def fuse_chain(n, edges):\n"
        "    out_degree, in_degree = [0] * n, [0] * n\n"
        "    for u, v in edges:\n"
        "        out_degree[u] += 1\n"
        "        in_degree[v] += 1\n"
        "    root = list(range(n))\n\n"
        "    def find(x):\n"
        "        return x if root[x] == x else find(root[x])\n\n"
        "    for u, v in edges:\n"
        f"        {chain}\n"
        "        if chain:\n"
        "            root[find(v)] = find(u)\n"
        "    groups = {}\n"
        "    for op in range(n):\n"
        "        groups.setdefault(find(op), []).append(op)\n"
        "    return list(groups.values())\n\n\n"
        "def makespan(forward, backward, edges, assignment, rate):\n"
        "    n = len(forward)\n"
        "    inputs = [[(u, nbytes) for u, v, nbytes in edges if v == g] for g in range(n)]\n"
        "    consumers = [[(v, nbytes) for u, v, nbytes in edges if u == g] for g in range(n)]\n"
        "    end_f, end_b = [0.0] * n, [0.0] * n\n"
        f"    {free}\n"
        "    for g in range(n):\n"
        "        s = assignment[g]\n"
        f"{indented([start_f, end_f, free_f], 8)}\n"
        f"    {barrier}\n"
        "    for g in reversed(range(n)):\n"
        "        s = assignment[g]\n"
        f"{indented([start_b, end_b, free_b], 8)}\n"
        f"    {makespan}\n"
        "    return T\n\n\n"
        "def best_assignment(forward, backward, edges, servers, rate):\n"
        f"    {best}\n"
        "    return best\n"
    )
    return path


def test_exercise_10_formulas_as_the_readme_writes_them_pass(tmp_path):
    result = run_check(10, lab10_module(tmp_path, formula_lines(10)))
    assert result.passed, result.problems


LAB10_SLIPS = {
    "a chain edge with either end single": (
        "out_degree[u] == 1 and in_degree[v] == 1",
        "out_degree[u] == 1 or in_degree[v] == 1",
    ),
    "transfers take no time": ("nbytes / rate", "0"),
    "gradients come back for free": ("end_b[v] + (0 if assignment[v] == s else nbytes / rate)", "end_b[v]"),
    "backward waits for the inputs, not the consumers": ("for v, nbytes in consumers[g]", "for v, nbytes in inputs[g]"),
    "round robin for the best": ("best = min(", "best = tuple(g % servers for g in range(len(forward))) or min("),
}


@pytest.mark.parametrize("slip", sorted(LAB10_SLIPS))
def test_exercise_10_a_plausible_slip_fails(tmp_path, slip):
    assert not run_check(10, lab10_module(tmp_path, replaced(formula_lines(10), *LAB10_SLIPS[slip]))).passed


def test_exercise_10_observations_are_the_cost_models():
    checker = load_checker(10)
    ops, groups = checker.task_graphs()
    names = [name for tower, _ in checker.TOWERS for name in (f"{tower}_0", f"{tower}_1", f"{tower}_2")]
    assert list(ops.names) == names + [name for name, _ in checker.HEAD]
    text = flat(readme(10))
    ms_of = {name: seconds * 1e3 for name, seconds in zip(ops.names, ops.forward)}
    for (tower, forward_ms), word in zip(checker.TOWERS, ("0.5", "1.0", "1.5")):
        assert ms_of[f"{tower}_0"] == pytest.approx(forward_ms) and f"{forward_ms:.1f}" == word
    assert "whose layers take 0.5, 1.0 and 1.5 ms of forward compute" in text
    assert "`head_0` (1.0 ms" in text and "`head_1` (0.5 ms, the loss)" in text
    assert ms_of["head_0"] == pytest.approx(1.0) and ms_of["head_1"] == pytest.approx(0.5)
    assert all(b == pytest.approx(2 * f) for f, b in zip(ops.forward, ops.backward))
    transfer = 4 * MIB / checker.RATE
    assert {nbytes for _, _, nbytes in ops.edges} == {4 * MIB}
    assert f"Every activation is 4 MiB per iteration, {ms(transfer)} ms between two servers" in text
    observe = section(readme(10), "What to observe")
    assert len(groups) == 4 and len(ops) == 11
    assert f"Fusion leaves {len(groups)} groups: 3^4 = {3**4} assignments instead of 3^11 = {3**11:,}" in observe
    c = checker.comparison()
    rr = checker.round_robin(ops, checker.uniform_rates(3, checker.RATE), checker.NO_MEMORY_LIMIT).assignment
    crossing = sum(rr[u] != rr[v] for u, v, _ in ops.edges)
    assert crossing == len(ops.edges) == 10
    assert (
        f"all on one server {ms(c['one server'])} ms; round robin of the 11 operators "
        f"{ms(c['round robin, operators'])} ms, slower than one server (all 10 of its edges cross servers, "
        f"each transfer {ms(transfer)} ms)" in observe
    )
    assert c["round robin, operators"] > c["one server"]
    assert (
        f"round robin of the 4 groups {ms(c['round robin, groups'])} ms; the best placement {ms(c['best, groups'])} ms"
        in observe
    )
    forward, backward, edges = checker.arrays(groups)
    best = min(product(range(3), repeat=4), key=lambda a: checker.model_makespan(groups, a))
    towers, head = best[:3], best[3]
    assert len(set(towers)) == 3 and head == towers[2]  # the towers apart, the head with drug2
    assert "the three towers on three servers and the head with `drug2`, the longest tower" in observe
    assert f"heuristic on the 11 operators finds {ms(c['heuristic, operators'])} ms too" in observe
    assert c["heuristic, operators"] == pytest.approx(c["best, groups"])
    slow = min(product(range(3), repeat=4), key=lambda a: checker.model_makespan(groups, a, checker.SLOW_RATE))
    assert len(set(slow)) == 1 and "At 1 Gbit/s the best placement uses one server" in flat(readme(10))


def test_exercise_10_topolab_place_fuses_candle_into_the_chains():
    """Step 5: `topolab place scenarios/candle-128.toml --servers 12` fuses CANDLE (at the
    scenario's batch, device and server bandwidth, as the command does) into the four chain
    groups the student's rule gives."""
    from planner.model.fusion import FusionConfig, fuse
    from planner.model.opgraph import model_graph

    checker = load_checker(10)
    scenario = load_scenario(str(LABS_DIR.parent / "scenarios" / "candle-128.toml"))
    w, cluster = scenario.workload, scenario.cluster
    assert "`topolab place scenarios/candle-128.toml --servers 12`" in readme(10) and 12 > cluster.degree
    graph = model_graph(w.model)
    config = FusionConfig(
        batch=w.batch_per_server, device_tflops=w.device_tflops, server_gbps=cluster.degree * cluster.link_gbps
    )
    fused = [sorted(graph.index[name] for name in op.members) for op in fuse(graph, config).ops]
    solution = load_module(exercises()[10] / "solution" / checker.STUDENT_FILE, "lab10_solution")
    chains = solution.fuse_chain(len(graph), checker.edges_of(graph))
    assert len(fused) == 4 and sorted(fused) == sorted(chains)
    assert "CANDLE into the same four groups" in flat(readme(10))


# ---------------------------------------------------------------- the instructor page


def test_the_instructor_page_lists_the_ten_exercises():
    page = (LABS_DIR / "README.md").read_text()
    numbers = [int(m) for m in re.findall(r"^\| (\d+) \|", page, re.M)]
    assert numbers == sorted(exercises()) == list(range(1, 11))
    assert flat(page).startswith("# topolab course labs (instructor page) Ten exercises")
    assert "All ten Makefiles are one file" in page
    loop = re.search(r"`for d in (\S+); do cp labs/lab.mk \$d/Makefile; done`", page).group(1)
    assert sorted(LABS_DIR.parent.glob(loop)) == sorted(folder for folder in exercises().values())
