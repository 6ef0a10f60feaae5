"""The flow-level predictor against closed forms (docs/algorithms.md sections 6 and 7)."""

import pytest

from contract.physics import tcp_goodput_fraction
from contract.schedule import Schedule
from planner import build_plan, load_scenario, parse_scenario
from planner.collectives.p2p import p2p_transfers
from planner.collectives.rings import multiring_allreduce, ring_allreduce, topoopt_rings
from planner.collectives.simulate import simulate_and_verify
from planner.cost.iteration import IterationOptions, iteration_schedule
from planner.cost.predict import Network, plan_network, predict


def _line_network(cap=1e6, alpha=0.0):
    # 0 - 1 - 2 chain; paths go through 1
    def path(a, b):
        step = 1 if b > a else -1
        return list(range(a, b + step, step))

    capacity = {(0, 1): cap, (1, 0): cap, (1, 2): cap, (2, 1): cap}
    return Network(capacity, path, alpha, reduce_bytes_per_s=1e18)


def test_single_transfer_time_is_bytes_over_rate_plus_hop_latency():
    sched = p2p_transfers(3, [(0, 2, 400_000)])
    pred = predict(sched, _line_network(alpha=1e-3))
    assert pred.seconds == pytest.approx(0.4 + 2e-3, rel=1e-6)
    assert pred.link_bytes[(0, 1)] == pytest.approx(400_000) and pred.link_bytes[(1, 2)] == pytest.approx(400_000)


def test_two_flows_share_a_link_fairly():
    # 0->2 and 1->2 share link (1,2): each gets half until the shorter one ends
    sched = p2p_transfers(3, [(0, 2, 400_000), (1, 2, 200_000)])
    pred = predict(sched, _line_network())
    # both at 0.5 MB/s until 0.4 s (1->2 done), then 0->2 alone: 200 KB left at 1 MB/s
    assert pred.seconds == pytest.approx(0.6, rel=1e-6)


def test_one_connection_gets_one_of_parallel_cables():
    # 0 - 1 - 2 with two cables between 1 and 2: (1, 2) carries 2 MB/s, one connection 1 MB/s
    net = _line_network()
    net.capacity[(1, 2)] = net.capacity[(2, 1)] = 2e6
    net.connection_cap = {(1, 2): 1e6, (2, 1): 1e6}
    alone = predict(p2p_transfers(3, [(1, 2, 400_000)]), net)
    assert alone.seconds == pytest.approx(0.4, rel=1e-6)  # one cable, not the two
    assert predict(p2p_transfers(3, [(1, 2, 400_000)]), net, events=True).seconds == pytest.approx(0.4, rel=1e-6)
    # two connections (0->2 relayed by 1, and 1->2) each get a cable of (1, 2)
    both = predict(p2p_transfers(3, [(0, 2, 400_000), (1, 2, 400_000)]), net)
    assert both.seconds == pytest.approx(0.4, rel=1e-6)
    assert both.link_bytes == {(0, 1): 400_000, (1, 2): 800_000}  # the cap is no cable: not counted
    net.connection_cap = {}  # as if one connection could use both
    assert predict(p2p_transfers(3, [(1, 2, 400_000)]), net).seconds == pytest.approx(0.2, rel=1e-6)


def test_messages_of_one_pair_are_fifo():
    sched = p2p_transfers(3, [(0, 1, 100_000), (0, 1, 100_000)])
    pred = predict(sched, _line_network())
    assert pred.seconds == pytest.approx(0.2, rel=1e-6)


@pytest.mark.parametrize("n", [8, 12, 16])
def test_topoopt_multiring_meets_the_bandwidth_bound(n):
    s = parse_scenario(
        {
            "cluster": {"servers": n, "degree": 4, "link_gbps": 1},
            "workload": {"model": "resnet50"},
            "parallelism": {"strategy": "data"},
        }
    )
    plan = build_plan(s)
    net = plan_network(plan, mtu=9000, alpha_s=0.0, reduce_bytes_per_s=1e18)
    size = n * 4 * 2**16
    pred = predict(multiring_allreduce(n, size, topoopt_rings(n, list(plan.strides))), net)
    goodput = 1e9 * tcp_goodput_fraction(9000) / 8
    bound = 2 * (n - 1) * size / (n * 4 * goodput)  # docs/algorithms.md section 7, D = d B
    assert pred.seconds == pytest.approx(bound, rel=0.02)
    one_ring = predict(ring_allreduce(n, size), net)
    assert one_ring.seconds == pytest.approx(4 * bound, rel=0.02)  # one of d interfaces busy


def test_goodput_fraction_matches_measured_htb_ceiling():
    assert tcp_goodput_fraction(1500) == pytest.approx(0.956, abs=0.003)
    assert tcp_goodput_fraction(9000) == pytest.approx(0.992, abs=0.002)


@pytest.mark.parametrize(
    "name", ["topoopt-12", "switch-12", "expander-12", "resnet50-topoopt-12", "resnet50-switch-12", "topoopt-32"]
)
def test_iteration_schedules_verify_and_overlap(scenario_dir, name):
    s = load_scenario(scenario_dir / f"{name}.toml")
    plan = build_plan(s)
    small = iteration_schedule(plan, IterationOptions(time_scale=10.0, payload_scale=1e-4))
    assert simulate_and_verify(small) == []
    pred = predict(small, plan_network(plan))
    compute = sum(op.seconds for op in small.programs[0]["compute"] if op.kind == "compute")
    assert pred.seconds >= compute  # the compute stream is a lower bound
    assert len(small.checks) >= 1


def test_hybrid_dense_iteration_uses_coset_groups():
    s = parse_scenario(
        {
            "cluster": {"servers": 8, "degree": 4},
            "workload": {"model": "vgg16", "batch_per_server": 8},
            "parallelism": {"strategy": "hybrid", "mp_degree": 2},
        }
    )
    plan = build_plan(s)
    sched = iteration_schedule(plan, IterationOptions(payload_scale=1e-4))
    groups = [c.groups for c in sched.checks if c.kind == "allreduce"]
    assert [[0, 2, 4, 6], [1, 3, 5, 7]] in groups
    assert simulate_and_verify(sched) == []


def test_relayed_bytes_count_servers_not_switches(scenario_dir):
    from planner.collectives.p2p import all_to_all

    for name, relayed in (("switch-12", False), ("topoopt-12", True)):
        plan = build_plan(load_scenario(scenario_dir / f"{name}.toml"))
        pred = predict(p2p_transfers(12, all_to_all(range(12), 4096)), plan_network(plan))
        assert (sum(pred.relayed_bytes.values()) > 0) is relayed


def test_prediction_does_not_depend_on_how_op_ids_are_numbered(scenario_dir):
    plan = build_plan(load_scenario(scenario_dir / "hierarchical-12.toml"))
    sched = iteration_schedule(plan, IterationOptions(payload_scale=1e-3))
    spread = sched.to_dict()  # ids 7, 1007, 2007, ...: not a dense range
    for program in spread["programs"]:
        for ops in program.values():
            for op in ops:
                op["id"] = op["id"] * 1000 + 7
                op["after"] = [a * 1000 + 7 for a in op.get("after", ())]
    dense, sparse = predict(sched, plan_network(plan)), predict(Schedule.from_dict(spread), plan_network(plan))
    assert sparse.seconds == dense.seconds and sparse.stream_end == dense.stream_end
    assert sparse.link_bytes == dense.link_bytes


def _same(a, b, rel=1e-12):
    assert a.seconds == pytest.approx(b.seconds, rel=rel)
    assert a.rank_seconds == pytest.approx(b.rank_seconds, rel=rel)
    assert a.stream_end.keys() == b.stream_end.keys()
    assert [a.stream_end[k] for k in b.stream_end] == pytest.approx(list(b.stream_end.values()), rel=rel)
    assert a.link_bytes == b.link_bytes and a.relayed_bytes == b.relayed_bytes


@pytest.mark.parametrize("model, n, d", [("resnet50", 12, 4), ("resnet50", 16, 8), ("bert", 12, 4)])
def test_rounds_replay_agrees_with_the_event_replay(model, n, d):
    """TopoOpt rings give every connection links of its own: the replay in rounds applies
    and predicts what the event replay predicts."""
    from planner.cost.replay.dedicated_links import dedicated_replay

    s = parse_scenario(
        {
            "cluster": {"servers": n, "degree": d, "link_gbps": 100, "latency_us": 1},
            "workload": {"model": model, "batch_per_server": 16},
            "parallelism": {"strategy": "data"},
        }
    )
    plan = build_plan(s)
    sched = iteration_schedule(plan, IterationOptions(payload_scale=0.1))
    net = plan_network(plan)
    rounds = dedicated_replay(sched, net)
    assert rounds is not None
    _same(rounds, predict(sched, net, events=True))
    _same(predict(sched, net), rounds, rel=0)


def test_rounds_replay_declines_what_it_cannot_do():
    from planner.cost.replay.dedicated_links import dedicated_replay

    shared = p2p_transfers(3, [(0, 2, 400_000), (1, 2, 200_000)])  # both on link (1, 2)
    assert dedicated_replay(shared, _line_network()) is None
    alone = p2p_transfers(3, [(0, 1, 100_000), (0, 1, 100_000)])
    assert dedicated_replay(alone, _line_network()) is not None
    net = _line_network()
    net.op_overhead_s = 1e-5  # the ranks' processors are shared: events decide the order
    assert dedicated_replay(alone, net) is None
    assert predict(alone, net).seconds == pytest.approx(0.2 + 2e-5, rel=1e-6)


def _from_scratch(replay) -> dict[int, float]:
    """Every flow on the wire's max-min rate solved anew (`max_min_rates` on copies)."""
    from collections import deque

    from planner.cost.replay.max_min import Flow, max_min_rates

    flows = [f for f in replay.conns if f.on_wire and f.links]
    copies = [Flow(f.index, f.src, f.dst, f.links, f.relayed, f.assured, deque(), seq=f.seq) for f in flows]
    users: list[list] = [[] for _ in replay.capacity]
    for c in copies:
        for link in c.links:
            users[link].append(c)
    max_min_rates(copies, users, replay.capacity)
    return {c.index: c.rate for c in copies}


@pytest.mark.parametrize("servers, degree", [(16, 4), (24, 8)])
def test_rates_kept_between_events_are_the_max_min_rates(monkeypatch, servers, degree):
    """`EventReplay.update_rates` solves only the flows at or above its threshold and gives a
    flow that takes the place of one that ended on its path that flow's rate: after every
    update, each flow on the wire has the rate a solve of all of them gives (DLRM's
    all-to-all beside its AllReduce rings, on a TopoOpt network with relayed paths)."""
    from planner.cost.replay import events

    checked, held = [], []
    update, solve = events.EventReplay.update_rates, events.max_min_rates

    def update_then_check(self):
        update(self)
        expected = _from_scratch(self)
        assert {f.index: f.rate for f in self.conns if f.index in expected} == pytest.approx(expected, rel=1e-9)
        checked.append(len(expected))

    def solve_and_count(flows, users, capacity, held_flows=False):
        held.append(held_flows)
        solve(flows, users, capacity, held_flows)

    monkeypatch.setattr(events.EventReplay, "update_rates", update_then_check)
    monkeypatch.setattr(events, "max_min_rates", solve_and_count)
    s = parse_scenario(
        {
            "cluster": {"servers": servers, "degree": degree, "link_gbps": 100, "latency_us": 1},
            "workload": {"model": "dlrm", "batch_per_server": 128},
            "parallelism": {"strategy": "hybrid"},
        }
    )
    plan = build_plan(s)
    sched = iteration_schedule(plan, IterationOptions(payload_scale=0.05))
    predict(sched, plan_network(plan), events=True)
    assert max(checked) > 100  # the all-to-all had many flows on the wire at once
    assert any(held) and not all(held)  # flows were held below the threshold, and not always


def _instant_network(ranks: int, op_cost: float, cores: int | None) -> Network:
    # links that take no time: only the ranks' processors decide
    capacity = {(a, b): 1e30 for a in range(ranks) for b in range(ranks) if a != b}
    return Network(capacity, lambda a, b: [a, b], 0.0, 1e30, op_cost, servers=ranks, cores=cores)


def test_ranks_share_the_cores_they_run_on():
    # rank 0 sends three messages to rank 1, one op (1 s of processor) each side each
    sched = p2p_transfers(2, [(0, 1, 8)] * 3)
    # a processor each (or two cores for two ranks): send i ends at i, its recv at i + 1
    assert predict(sched, _instant_network(2, 1.0, None)).seconds == pytest.approx(4.0)
    assert predict(sched, _instant_network(2, 1.0, 2)).seconds == pytest.approx(4.0)
    # one core: send 1 alone (0-1), then send 2 and recv 1 share it (1-3), send 3 and recv 2
    # (3-5), recv 3 alone (5-6)
    assert predict(sched, _instant_network(2, 1.0, 1)).seconds == pytest.approx(6.0)
    # four ranks in a ring, each sending to the next and receiving from the one before: every
    # rank busy at once, so two cores take twice as long as four
    ring = p2p_transfers(4, [(r, (r + 1) % 4, 8) for r in range(4)] * 2)
    alone = predict(ring, _instant_network(4, 1.0, None)).seconds
    assert predict(ring, _instant_network(4, 1.0, 4)).seconds == pytest.approx(alone)
    assert predict(ring, _instant_network(4, 1.0, 2)).seconds == pytest.approx(2 * alone)
