"""Schedule generators and the data-level simulator (pure Python, no sockets)."""

from __future__ import annotations

import json
from math import gcd

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.collectives import (
    Check,
    Op,
    Schedule,
    ScheduleBuilder,
    ScheduleError,
    all_to_all,
    btree_parents,
    dbtree_allreduce,
    dbtree_parents,
    make_inputs,
    multiring_allreduce,
    p2p_transfers,
    ring_allreduce,
    simulate_and_verify,
    simulate_schedule,
    subgroup_allreduce,
    topoopt_rings,
    tree_allreduce,
    verify,
)
from planner.collectives.trees import check_tree

ranks = st.integers(min_value=2, max_value=16)
items = st.integers(min_value=1, max_value=600)
seeds = st.integers(min_value=0, max_value=2**16)
PROPS = settings(max_examples=40, deadline=None)


def assert_reduces(schedule: Schedule, seed: int) -> None:
    problems = simulate_and_verify(schedule, seed)
    assert problems == [], problems[:3]


@PROPS
@given(n=ranks, k=items, seed=seeds, data=st.data())
def test_ring_allreduce_reduces(n, k, seed, data):
    order = data.draw(st.permutations(list(range(n))))
    assert_reduces(ring_allreduce(n, 4 * k, order), seed)


@PROPS
@given(n=ranks, k=items, seed=seeds, data=st.data())
def test_topoopt_multiring_reduces(n, k, seed, data):
    coprime = [p for p in range(1, n) if gcd(p, n) == 1]
    strides = data.draw(st.lists(st.sampled_from(coprime), min_size=1, max_size=3, unique=True))
    sched = multiring_allreduce(n, 4 * k, topoopt_rings(n, strides))
    assert len({s for prog in sched.programs for s in prog}) == min(2 * len(strides), k)
    assert_reduces(sched, seed)


@PROPS
@given(n=ranks, k=items, seed=seeds, data=st.data())
def test_subgroup_coset_rings_reduce(n, k, seed, data):
    g = data.draw(st.sampled_from([g for g in range(1, n + 1) if n % g == 0]))
    ks = [c for c in range(1, g + 1) if gcd(c, g) == 1] if g > 1 else [1]
    chosen = data.draw(st.lists(st.sampled_from(ks), min_size=1, max_size=2, unique=True))
    sched = subgroup_allreduce(n, 4 * k, g, chosen)
    # every member of a coset group ends with the sum over its coset, not over all ranks
    assert sched.checks[0].groups == [list(range(s, n, n // g)) for s in range(n // g)]
    assert_reduces(sched, seed)


@PROPS
@given(n=ranks, k=items, seed=seeds, seg=st.integers(min_value=1, max_value=64))
def test_tree_allreduce_reduces(n, k, seed, seg):
    assert_reduces(tree_allreduce(n, 4 * k, segment_bytes=4 * seg), seed)


@PROPS
@given(n=ranks, k=items, seed=seeds, seg=st.integers(min_value=1, max_value=64))
def test_dbtree_allreduce_reduces(n, k, seed, seg):
    assert_reduces(dbtree_allreduce(n, 4 * k, segment_bytes=4 * seg), seed)


@PROPS
@given(n=ranks, seed=seeds, data=st.data())
def test_p2p_transfers_copy(n, seed, data):
    pairs = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), st.integers(1, 300))
    transfers = [(s, d, 4 * b) for s, d, b in data.draw(st.lists(pairs, min_size=1, max_size=20)) if s != d]
    if not transfers:
        transfers = [(0, 1, 4)]
    assert_reduces(p2p_transfers(n, transfers), seed)


@pytest.mark.parametrize("n", range(2, 34))
def test_dbtree_trees_are_complementary(n):
    first, second = dbtree_parents(n)
    check_tree(first)
    check_tree(second)

    def inner(parents):
        return {p for p in parents if p >= 0}

    if n > 2:
        # NCCL's property: no rank is an inner node of both trees (the odd-n shift lets
        # exactly one rank, the wrap-around, be inner in both)
        assert len(inner(first) & inner(second)) <= n % 2
    assert max(len([c for c in first if c == p]) for p in range(n)) <= 2


def test_btree_matches_nccl_picture():
    # ncclGetBtree's 12-rank picture: 0 -> 8; 8 -> 4, 10; 4 -> 2, 6; 10 -> 9, 11
    parents = btree_parents(12)
    assert parents[8] == 0 and parents[4] == 8 and parents[10] == 8
    assert parents[2] == 4 and parents[6] == 4 and parents[9] == 10 and parents[11] == 10


def test_ring_sends_the_lower_bound():
    n, nbytes = 8, 4 * 8 * 1000
    sched = ring_allreduce(n, nbytes)
    assert sched.bytes_sent() == [2 * (n - 1) * nbytes // n] * n
    edges = {(e["src"], e["dst"]): e["bytes"] for e in sched.edge_bytes()}
    assert set(edges) == {(i, (i + 1) % n) for i in range(n)}


def test_topoopt_rings_use_every_direction_of_both_strides():
    sched = multiring_allreduce(12, 4 * 12 * 400, topoopt_rings(12, [1, 5]))
    pairs = {(e["src"], e["dst"]) for e in sched.edge_bytes()}
    expected = {(i, (i + s) % 12) for i in range(12) for s in (1, 11, 5, 7)}
    assert pairs == expected
    # each rank sends 2(n-1)/n of the buffer in total, a quarter on each of its 4 links
    assert sched.bytes_sent() == [2 * 11 * 4 * 400] * 12


def test_json_round_trip():
    sched = dbtree_allreduce(7, 4 * 100, segment_bytes=64)
    again = Schedule.from_json(sched.to_json())
    assert again.to_dict() == sched.to_dict()
    assert json.loads(sched.to_json())["format"] == "topolab.schedule/1"


def test_simulator_reports_deadlock():
    b = ScheduleBuilder(2, "bad")
    b.buffer("grad", 16)
    b.recv(0, "s", 1, "grad", 0, 16, tag=1)
    b.recv(1, "s", 0, "grad", 0, 16, tag=1)
    with pytest.raises(ScheduleError, match="deadlock"):
        simulate_schedule(b.build())


def test_simulator_reports_length_mismatch():
    b = ScheduleBuilder(2, "bad")
    b.buffer("grad", 16)
    b.send(0, "s", 1, "grad", 0, 8, tag=1)
    b.recv(1, "s", 0, "grad", 0, 16, tag=1)
    with pytest.raises(ScheduleError, match="expects 16 bytes"):
        simulate_schedule(b.build())


def test_verify_catches_a_wrong_schedule():
    d = ring_allreduce(4, 4 * 40).to_dict()
    # turn one reduce-scatter step into a copy: that chunk loses a contribution
    op = next(op for op in d["programs"][2]["ring0"] if op["op"] == "recv")
    op["mode"] = "copy"
    sched = Schedule.from_dict(d)
    inputs = make_inputs(sched, seed=1)
    problems = verify(sched, inputs, simulate_schedule(sched, inputs, seed=1).buffers)
    assert problems and "expected" in problems[0]


def test_validate_names_the_problem():
    b = ScheduleBuilder(2, "bad")
    b.buffer("grad", 16)
    b.send(0, "s", 1, "grad", 2, 4, tag=1)
    with pytest.raises(ValueError, match="not aligned"):
        b.build()
    b = ScheduleBuilder(2, "bad")
    b.buffer("grad", 16)
    b.send(0, "s", 5, "grad", 0, 4, tag=1)
    with pytest.raises(ValueError, match="bad peer 5"):
        b.build()


def test_extend_numbers_ops_after_the_ranks_ops_so_far():
    b = ScheduleBuilder(2, "extend")
    b.buffer("grad", 16)
    first = b.send(0, "a", 1, "grad", 0, 4, tag=1)
    ops = [Op(99, "send", 1, "grad", 4, 4, 1), Op(99, "recv", 1, "grad", 8, 4, 2, "copy", after=(first,))]
    assert b.extend(0, "b", ops) == 1
    assert b.compute(0, "a", 0.5) == 3
    assert [op.id for op in ops] == [1, 2]
    b.recv(1, "s", 0, "grad", 0, 4, tag=1)
    b.recv(1, "s", 0, "grad", 4, 4, tag=1)
    b.send(1, "s", 0, "grad", 8, 4, tag=2)
    sched = b.build()
    assert [op.id for op in sched.programs[0]["b"]] == [1, 2]
    assert [op.id for op in sched.programs[0]["a"]] == [0, 3]
    assert Schedule.from_json(sched.to_json()).to_dict() == sched.to_dict()
    assert sched.programs[0]["b"][1].to_dict()["after"] == [0]


def test_composed_iteration_with_compute_and_buckets():
    """The format carries a training iteration: backward compute, then bucketed
    AllReduces that wait on it, plus MP transfers, all in one schedule."""
    from planner.collectives import add_multiring_allreduce, add_p2p_transfers

    n = 6
    b = ScheduleBuilder(n, "iteration")
    b.buffer("grad", 4 * 600)
    rings = topoopt_rings(n, [1])
    mp = add_p2p_transfers(b, all_to_all(range(n), 4 * 10))
    for bucket in range(3):
        bwd = {r: [b.compute(r, "compute", 0.001, after=mp.get(r, []) if bucket == 0 else [])] for r in range(n)}
        add_multiring_allreduce(b, rings, "grad", 4 * 200 * bucket, 4 * 200, stream_prefix=f"b{bucket}r", after=bwd)
    b.check(Check("allreduce", "grad", 0, 4 * 600, groups=[list(range(n))]))
    sched = b.build()
    for seed in range(5):
        assert_reduces(sched, seed)


def test_inputs_are_exact_in_float32():
    sched = ring_allreduce(16, 4 * 1000)
    inputs = make_inputs(sched)
    assert np.all(inputs["grad"] == np.round(inputs["grad"]))
