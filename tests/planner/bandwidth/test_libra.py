"""LIBRA allocation: closed forms, agreement with an exhaustive grid search, speed, errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from contract.errors import UsageError
from planner.bandwidth.libra import (
    Collective,
    Workload,
    allocate,
    allreduce_workload,
    collective_bytes,
    model_seconds,
)

MIB = 1 << 20


def test_allreduce_bytes_follow_the_shrinking_message():
    a = collective_bytes([4, 3], Collective("allreduce", 12.0))
    assert a.tolist() == pytest.approx([2 * 12 * 3 / 4, 2 * 3 * 2 / 3])
    assert collective_bytes([4, 3], Collective("all_to_all", 12.0)).tolist() == pytest.approx([9.0, 8.0])
    assert collective_bytes([4, 3], Collective("reduce_scatter", 12.0, dims=(1,))).tolist() == [0.0, 8.0]


def test_closed_forms_for_the_12_server_fc_x_ring():
    w = allreduce_workload(64 * MIB)
    pipe = allocate([4, 3], w, 0.4, mode="pipelined")
    seq = allocate([4, 3], w, 0.4, mode="sequential")
    # a_1 / a_2 = 4.5: pipelined B ~ a (327/73 Mbit/s), sequential B ~ sqrt(a) (272/128)
    assert [g * 1e3 for g in pipe.gbps] == pytest.approx([327.27, 72.73], abs=0.01)
    assert [g * 1e3 for g in seq.gbps] == pytest.approx([271.85, 128.15], abs=0.01)
    assert pipe.seconds == pytest.approx(2.4607, abs=1e-3)
    equal = model_seconds(pipe.dimension_bytes, [0.2, 0.2], "pipelined")
    assert equal / pipe.seconds == pytest.approx(1.636, abs=1e-3)


def _grid_optimum(a, mode, total, lo, hi, price, compute, objective, rounds=4, points=40):
    """Exhaustive search over a grid of the first D-1 bandwidths (the last one takes the
    rest of the budget), zooming into the best cell ``rounds`` times."""
    d = len(a)
    centre, width = None, None
    best_val, best_b = np.inf, None
    for _ in range(rounds):
        axes = []
        for k in range(d - 1):
            low, high = (
                (lo[k], hi[k])
                if centre is None
                else (max(lo[k], centre[k] - width[k]), min(hi[k], centre[k] + width[k]))
            )
            axes.append(np.linspace(low, high, points))
        grid = np.array(np.meshgrid(*axes, indexing="ij")).reshape(d - 1, -1).T
        last = total - grid.sum(axis=1)
        b = np.column_stack([grid, last])
        ok = (last >= lo[-1]) & (last <= hi[-1]) & (b > 0).all(axis=1)
        b = b[ok]
        t = a[None, :] * 8 / (b * 1e9)
        val = compute + (t.max(axis=1) if mode == "pipelined" else t.sum(axis=1))
        if objective == "time_x_cost":
            val = val * (b @ price)
        i = int(np.argmin(val))
        if val[i] < best_val:
            best_val, best_b = float(val[i]), b[i]
        centre = best_b
        width = [2 * (axes[k][1] - axes[k][0]) for k in range(d - 1)]
    return best_val, best_b


CASES = [
    (seed, mode, obj) for seed in range(6) for mode in ("pipelined", "sequential") for obj in ("time", "time_x_cost")
]


@pytest.mark.parametrize(("seed", "mode", "objective"), CASES)
def test_within_half_a_percent_of_the_grid_optimum(seed, mode, objective):
    rng = np.random.default_rng(seed)
    ndim = 2 + seed % 3
    dims = [int(x) for x in rng.integers(2, 9, size=ndim)]
    collectives = [Collective("allreduce", float(rng.uniform(10, 500)) * MIB)]
    if seed % 2:
        span = tuple(sorted(rng.choice(ndim, size=2, replace=False).tolist()))
        collectives.append(
            Collective(str(rng.choice(["all_to_all", "reduce_scatter"])), float(rng.uniform(10, 200)) * MIB, span, 2)
        )
    workload = Workload(tuple(collectives), compute_s=float(rng.uniform(0, 0.5)))
    total = 100.0
    lo = np.full(ndim, 2.0) if seed % 3 == 0 else np.zeros(ndim)
    hi = np.full(ndim, 80.0) if seed % 3 == 1 else np.full(ndim, total)
    price = rng.uniform(1, 5, size=ndim)
    result = allocate(
        dims,
        workload,
        total,
        mode=mode,
        objective=objective,
        price=price.tolist(),
        lower=lo.tolist(),
        upper=hi.tolist(),
    )
    a = np.array(result.dimension_bytes)
    ours = model_seconds(a, result.gbps, mode, workload.compute_s)
    if objective == "time_x_cost":
        ours *= float(np.dot(price, result.gbps))
    grid, _ = _grid_optimum(a, mode, total, lo, hi, price, workload.compute_s, objective)
    assert sum(result.gbps) == pytest.approx(total)
    assert all(l - 1e-9 <= g <= h + 1e-9 for g, l, h in zip(result.gbps, lo, hi))
    assert ours <= grid * (1 + 1e-6)
    assert abs(ours / grid - 1) <= 0.005


# Objective evaluations of one allocation (brentq's and SLSQP's): 15-17 for the time
# objective, 450-860 for time x cost (four SLSQP starts), whatever the number of servers.
MAX_EVALUATIONS = 1500


def test_4d_allocation_work_does_not_grow_with_the_servers(monkeypatch):
    workload = Workload(
        (
            Collective("allreduce", 2e9),
            Collective("all_to_all", 3e8, dims=(0, 1), count=4),
            Collective("reduce_scatter", 5e8, dims=(2, 3)),
        ),
        compute_s=0.2,
    )
    calls = 0

    def counted(f):
        def g(*args):
            nonlocal calls
            calls += 1
            return f(*args)

        return g

    import scipy.optimize  # libra imports its solvers from here when it solves

    real_brentq, real_minimize = scipy.optimize.brentq, scipy.optimize.minimize
    monkeypatch.setattr(scipy.optimize, "brentq", lambda f, *a, **kw: real_brentq(counted(f), *a, **kw))
    monkeypatch.setattr(scipy.optimize, "minimize", lambda f, *a, **kw: real_minimize(counted(f), *a, **kw))
    for dims in ([2, 2, 2, 2], [8, 8, 8, 8], [64, 64, 64, 64]):  # 16, 4096 and 16.8 million servers
        for mode, objective in itertools.product(("pipelined", "sequential"), ("time", "time_x_cost")):
            calls = 0
            result = allocate(dims, workload, 400.0, mode=mode, objective=objective, price=[1, 2, 3, 4])
            assert 0 < calls <= MAX_EVALUATIONS, (dims, mode, objective, calls)
            assert sum(result.gbps) == pytest.approx(400.0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"mode": "eager"}, "allocation.mode"),
        ({"objective": "cost"}, "allocation.objective"),
        ({"lower": [300, 300]}, "allocation bounds"),
        ({"price": [1]}, "allocation.price"),
    ],
)
def test_bad_inputs_name_the_field(kwargs, field):
    with pytest.raises(UsageError, match=field):
        allocate([4, 3], allreduce_workload(MIB), 400.0, **kwargs)
    with pytest.raises(UsageError, match="topology.dims"):
        allocate([4, 1], allreduce_workload(MIB), 400.0)
