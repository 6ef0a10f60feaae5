"""Checker of exercise 10: the student's chain fusion of operator graphs against the planner's
(planner.model.fusion.fuse, docs/algorithms.md section 9: on these graphs of alike operators
only its chain rule merges), their makespan of a placement against the placement cost model
(planner.placement.makespan, docs/search.md "Device placement of operator groups") and their
exhaustive placement of the fused groups on 3 servers against the best of every assignment.
It prints the makespans of one server, round robin (planner.placement.round_robin) over the
operators and over the fused groups, the student's placement and the planner's heuristic
(planner.placement.place_heuristic) over the operators."""

from functools import lru_cache
from itertools import product

from contract.physics import DEFAULT_MTU, cable_goodput
from planner.model.fusion import FusionConfig, fuse
from planner.model.opgraph import Operator, OpGraph, model_graph
from planner.placement import makespan, place_heuristic, round_robin, task_graph, uniform_rates

TITLE = "Fuse a chain, place on 3 servers, compare with round robin"
STUDENT_FILE = "place.py"
FUNCTIONS = (
    "fuse_chain(n, edges)",
    "makespan(forward, backward, edges, assignment, rate)",
    "best_assignment(forward, backward, edges, servers, rate)",
)
HINT = (
    "hint: merge an edge only when its producer has one consumer and its consumer one input; a group "
    "starts when its server is free and its inputs have arrived (a transfer between servers takes "
    "bytes / rate), the backward pass starts after the last forward and runs in reverse order (README.md)"
)
SERVERS = 3
BATCH = 64
DEVICE_TFLOPS = 128.0
FLOPS_PER_MS = DEVICE_TFLOPS * 1e12 / BATCH * 1e-3  # per sample: 1 ms of forward on a batch
ACTIVATION_BYTES = 64 << 10  # per sample: 4 MiB per batch
PARAMS_PER_FLOP = 1e-3  # alike operators: the same gradient bytes per FLOP, so fusion may merge them
RATE = cable_goodput(25e9, DEFAULT_MTU)  # bytes/s between two servers: one 25 Gbit/s cable
SLOW_RATE = cable_goodput(1e9, DEFAULT_MTU)
NO_MEMORY_LIMIT = float("inf")
TOLERANCE = 1e-9
# (tower, forward ms of each of its 3 layers)
TOWERS = (("gene", 0.5), ("drug1", 1.0), ("drug2", 1.5))
HEAD = (("head_0", 1.0), ("head_1", 0.5))


def layer(name: str, forward_ms: float, inputs: tuple[str, ...], out_bytes: int = ACTIVATION_BYTES) -> Operator:
    flops = forward_ms * FLOPS_PER_MS
    return Operator(name, "dense", int(flops * PARAMS_PER_FLOP), flops, out_bytes, inputs, (name,))


@lru_cache(maxsize=1)
def towers_graph() -> OpGraph:
    """Three towers of three layers each feeding a head of two: the exercise's model."""
    ops = []
    for tower, ms in TOWERS:
        previous: tuple[str, ...] = ()
        for i in range(3):
            ops.append(layer(f"{tower}_{i}", ms, previous))
            previous = (f"{tower}_{i}",)
    (first, first_ms), (last, last_ms) = HEAD
    ops.append(layer(first, first_ms, tuple(f"{tower}_2" for tower, _ in TOWERS)))
    ops.append(layer(last, last_ms, (first,), out_bytes=4))  # the loss
    return OpGraph("towers", tuple(ops))


def alike_graph(inputs: list[tuple[int, ...]]) -> OpGraph:
    """A graph of identical operators; ``inputs[i]`` are operator i's inputs."""
    return OpGraph("alike", tuple(layer(f"op{i}", 1.0, tuple(f"op{p}" for p in ps)) for i, ps in enumerate(inputs)))


def fusion_cases() -> dict[str, OpGraph]:
    return {
        "the three towers": towers_graph(),
        "CANDLE (the zoo's)": model_graph("candle"),
        "a diamond then a chain": alike_graph([(), (0,), (0,), (1, 2), (3,), (4,)]),
        "two chains into one": alike_graph([(), (0,), (), (2,), (1, 3), (4,), (5,)]),
    }


def edges_of(graph: OpGraph) -> list[tuple[int, int]]:
    return [(p, v) for v, ps in enumerate(graph.preds) for p in ps]


def planner_groups(graph: OpGraph) -> list[list[int]]:
    """The planner's fused groups as lists of operator indices."""
    fused = fuse(graph, FusionConfig(batch=BATCH, device_tflops=DEVICE_TFLOPS))
    return [sorted(graph.index[name] for name in op.members) for op in fused.ops]


@lru_cache(maxsize=1)
def task_graphs():
    """(operators, fused groups) as the placer sees them."""
    graph = towers_graph()
    fused = fuse(graph, FusionConfig(batch=BATCH, device_tflops=DEVICE_TFLOPS))
    return task_graph(graph, BATCH, DEVICE_TFLOPS), task_graph(fused, BATCH, DEVICE_TFLOPS)


def model_makespan(tasks, assignment, rate: float = RATE, servers: int = SERVERS) -> float:
    return makespan(tasks, tuple(assignment), tuple(range(len(tasks))), uniform_rates(servers, rate))


def arrays(tasks) -> tuple[list[float], list[float], list[tuple[int, int, float]]]:
    return list(tasks.forward), list(tasks.backward), [tuple(e) for e in tasks.edges]


def best_makespan(tasks, servers: int, rate: float) -> float:
    return min(model_makespan(tasks, a, rate, servers) for a in product(range(servers), repeat=len(tasks)))


def check(student, emulate: bool) -> list[str]:
    problems = []
    for name, graph in fusion_cases().items():
        got = student.fuse_chain(len(graph), edges_of(graph))
        mine = {frozenset(int(v) for v in group) for group in got}
        want = planner_groups(graph)
        if mine != {frozenset(g) for g in want}:
            problems.append(f"{name}: fuse_chain gives {sorted(sorted(g) for g in mine)}, the planner fuses {want}")
    ops, groups = task_graphs()
    rr_ops = round_robin(ops, uniform_rates(SERVERS, RATE), NO_MEMORY_LIMIT).assignment
    cases = [(ops, rr_ops, "round robin of the operators"), (ops, [0] * len(ops), "the operators on one server")]
    cases += [(groups, a, f"groups on {list(a)}") for a in ((0, 1, 2, 0), (0, 1, 2, 2), (1, 1, 0, 2), (2, 0, 0, 1))]
    for tasks, assignment, what in cases:
        forward, backward, edges = arrays(tasks)
        got = float(student.makespan(forward, backward, edges, list(assignment), RATE))
        want = model_makespan(tasks, assignment)
        if abs(got - want) > TOLERANCE * want:
            problems.append(f"{what}: makespan {got * 1e3:.4f} ms, the placement cost model's {want * 1e3:.4f} ms")
    if problems:
        return problems
    for servers, rate, what in ((SERVERS, RATE, "25 Gbit/s"), (2, RATE, "25 Gbit/s"), (SERVERS, SLOW_RATE, "1 Gbit/s")):
        forward, backward, edges = arrays(groups)
        assignment = [int(s) for s in student.best_assignment(forward, backward, edges, servers, rate)]
        if len(assignment) != len(groups) or not all(0 <= s < servers for s in assignment):
            problems.append(f"{servers} servers at {what}: {assignment} is not a server in 0..{servers - 1} per group")
            continue
        got, best = model_makespan(groups, assignment, rate, servers), best_makespan(groups, servers, rate)
        if got > best * (1 + TOLERANCE):
            problems.append(
                f"{servers} servers at {what}: {assignment} takes {got * 1e3:.4f} ms, the best placement "
                f"{best * 1e3:.4f} ms"
            )
    if not problems:
        print(summary(student))
    return problems


def comparison() -> dict[str, float]:
    """Makespans (s) on 3 servers at 25 Gbit/s: one server, round robin of the operators and
    of the fused groups, the best placement of the groups, the heuristic over the operators."""
    ops, groups = task_graphs()
    rates = uniform_rates(SERVERS, RATE)
    return {
        "one server": model_makespan(ops, [0] * len(ops)),
        "round robin, operators": round_robin(ops, rates, NO_MEMORY_LIMIT).makespan,
        "round robin, groups": round_robin(groups, rates, NO_MEMORY_LIMIT).makespan,
        "best, groups": best_makespan(groups, SERVERS, RATE),
        "heuristic, operators": place_heuristic(ops, rates, NO_MEMORY_LIMIT, time_limit=5.0).makespan,
    }


def summary(student) -> str:
    _, groups = task_graphs()
    forward, backward, edges = arrays(groups)
    mine = list(student.best_assignment(forward, backward, edges, SERVERS, RATE))
    rows = [f"  {name}: {seconds * 1e3:.4g} ms" for name, seconds in comparison().items()]
    return "\n".join(rows + [f"  your placement of the groups {mine}: {model_makespan(groups, mine) * 1e3:.4g} ms"])
