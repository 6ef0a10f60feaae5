"""Checker of exercise 1.

Part 1: the student's AllReduce times on the 12-server prototype against the planner's
flow-level prediction in the real cluster's seconds (topolab.lab.command.allreduce_real_seconds:
planner.cost.predict of planner.collectives.from_plan's schedules on the plans of
scenarios/topoopt-12.toml and switch-12.toml).

Part 2: the student's hand-written cabling, ``hypercube-16.csv`` beside the checked file
(starter/, or beside ``--module PATH.py``), read with
planner.topology.cabling_file.read_cabling (a file it cannot use is the file's own one
line), checked to be the 4-D hypercube, then planned as hypercube-16.toml beside this file
says (``[topology] kind = "file"``) and beside it TopoOpt at the same degree
(topolab.results.comparison.scenario_for, as `topolab compare` and `topolab predict --topologies`
give it); the AllReduce of each plan's rings is predicted as in part 1 and printed.

``--emulate`` also measures the three setups of part 1 and both 16-server networks on the
emulated network with `topolab collective`'s engine."""

import tomllib
from collections import Counter
from pathlib import Path

from contract.files import FileInputError
from planner.topology.cabling_file import Cabling, read_cabling
from topolab.lab.command import allreduce_real_seconds, predicted_real_seconds

TITLE = "Ring vs TopoOpt multi-ring vs switch on 12 servers; a hypercube cabled by hand"
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
    "hint: allreduce_seconds: count the rings each setup runs at once and the link each ring uses (one ring: "
    "1 of 4 interfaces; the multi-ring: all of them, both ways; the switch: one 100 Gbps port), take the TCP "
    "goodput at MTU 9000, and add the latency of every hop of every step; hypercube-16.csv: server i's port k "
    "goes to server i XOR 2^k (k = 0..3), each pair of servers on one line, at 25 Gbps (README.md)"
)
# The README's formula leaves out only the receiver's reduce of each chunk (0.6% of the
# bandwidth term on the real cluster's clock); 1% still tells the TCP goodput at MTU 9000
# (0.7% below the cable's rate) from the raw rate.
TOLERANCE = 0.01
EMULATED_BYTES = 16 << 20  # a few seconds per setup on the emulated 100 Mbit/s links

# Part 2: the student's cabling, planned as this scenario says, against TopoOpt at its degree
CABLING_FILE = "hypercube-16.csv"
HYPERCUBE_SCENARIO = Path(__file__).resolve().parent / "hypercube-16.toml"
DIMENSIONS = 4
CUBE_SERVERS = 1 << DIMENSIONS
# (setup name, topology kind of scenario_for: None is the cabling file's own)
CUBE_SETUPS = {"hypercube-16": None, "topoopt-16": "topoopt"}
CUBE_ALGORITHM = "topoopt"  # from_plan's "the plan's rings", both ways: TopoOpt's, or the cabling's ring
SHOWN_MISSING = 4  # missing cables named per dimension; the count says how many more


def planner_seconds(setup: str, nbytes: int) -> float:
    """The planner's real-cluster seconds of one AllReduce of ``nbytes`` on ``setup``."""
    scenario_file, algorithm = SETUPS[setup]
    return allreduce_real_seconds(SCENARIOS / scenario_file, algorithm, nbytes)


def check(student, emulate: bool) -> list[str]:
    problems = allreduce_problems(student)
    cabling_path = student_cabling_path(student)
    cube_problems = cabling_problems(cabling_path)
    if not cube_problems:
        print_cube_predictions(cabling_path)
    problems += cube_problems
    if emulate and not problems:
        problems += measure_emulated(cabling_path)
    return problems


def allreduce_problems(student) -> list[str]:
    """Part 1: the student's ``allreduce_seconds`` against the planner, every setup and size."""
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
    return problems


# ---------------------------------------------------------------- part 2: cable your own


def student_cabling_path(student) -> Path:
    """``hypercube-16.csv`` in the folder of the student's file, named as it is shown: from
    the current folder when it is inside it (``starter/hypercube-16.csv`` under `make check`)."""
    path = Path(student.__file__).with_name(CABLING_FILE)
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


def cube_gbps() -> float:
    """The rate of every cable: the part-2 scenario's ``cluster.link_gbps``, which a cable
    written without a rate takes."""
    return float(tomllib.loads(HYPERCUBE_SCENARIO.read_text())["cluster"]["link_gbps"])


def cabling_problems(path: Path) -> list[str]:
    """What keeps the file at ``path`` from being the 4-D hypercube: the file's own line when
    read_cabling cannot use it, else `hypercube_problems`."""
    try:
        cabling = read_cabling(path, cube_gbps())
    except FileInputError as err:  # no such file, a bad line, a port used twice, disconnected
        return [str(err)]
    return [f"{path}: {problem}" for problem in hypercube_problems(cabling, cube_gbps())]


def hypercube_problems(cabling: Cabling, gbps: float) -> list[str]:
    """How ``cabling`` differs from the 4-D hypercube at ``gbps``: 16 servers, each pair of
    servers whose numbers differ in exactly one bit joined by one cable, no other cable."""
    if cabling.servers != CUBE_SERVERS:
        return [f"{cabling.servers} servers, a {DIMENSIONS}-D hypercube has {CUBE_SERVERS} (0 .. {CUBE_SERVERS - 1})"]
    problems = []
    written: Counter[tuple[int, int]] = Counter()
    for cable in cabling.cables:
        a, b = sorted((cable.a, cable.b))
        bits = (a ^ b).bit_count()
        if bits != 1:
            problems.append(f"cable {a}-{b}: {a:04b} and {b:04b} differ in {bits} bits, not in one")
        elif cable.gbps != gbps:
            problems.append(f"cable {a}-{b}: {cable.gbps:g} Gbps, not {gbps:g}")
        written[a, b] += 1
    problems += [f"cable {a}-{b} is written {n} times (each pair once)" for (a, b), n in written.items() if n > 1]
    for k in range(DIMENSIONS):
        missing = [(i, i | 1 << k) for i in range(CUBE_SERVERS) if not i & 1 << k and (i, i | 1 << k) not in written]
        if missing:
            named = ", ".join(f"{a}-{b}" for a, b in missing[:SHOWN_MISSING])
            more = f" and {len(missing) - SHOWN_MISSING} more" if len(missing) > SHOWN_MISSING else ""
            problems.append(
                f"dimension {k} (port {k}): {len(missing)} of {CUBE_SERVERS // 2} cables missing: {named}{more}"
            )
    return problems


def cube_scenarios(cabling_path: Path) -> dict:
    """Setup name -> scenario: hypercube-16.toml planned on the cabling file at
    ``cabling_path``, and that job on TopoOpt's network of the same servers and degree."""
    from planner.scenario import parse_scenario
    from topolab.results.comparison import scenario_for

    data = tomllib.loads(HYPERCUBE_SCENARIO.read_text())
    data["topology"]["cabling"] = str(Path(cabling_path).resolve())
    own = parse_scenario(data, str(HYPERCUBE_SCENARIO), HYPERCUBE_SCENARIO.stem)
    return {setup: own if kind is None else scenario_for(own, kind) for setup, kind in CUBE_SETUPS.items()}


def scenario_seconds(scenario, plan, nbytes: int) -> float:
    """The planner's real-cluster seconds of one AllReduce of ``nbytes`` on the plan's rings,
    as `topolab.lab.command.allreduce_real_seconds` predicts part 1's (the scenario is no file here)."""
    from planner.collectives.from_plan import allreduce_for_plan

    emulation = scenario.emulation
    schedule = allreduce_for_plan(plan, CUBE_ALGORITHM, nbytes)
    return predicted_real_seconds(plan, schedule, emulation.link_mbps, emulation.mtu)


def cube_predictions(cabling_path: Path, sizes: list[int]) -> dict[str, tuple[int, dict[int, float]]]:
    """Setup name -> (rings the AllReduce runs on, {bytes: real-cluster seconds})."""
    from planner import build_plan
    from planner.collectives.from_plan import allreduce_rings

    out = {}
    for setup, scenario in cube_scenarios(cabling_path).items():
        plan = build_plan(scenario)
        out[setup] = (len(allreduce_rings(plan)), {n: scenario_seconds(scenario, plan, n) for n in sizes})
    return out


def print_cube_predictions(cabling_path: Path) -> None:
    """The AllReduce predicted on the student's hypercube and on TopoOpt at its degree."""
    print(f"  {CABLING_FILE}: a {DIMENSIONS}-D hypercube; one AllReduce predicted (real cluster):")
    for setup, (rings, seconds) in cube_predictions(cabling_path, SIZES).items():
        times = ", ".join(f"{n >> 20} MiB {t * 1e3:.4g} ms" for n, t in seconds.items())
        print(f"    {setup}: {rings} rings, {times}")


def measure_emulated(cabling_path: Path) -> list[str]:
    """Run part 1's three setups and part 2's two networks on the emulated networks
    (EMULATED_BYTES, median of 3) and print them next to the prediction."""
    from planner import build_plan, load_scenario

    runs = []  # (setup, scenario, plan, algorithm, predicted real-cluster seconds)
    for setup, (scenario_file, algorithm) in SETUPS.items():
        scenario = load_scenario(str(SCENARIOS / scenario_file))
        runs.append((setup, scenario, build_plan(scenario), algorithm, planner_seconds(setup, EMULATED_BYTES)))
    for setup, scenario in cube_scenarios(cabling_path).items():
        plan = build_plan(scenario)
        runs.append((setup, scenario, plan, CUBE_ALGORITHM, scenario_seconds(scenario, plan, EMULATED_BYTES)))
    return [problem for run in runs for problem in measure_one(*run)]


def measure_one(setup: str, scenario, plan, algorithm: str, predicted_s: float) -> list[str]:
    """One setup's AllReduce measured on its emulated network, printed beside its prediction."""
    from topolab.collective.command import run_on_emulator

    _, results = run_on_emulator(scenario, plan, [algorithm], [EMULATED_BYTES], repeat=3, log=lambda _m: None)
    r = results[0]
    print(
        f"  {setup}, {EMULATED_BYTES >> 20} MiB: measured {r.time_s / r.time_scale * 1e3:.3f} ms, "
        f"predicted {predicted_s * 1e3:.3f} ms (real cluster), {'verified' if r.verified else 'WRONG'}"
    )
    return [] if r.verified else [f"{setup}: the emulated AllReduce did not verify"]
