"""Automatic time dilation (topolab.run.time_dilation): the rate and payload scale chosen from the
workers' CPU cost, as the module's formulas say; and the machine probe that measures that cost."""

import math

import pytest

from contract.emulation import MIN_LINK_MBPS
from contract.errors import RunError
from contract.schedule import SEND
from planner.collectives.rings import ring_allreduce
from topolab.results.run_results import CPU_BOUND_LOAD
from topolab.run.machine_probe import PROBE_RANKS, MachineCost, probe_schedule
from topolab.run.time_dilation import (
    BUFFER_COPIES,
    FRAMES_WORKER_CPU_SHARE,
    ITERATION_BUDGET_S,
    MEMORY_SHARE,
    SHAPED_CABLE_CPU,
    WORKER_BASE_MIB,
    WORKER_CPU_SHARE,
    WORKER_CPU_SHARE_LIMIT,
    WORKER_OP_BYTES,
    choose,
    closing_warning,
    extra_frame_packets,
    payload_for_memory,
    rate_for_measured_load,
    step_ceil,
    step_floor,
    transfer_ops,
    worker_memory_bytes,
)

COST = MachineCost(op_cpu_s=50e-6, byte_cpu_s=1e-9, cores=2, key="test", probe_s=0.0)
GIB = 2.0**30


@pytest.mark.parametrize(
    "x,want", [(100, 100), (99.9, 80), (61, 60), (59.99, 50), (1.3, 1.2), (0.27, 0.25), (12_345, 12_000)]
)
def test_step_floor(x, want):
    assert step_floor(x) == pytest.approx(want)
    assert step_floor(x) <= x * (1 + 1e-12)


@pytest.mark.parametrize("bad", [0, -1, math.inf, math.nan])
def test_step_floor_refuses(bad):
    with pytest.raises(ValueError):
        step_floor(bad)


def _choose(ops=10_000, bytes_sent=10**9, predicted_s=1.0, link_mbps=100.0, auto=True, cost=COST, **frames):
    return choose(
        **frames,
        ranks=12,
        ops=ops,
        bytes_sent=bytes_sent,
        buffer_bytes=2**20,
        predicted_s=predicted_s,
        link_mbps=link_mbps,
        payload_scale=1.0,
        cost=cost,
        auto=auto,
        available=64 * GIB,
    )


def test_rate_kept_when_the_cores_keep_up():
    d = _choose(ops=1000, bytes_sent=10**8, predicted_s=1.0)  # W = 2 x (0.05 + 0.1) = 0.3 CPU-s in 1 s: 15%
    assert d.link_mbps == 100.0 and d.iteration_s == 1.0
    assert d.cpu_demand_s == pytest.approx(SHAPED_CABLE_CPU * 0.15) and d.cpu_load == pytest.approx(0.15)
    assert not d.warning


def test_rate_lowered_to_the_cpu_share():
    """W = 2 x (10,000 x 50 us + 1 GB x 1 s/GB) = 3 CPU-s on the cables; at 100 Mbit/s the iteration
    takes 1 s, so the workers would need 150% of 2 cores; r <= 100 x 0.5 x 2 x 1 / 3 = 33.3: 30."""
    d = _choose()
    assert d.cpu_demand_s == pytest.approx(SHAPED_CABLE_CPU * 1.5)
    assert d.link_mbps == 30.0 == step_floor(100 * WORKER_CPU_SHARE * 2 / d.cpu_demand_s)
    assert d.iteration_s == pytest.approx(1.0 * 100 / 30)
    assert d.cpu_load == pytest.approx(3.0 / (2 * 100 / 30)) and d.cpu_load <= WORKER_CPU_SHARE
    assert "30 Mbit/s" in d.why and "150%" in d.why


def test_rate_raised_to_keep_an_iteration_within_the_budget():
    """An iteration of 40 s at 100 Mbit/s costing W = 60 CPU-s: the share alone takes
    step_floor(100 x 0.5 x 2 x 40 / 60) = 60 Mbit/s, where an iteration would take ~67 s, over
    ITERATION_BUDGET_S; the lowest step within it is step_ceil(100 x 40 / 60) = 80, where the
    load is 60 / (2 x 50) = 60%, within WORKER_CPU_SHARE_LIMIT: 80. At W = 70 CPU-s the share
    takes 50 and 80 would load the cores 70%: 50 stays, an iteration of ~80 s."""
    d = _choose(ops=600_000, bytes_sent=0, predicted_s=40.0)
    assert d.cpu_demand_s == pytest.approx(60.0)
    assert d.link_mbps == 80.0 == step_ceil(100 * 40 / ITERATION_BUDGET_S)
    assert d.iteration_s == pytest.approx(50.0) and d.iteration_s <= ITERATION_BUDGET_S
    assert d.cpu_load == pytest.approx(WORKER_CPU_SHARE_LIMIT)
    assert "60 Mbit/s and ~67 s" in d.why and "so 80 Mbit/s" in d.why
    d = _choose(ops=700_000, bytes_sent=0, predicted_s=40.0)
    assert d.link_mbps == 50.0 == step_floor(100 * WORKER_CPU_SHARE * 2 * 40 / 70)
    assert d.iteration_s == pytest.approx(80.0) and d.iteration_s > ITERATION_BUDGET_S
    assert "at 50 Mbit/s" in d.why and "so " not in d.why
    # short iterations are never raised: the share alone decides
    assert _choose(ops=60_000, bytes_sent=0, predicted_s=4.0).link_mbps == 60.0 == step_floor(100 * 0.5 * 2 * 4 / 6)


@pytest.mark.parametrize("x,want", [(100, 100), (99.9, 100), (61, 80), (60, 60), (41.9, 50), (1.3, 1.5), (0.27, 0.3)])
def test_step_ceil(x, want):
    assert step_ceil(x) == pytest.approx(want)
    assert step_ceil(x) >= x * (1 - 1e-12)


def test_explicit_rate_kept_with_a_warning_when_cpu_bound():
    d = _choose(ops=100_000, auto=False)  # W = 2 x 6 CPU-s in a 1 s iteration: 600% of 2 cores
    assert d.link_mbps == 100.0 and d.cpu_load == pytest.approx(6.0) and d.cpu_load > CPU_BOUND_LOAD
    assert "emulation.link_mbps = 100" in d.warning and '"auto" picks 8' in d.warning
    assert not _choose(ops=100, bytes_sent=1, auto=False).warning


def test_a_fixed_rate_that_overloads_the_cores_is_said_again_in_the_last_line():
    from types import SimpleNamespace

    from topolab.run.measured_run import with_closing_warning

    d = _choose(ops=100_000, auto=False)  # 600% of 2 cores at the scenario's 100 Mbit/s
    results = SimpleNamespace(emulation=SimpleNamespace(dilation=d.to_dict()))
    line = with_closing_warning("[4/4] results in out/results.json, report in out/report.md", results)
    assert line.startswith("[4/4] results in out/results.json") and "\n" not in line
    assert "emulation.link_mbps = 100 kept the workers at ~600% of the 2 cores" in line
    assert "measured the CPU, not the cables" in line and 'link_mbps = "auto" (or --link-mbps auto) picks 8' in line
    fine = SimpleNamespace(emulation=SimpleNamespace(dilation=_choose(ops=100, bytes_sent=1, auto=False).to_dict()))
    assert with_closing_warning("[4/4] done", fine) == "[4/4] done"  # nothing to repeat
    assert closing_warning(None) == ""  # a run over several machines chooses no rate
    lowest = closing_warning(_choose(ops=10**9, predicted_s=1e-3).to_dict())
    assert lowest.startswith("warning: even the lowest rate")


def test_rate_never_below_the_emulator_minimum():
    d = _choose(ops=10**9, predicted_s=1e-3)
    assert d.link_mbps == MIN_LINK_MBPS
    assert d.warning  # even the lowest rate leaves the machine CPU-bound, and it says so


def test_payload_for_memory():
    """n workers holding BUFFER_COPIES x their buffers plus WORKER_BASE_MIB each must fit in
    MEMORY_SHARE of what is available; the scale is the highest step that does."""
    available = 16 * GIB
    assert payload_for_memory(12, 100e6, 1.0, available) == 1.0  # 12 x 248 MB: fits
    scale = payload_for_memory(128, 100e6, 1.0, available)
    assert scale < 1.0
    assert 128 * worker_memory_bytes(100e6 * scale) <= MEMORY_SHARE * available
    assert 128 * (BUFFER_COPIES * 100e6 * scale * 1.3 + WORKER_BASE_MIB * 2**20) > MEMORY_SHARE * available
    with pytest.raises(RunError, match="^not enough memory for the workers: 10000 workers need 468.8 GiB without"):
        payload_for_memory(10_000, 100e6, 1.0, available)


def test_payload_for_memory_counts_the_schedules_ops_in_the_run_and_in_every_worker():
    """BERT on 128 servers (6.5 million ops at degree 4, 13.0 million at 8): the run's copy of
    the schedule and the workers' ops leave less for buffers, so the scale is lower and all
    fits; at degree 8 little is left for buffers on 21.4 GiB (it was killed out of memory while
    only the buffers counted; refused while a worker held its ops as JSON objects), and with
    twice its ops nothing is, which the run says in one line."""
    from topolab.run.time_dilation import DRIVER_OP_BYTES

    available, ops, buffers = 21.4 * GIB, 6_502_400, 2.2e9  # the buffers at payload scale 1
    without = payload_for_memory(128, buffers, 1.0, available)
    scale = payload_for_memory(128, buffers, 1.0, available, ops)
    assert scale < without
    left = MEMORY_SHARE * (available - DRIVER_OP_BYTES * ops)
    assert 128 * worker_memory_bytes(buffers * scale, ops / 128) <= left
    assert 128 * worker_memory_bytes(buffers * without, ops / 128) > left
    assert 0 < payload_for_memory(128, buffers, 1.0, available, 13_011_456) < 1e-3
    with pytest.raises(RunError, match=r"and this run's copy of the schedule \(26022912 ops\) 9.7 GiB; 21.4 GiB"):
        payload_for_memory(128, buffers, 1.0, available, 26_022_912)


def test_transfer_ops_counts_sends_and_receives():
    s = ring_allreduce(4, 64)
    assert transfer_ops(s) == s.op_count() == 4 * 4 * 3  # no compute in a bare AllReduce


def test_probe_schedule_has_the_stated_ops():
    """The probe's schedule: rounds x 2 rings x ranks x 4 (n - 1) ops, each round's bytes
    sent 2 (n - 1) / n of its payload per ring and rank, and one check over every round."""
    n, rounds = PROBE_RANKS, 3
    s = probe_schedule(rounds, 4 * n * 2)
    assert s.op_count() == rounds * 2 * n * 4 * (n - 1)
    assert sum(s.bytes_sent()) == rounds * n * 2 * (n - 1) * (4 * n * 2 // n)
    assert len(s.checks) == 1 and s.checks[0].length == rounds * 4 * n * 2


def test_extra_frame_packets_counts_each_message_in_both_sizes():
    """P_extra: a ring AllReduce of 4 x 100,000 bytes sends 12 chunks of 25,000 bytes a rank
    (the reduce-scatter's and the all-gather's 3 steps each, both directions... of one ring: 6
    sends of 25,000 per rank), each 3 frames of 9,000 (8,948 of payload) or one offload packet."""
    s = ring_allreduce(4, 100_000)
    sends = [int(n) for prog in s.programs for n in prog.length[prog.kind == SEND]]
    assert sends and all(n == 25_000 for n in sends)
    assert extra_frame_packets(s, 9000) == len(sends) * (3 - 1)
    assert extra_frame_packets(s, 1500) == len(sends) * (math.ceil(25_000 / 1448) - 1)


def test_frames_add_their_packets_and_leave_the_kernel_more_of_the_cores():
    """With frames, W gains P_extra x c_packet and the share is FRAMES_WORKER_CPU_SHARE: the same
    schedule gets a lower rate than with offload packets, and the line says what frames cost."""
    plain = _choose(predicted_s=4.0)  # 37.5% of the cores: 100 Mbit/s
    with_frames = _choose(predicted_s=4.0, frames=True, extra_packets=100_000, packet_cpu_s=5e-6)
    assert with_frames.cpu_demand_s == pytest.approx(plain.cpu_demand_s + SHAPED_CABLE_CPU * 100_000 * 5e-6)
    assert with_frames.link_mbps < plain.link_mbps
    assert with_frames.cpu_load <= FRAMES_WORKER_CPU_SHARE < plain.cpu_load
    assert "100000 frames x 5.0 us" in with_frames.why and "with frames" in with_frames.why
    assert with_frames.to_dict()["extra_packets"] == 100_000


@pytest.mark.root
def test_machine_cost_probes_real_workers_once(tmp_path, monkeypatch):
    """The probe runs real workers on the loopback of a network namespace of its own (root);
    its figures are cached for this machine and this version of the workers, and read back
    instead of probing again."""
    import json
    import os

    from topolab.run.machine_probe import cache_path, machine_cost, machine_key

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    said: list[str] = []
    cost = machine_cost(said.append)
    assert said and "probing" in said[0]
    assert 0 < cost.op_cpu_s < 0.1 and 0 < cost.byte_cpu_s < 1e-6
    assert cost.cores == os.cpu_count() and cost.key == machine_key()
    assert json.loads(cache_path().read_text())["key"] == cost.key
    said.clear()
    assert machine_cost(said.append) == cost and not said
    # a frames run adds the frames' cost at its MTU to the cache, once
    framed = machine_cost(said.append, frames_mtu=9000)
    assert len(said) == 1 and "frames of 9000 bytes" in said[0]
    assert framed.op_cpu_s == cost.op_cpu_s and 0 < framed.frame_cpu_s(9000) < 1e-3
    assert framed.frame_cpu_s(1500) is None
    said.clear()
    assert machine_cost(said.append, frames_mtu=9000) == framed and not said
    assert json.loads(cache_path().read_text())["packet_cpu_s"] == {"9000": framed.frame_cpu_s(9000)}


def test_a_silent_peer_is_awaited_at_least_two_predicted_iterations():
    """`topolab run`'s limit on a silent peer: the scenario's timeout_s, or twice the predicted
    (emulated) iteration when that is longer (minutes under heavy dilation)."""
    from types import SimpleNamespace

    from topolab.run.measured_run import SILENCE_ITERATIONS, silence_limit_s

    def run(timeout_s: float, predicted_s: float | None) -> SimpleNamespace:
        predicted = SimpleNamespace(emulated_s=predicted_s) if predicted_s is not None else None
        return SimpleNamespace(
            scenario=SimpleNamespace(run=SimpleNamespace(timeout_s=timeout_s)),
            results=SimpleNamespace(predicted=predicted),
        )

    assert silence_limit_s(run(60.0, 0.5)) == 60.0  # 12 servers: the scenario's limit
    assert silence_limit_s(run(60.0, 50.3)) == SILENCE_ITERATIONS * 50.3  # 128 servers at 50 Mbit/s
    assert silence_limit_s(run(60.0, None)) == 60.0


@pytest.mark.parametrize(
    ("rate", "load", "want"),
    [
        (30.0, 0.65, 15.0),  # 30 x 0.5 / 0.65 x 0.75 = 17.3 -> 15 (DLRM on 64 servers' warm-up)
        (15.0, 0.55, 10.0),  # 10.2 -> 10
        (100.0, 0.9, 40.0),  # 41.7 -> 40
        (10.0, 0.5, None),  # within the share: kept
        (10.0, 0.3, None),
    ],
)
def test_a_warm_up_over_the_share_lowers_the_rate(rate, load, want):
    assert rate_for_measured_load(rate, load) == want


def test_with_frames_a_warm_up_over_their_smaller_share_lowers_the_rate():
    """NCF on 64 servers of degree 4 in frames: 47% at 30 Mbit/s is within 50% but over 40%."""
    from topolab.run.time_dilation import FRAMES_MEASURED_SHARE, WORKER_CPU_SHARE

    assert FRAMES_MEASURED_SHARE < 0.47 < WORKER_CPU_SHARE
    assert rate_for_measured_load(30.0, 0.47) is None
    assert rate_for_measured_load(30.0, 0.47, FRAMES_MEASURED_SHARE) == 15.0  # 30 x 0.4 / 0.47 x 0.75 = 19.1
    assert rate_for_measured_load(30.0, 0.39, FRAMES_MEASURED_SHARE) is None


def test_no_rate_below_the_emulator_minimum_after_a_warm_up():
    assert rate_for_measured_load(MIN_LINK_MBPS, 0.99) is None
    assert rate_for_measured_load(MIN_LINK_MBPS * 1.2, 5.0) == MIN_LINK_MBPS


def test_a_warm_up_over_the_share_ends_the_attempt_with_the_lower_rate():
    from types import SimpleNamespace

    from topolab.run.measured_run import RateTooHigh, check_measured_load

    def run_at(rate: float, cores: int = 2, frames: bool = False):
        dilation = {"auto": True, "link_mbps": rate, "cores": cores}
        return SimpleNamespace(
            results=SimpleNamespace(emulation=SimpleNamespace(dilation=dilation)),
            scenario=SimpleNamespace(emulation=SimpleNamespace(frames=frames)),
        )

    warm_up = SimpleNamespace(time_s=3.0, ranks=[{"cpu_s": 0.0325 * 3.0 * 2}] * 20)  # 65% of 2 cores
    with pytest.raises(RateTooHigh) as high:
        check_measured_load(run_at(30.0), warm_up)
    assert (high.value.link_mbps, high.value.at_mbps) == (15.0, 30.0)
    assert high.value.measured_load == pytest.approx(0.65)
    check_measured_load(run_at(30.0, cores=4), warm_up)  # 32.5% of 4 cores: kept
    with pytest.raises(RateTooHigh) as high:  # with frames, 47% is over their share of 40%
        check_measured_load(run_at(30.0, cores=4, frames=True), SimpleNamespace(time_s=3.0, ranks=[{"cpu_s": 5.64}]))
    assert (high.value.link_mbps, high.value.share) == (15.0, 0.4)


def test_the_workers_memory_stated_counts_their_ops():
    """The rate line's memory is what `payload_for_memory` weighed: buffers, base and ops."""
    few, many = _choose(ops=1000), _choose(ops=10_000_000)
    assert few.memory_gib * GIB == pytest.approx(12 * worker_memory_bytes(2**20, 1000 / 12))
    assert (many.memory_gib - few.memory_gib) * GIB == pytest.approx(WORKER_OP_BYTES * (10_000_000 - 1000))
