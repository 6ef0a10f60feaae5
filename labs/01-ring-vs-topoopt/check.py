"""Checker of exercise 1: the student's AllReduce times on the 12-server prototype against
the planner's flow-level prediction (planner.predict of planner.collectives.from_plan's
schedules on the plans of scenarios/topoopt-12.toml and switch-12.toml). ``--emulate``
also measures the three on the emulated networks with `topolab collective`'s engine."""

from pathlib import Path

from contract.physics import time_scale
from planner import build_plan, load_scenario
from planner.collectives.from_plan import allreduce_for_plan
from planner.predict import plan_network, predict

TITLE = "Ring vs TopoOpt multi-ring vs switch on 12 servers"
STUDENT_FILE = "compare.py"
SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
# (setup name, scenario file, algorithm of planner.collectives.from_plan)
SETUPS = {
    "ring": ("topoopt-12.toml", "ring"),
    "topoopt": ("topoopt-12.toml", "topoopt"),
    "switch": ("switch-12.toml", "ring"),
}
SIZES = [1 << 20, 64 << 20]
HINT = (
    "hint: count the links each setup keeps busy (one ring uses 1 of 4 interfaces; the multi-ring all "
    "of them, both ways; the switch port is 100 Gbps), the TCP goodput at MTU 9000, and the per-hop latency"
)
TOLERANCE = 0.02  # the student's figure may differ from the planner's by 2% (rounding, own formula)
EMULATED_BYTES = 16 << 20  # a few seconds per setup on the emulated 100 Mbit/s links


def planner_seconds(setup: str, nbytes: int) -> float:
    scenario_file, algorithm = SETUPS[setup]
    scenario = load_scenario(str(SCENARIOS / scenario_file))
    plan = build_plan(scenario)
    link_mbps = scenario.emulation.link_mbps
    emulated = predict(allreduce_for_plan(plan, algorithm, nbytes), plan_network(plan, link_bps=link_mbps * 1e6))
    return emulated.seconds / time_scale(plan.link_gbps, link_mbps)


def check(student, emulate: bool) -> list[str]:
    problems = []
    for nbytes in SIZES:
        answer = student.allreduce_seconds(nbytes)
        missing = sorted(set(SETUPS) - set(answer))
        if missing:
            problems.append(f"{nbytes} bytes: no time for {missing} (expected keys {sorted(SETUPS)})")
            continue
        for setup in SETUPS:
            want = planner_seconds(setup, nbytes)
            got = float(answer[setup])
            if abs(got - want) > TOLERANCE * want:
                problems.append(
                    f"{setup}, {nbytes >> 20} MiB: {got * 1e3:.3f} ms, the planner predicts {want * 1e3:.3f} ms"
                )
    if problems:
        problems.append(HINT)
    if emulate and not problems:
        problems += measure_emulated()
    return problems


def measure_emulated() -> list[str]:
    """Run the three on the emulated networks (EMULATED_BYTES, median of 3) and print them
    next to the prediction."""
    from topolab.collective import run_on_emulator

    problems = []
    for setup, (scenario_file, algorithm) in SETUPS.items():
        scenario = load_scenario(str(SCENARIOS / scenario_file))
        plan = build_plan(scenario)
        _, results = run_on_emulator(scenario, plan, [algorithm], [EMULATED_BYTES], repeat=3, log=lambda _m: None)
        r = results[0]
        predicted_ms = planner_seconds(setup, EMULATED_BYTES) * 1e3
        print(
            f"  {setup}, {EMULATED_BYTES >> 20} MiB: measured {r.time_s / r.time_scale * 1e3:.3f} ms, "
            f"predicted {predicted_ms:.3f} ms (real cluster), {'verified' if r.verified else 'WRONG'}"
        )
        if not r.verified:
            problems.append(f"{setup}: the emulated AllReduce did not verify")
    return problems
