"""The job collectives beside AllReduce (planner.collectives.phases), executed by the
data-level simulator: every rank ends with exactly what the collective promises."""

import numpy as np
import pytest

from planner.collectives.phases import direct_alltoall, ring_allgather, ring_broadcast, ring_reduce_scatter
from planner.collectives.rings import topoopt_rings
from planner.collectives.simulate import make_inputs, simulate_and_verify, simulate_schedule

CASES = [(1, None), (4, None), (6, [1.0, 1.0, 3.0, 3.0]), (12, None)]


def rings_for(n: int, weights):
    return topoopt_rings(n, [1, 5]) if n == 12 else (topoopt_rings(n, [1]) * (2 if weights else 1))[:4]


@pytest.mark.parametrize(("n", "weights"), CASES)
def test_allgather_and_broadcast_pass_their_checks(n, weights):
    rings = rings_for(n, weights)
    w = weights[: len(rings)] if weights else None
    assert simulate_and_verify(ring_allgather(n, 4 * 37, rings, w)) == []
    for root in {0, n - 1}:
        sched = ring_broadcast(n, 4 * 1000, root, rings, w)
        assert simulate_and_verify(sched) == []
        assert len(sched.checks) == n - 1


@pytest.mark.parametrize(("n", "weights"), CASES)
def test_reduce_scatter_leaves_each_rank_its_slot_summed(n, weights):
    rings = rings_for(n, weights)
    slot = 4 * 29
    sched = ring_reduce_scatter(n, slot, rings, weights[: len(rings)] if weights else None)
    inputs = make_inputs(sched, seed=3)
    final = simulate_schedule(sched, inputs, seed=3).buffers["buf"]
    total = inputs["buf"].sum(axis=0)
    items = slot // 4
    for r in range(n):
        assert np.array_equal(final[r, r * items : (r + 1) * items], total[r * items : (r + 1) * items])


def test_alltoall_moves_slot_d_of_s_to_slot_s_of_d():
    n, slot = 5, 4 * 3
    sched = direct_alltoall(n, slot)
    inputs = make_inputs(sched, seed=1)
    final = simulate_schedule(sched, inputs, seed=1).buffers["out"]
    items = slot // 4
    for s in range(n):
        for d in range(n):
            if s != d:
                assert np.array_equal(
                    final[d, s * items : (s + 1) * items], inputs["in"][s, d * items : (d + 1) * items]
                )


def test_bad_rings_and_roots_are_refused():
    with pytest.raises(ValueError, match="permutation"):
        ring_allgather(3, 4, [[0, 1]])
    with pytest.raises(ValueError, match="root"):
        ring_broadcast(3, 4, 3, [[0, 1, 2]])
