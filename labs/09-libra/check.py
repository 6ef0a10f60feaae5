"""Checker of exercise 9: the student's LIBRA model of a multi-dimensional network (bytes one
server sends per dimension for one AllReduce, the split of its bandwidth budget that
minimizes the AllReduce time, and that time) against the planner's allocator
(planner.bandwidth.libra: collective_bytes, allocate, model_seconds; docs/algorithms.md
section 3.2) on several shapes and both schedules. On scenarios/hierarchical-12.toml the
student's split is then predicted by planner.cost.predict (the schedule `topolab alloc
--sweep` runs, topolab.lab.command.predicted_real_seconds: the real cluster's seconds) beside equal
shares; ``--emulate`` measures both on the emulated network (root)."""

from functools import lru_cache
from pathlib import Path

from contract.physics import DEFAULT_MTU, tcp_goodput_fraction
from planner import load_scenario
from planner.bandwidth.libra import Collective, allocate, allreduce_workload, collective_bytes, model_seconds
from planner.collectives.hierarchical import PIPELINE_CHUNKS, hierarchical_allreduce_for_plan
from planner.topology.hierarchical import hierarchical_plan
from topolab.lab.command import predicted_real_seconds

TITLE = "LIBRA: split a server's bandwidth over the dimensions of its network"
STUDENT_FILE = "split.py"
FUNCTIONS = (
    "dimension_bytes(dims, nbytes)",
    "libra_gbps(dims, nbytes, budget_gbps, schedule)",
    "allreduce_seconds(dims, nbytes, gbps, schedule, mtu)",
)
HINT = (
    "hint: an AllReduce sends 2 m (p-1)/p in each dimension, m shrinking by p from one dimension to the "
    "next; pipelined, the dimensions run at once (time = the slowest), sequential one after the other "
    "(time = the sum); the optimum of each is in README.md"
)
SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "hierarchical-12.toml"
NBYTES = 64 << 20  # `topolab alloc --sweep`'s default size
BUDGET_GBPS = 100.0
SHAPES = [[4, 3], [2, 2, 3], [8, 2], [3, 4, 2]]
SCHEDULES = ("pipelined", "sequential")
TOLERANCE = 1e-6  # the allocator's closed forms are solved to 1e-12
EMULATED_REPEAT = 2


def planner_bytes(dims: list[int], nbytes: int) -> list[float]:
    return [float(x) for x in collective_bytes(dims, Collective("allreduce", float(nbytes)))]


def planner_gbps(dims: list[int], nbytes: int, budget_gbps: float, schedule: str) -> list[float]:
    return list(allocate(dims, allreduce_workload(nbytes), budget_gbps, mode=schedule).gbps)


def planner_model_seconds(dims: list[int], nbytes: int, gbps: list[float], schedule: str, mtu: int) -> float:
    """The allocator's time at TCP goodput, as `topolab alloc --sweep`'s model column."""
    goodput = [g * tcp_goodput_fraction(mtu) for g in gbps]
    return model_seconds(planner_bytes(dims, nbytes), goodput, schedule)


def close(got: list[float], want: list[float]) -> bool:
    return len(got) == len(want) and all(abs(g - w) <= TOLERANCE * max(abs(w), 1e-30) for g, w in zip(got, want))


def shown(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.6g}" for v in values) + "]"


@lru_cache(maxsize=1)
def scenario():
    return load_scenario(str(SCENARIO))


def predicted_real_seconds_at(shares: list[float], schedule: str) -> float:
    """planner.cost.predict of the AllReduce `topolab alloc --sweep` runs on the scenario's
    network at ``shares`` of the budget, in the real cluster's seconds."""
    plan, sched = sweep_schedule(shares, schedule)
    s = scenario()
    return predicted_real_seconds(plan, sched, s.emulation.budget_mbps, s.emulation.mtu)


def sweep_schedule(shares: list[float], schedule: str):
    t = scenario().topology
    plan = hierarchical_plan(t.dims, t.blocks, t.budget_gbps, list(shares), scenario().cluster.latency_us)
    chunks = PIPELINE_CHUNKS if schedule == "pipelined" else 1
    return plan, hierarchical_allreduce_for_plan(plan, NBYTES, chunks)


def check(student, emulate: bool) -> list[str]:
    problems = []
    for dims in SHAPES:
        a = [float(x) for x in student.dimension_bytes(list(dims), NBYTES)]
        want = planner_bytes(dims, NBYTES)
        if not close(a, want):
            problems.append(f"dims {dims}: dimension_bytes {shown(a)}, the allocator's {shown(want)}")
        for schedule in SCHEDULES:
            gbps = [float(x) for x in student.libra_gbps(list(dims), NBYTES, BUDGET_GBPS, schedule)]
            libra = planner_gbps(dims, NBYTES, BUDGET_GBPS, schedule)
            if not close(gbps, libra):
                problems.append(f"dims {dims}, {schedule}: libra_gbps {shown(gbps)}, LIBRA's {shown(libra)}")
            for name, split in (("LIBRA's split", libra), ("equal shares", [BUDGET_GBPS / len(dims)] * len(dims))):
                t = float(student.allreduce_seconds(list(dims), NBYTES, list(split), schedule, DEFAULT_MTU))
                model = planner_model_seconds(dims, NBYTES, split, schedule, DEFAULT_MTU)
                if abs(t - model) > TOLERANCE * model:
                    problems.append(
                        f"dims {dims}, {schedule}, {name}: {t * 1e3:.4f} ms, the allocator's model {model * 1e3:.4f} ms"
                    )
    if problems:
        return problems
    t = scenario().topology
    shares = [g / t.budget_gbps for g in student.libra_gbps(list(t.dims), NBYTES, t.budget_gbps, t.schedule)]
    equal = [1 / len(t.dims)] * len(t.dims)
    for name, split in (("your split", shares), ("equal shares", equal)):
        model = planner_model_seconds(list(t.dims), NBYTES, [x * t.budget_gbps for x in split], t.schedule, DEFAULT_MTU)
        print(
            f"  {scenario().name}, {name} {'/'.join(f'{x:.3f}' for x in split)}: model {model * 1e3:.4g} ms, "
            f"predicted {predicted_real_seconds_at(split, t.schedule) * 1e3:.4g} ms (real cluster)"
        )
    if emulate:
        problems += measure_emulated(shares, equal)
    return problems


def measure_emulated(shares: list[float], equal: list[float]) -> list[str]:
    """Both splits' AllReduce on the emulated network (one warm-up, EMULATED_REPEAT timed
    runs each, every run verified by the workers), as `topolab alloc --sweep --measure`."""
    import statistics

    from contract.emulation import EmulationConfig
    from topolab.common.network import open_network
    from topolab.common.schedule_run import run_schedule_on

    s = scenario()
    config = EmulationConfig(link_mbps=s.emulation.budget_mbps, mtu=s.emulation.mtu)
    problems = []
    for name, split in (("your split", shares), ("equal shares", equal)):
        plan, sched = sweep_schedule(split, s.topology.schedule)
        with open_network(plan, config, log=lambda _m: None) as net:
            run = run_schedule_on(net, sched.to_dict(), repeat=EMULATED_REPEAT)
            measured = statistics.median(run.times_s) / net.time_scale
        predicted = predicted_real_seconds_at(split, s.topology.schedule)
        print(
            f"  {name}: measured {measured * 1e3:.3f} ms, predicted {predicted * 1e3:.3f} ms (real cluster), "
            f"{'verified' if run.verified else 'WRONG'}"
        )
        if not run.verified:
            problems.append(f"{name}: the emulated AllReduce did not verify")
    return problems
