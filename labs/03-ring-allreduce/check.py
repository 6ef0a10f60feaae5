"""Checker of exercise 3: the student's ring AllReduce is executed by the planner's
reference simulator (planner.collectives.simulate.simulate_and_verify: every rank's buffer
must hold the exact sum) and must be bandwidth optimal (2 (n-1) S / n bytes per rank, to its
right neighbour only). ``--emulate`` runs it on the emulated topoopt-12 network with the
workers, every iteration verified by every worker."""

from pathlib import Path

from planner.collectives.simulate import simulate_and_verify

TITLE = "Ring AllReduce from scratch: reduce-scatter + all-gather as a schedule"
STUDENT_FILE = "ring.py"
FUNCTIONS = ("ring_allreduce(n, nbytes)",)
CASES = [(2, 64), (3, 1200), (5, 4000), (12, 12 * 1024)]
EMULATED_SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "topoopt-12.toml"
EMULATED_BYTES = 4 << 20
EMULATED_ITERATIONS = 2


def check(student, emulate: bool) -> list[str]:
    problems = []
    for n, nbytes in CASES:
        sched = student.ring_allreduce(n, nbytes)
        wrong = simulate_and_verify(sched)
        if wrong:
            problems.append(
                f"n={n}, {nbytes} bytes: the buffers do not hold the sum: {wrong[0]}; hint: after the "
                "reduce-scatter each rank owns one finished chunk; the all-gather copies them round"
            )
            continue
        for rank, sent in enumerate(sched.bytes_sent()):
            if sent != 2 * (n - 1) * nbytes // n:
                problems.append(
                    f"n={n}: rank {rank} sends {sent} bytes, the ring sends 2(n-1)S/n = {2 * (n - 1) * nbytes // n}"
                )
                break
        peers = {(e["src"], e["dst"]) for e in sched.edge_bytes()}
        off_ring = sorted(p for p in peers if p[1] != (p[0] + 1) % n)
        if off_ring:
            problems.append(f"n={n}: sends {off_ring[:3]} are not to the right neighbour i+1")
    if emulate and not problems:
        problems += run_emulated(student)
    return problems


def run_emulated(student) -> list[str]:
    """The schedule on the emulated 12-server network, executed and verified by the workers."""
    import subprocess

    from emulator import EmulatedNetwork
    from planner import build_plan, load_scenario
    from workers.coordinator import Coordinator

    scenario = load_scenario(str(EMULATED_SCENARIO))
    plan = build_plan(scenario)
    sched = student.ring_allreduce(plan.servers, EMULATED_BYTES)
    problems = []
    with EmulatedNetwork(plan, scenario.emulation) as net:
        hosts = [net.host_address(i) for i in range(plan.servers)]

        def spawn(rank, argv):
            return net.popen(rank, argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

        with Coordinator(sched.to_dict(), hosts, spawn=spawn, timeout_s=30) as coord:
            for i in range(EMULATED_ITERATIONS):
                res = coord.run_iteration(i)
                print(f"  emulated iteration {i}: {res.time_s:.3f} s, {'verified' if res.ok else 'WRONG'}")
                if not res.ok:
                    problems.append(f"emulated iteration {i}: {res.mismatches[:2]}")
    return problems
