"""Checker of exercise 1: the student's AllReduce times on the 12-server prototype against
the planner's flow-level prediction in the real cluster's seconds
(topolab.lab.allreduce_real_seconds: planner.cost.predict of planner.collectives.from_plan's
schedules on the plans of scenarios/topoopt-12.toml and switch-12.toml). ``--emulate``
also measures the three on the emulated networks with `topolab collective`'s engine."""

from pathlib import Path

from topolab.lab import allreduce_real_seconds

TITLE = "Ring vs TopoOpt multi-ring vs switch on 12 servers"
STUDENT_FILE = "compare.py"
FUNCTIONS = ("allreduce_seconds(nbytes)",)
SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
# (setup name, scenario file, algorithm of planner.collectives.from_plan)
SETUPS = {
    "ring": ("topoopt-12.toml", "ring"),
    "topoopt": ("topoopt-12.toml", "topoopt"),
    "switch": ("switch-12.toml", "ring"),
}
SIZES = [1 << 20, 64 << 20]
HINT = (
    "hint: count the rings each setup runs at once and the link each ring uses (one ring: 1 of 4 "
    "interfaces; the multi-ring: all of them, both ways; the switch: one 100 Gbps port), take the TCP "
    "goodput at MTU 9000, and add the latency of every hop of every step (README.md)"
)
# The README's formula leaves out only the receiver's reduce of each chunk (0.6% of the
# bandwidth term on the real cluster's clock); 1% still tells the TCP goodput at MTU 9000
# (0.7% below the cable's rate) from the raw rate.
TOLERANCE = 0.01
EMULATED_BYTES = 16 << 20  # a few seconds per setup on the emulated 100 Mbit/s links


def planner_seconds(setup: str, nbytes: int) -> float:
    """The planner's real-cluster seconds of one AllReduce of ``nbytes`` on ``setup``."""
    scenario_file, algorithm = SETUPS[setup]
    return allreduce_real_seconds(SCENARIOS / scenario_file, algorithm, nbytes)


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
    if emulate and not problems:
        problems += measure_emulated()
    return problems


def measure_emulated() -> list[str]:
    """Run the three on the emulated networks (EMULATED_BYTES, median of 3) and print them
    next to the prediction."""
    from planner import build_plan, load_scenario
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
