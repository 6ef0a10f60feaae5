"""Multi-ring AllReduce split by each ring's bottleneck rate on cables of different rates."""

from __future__ import annotations

import dataclasses

import pytest

from planner import build_plan, load_scenario
from planner.collectives.from_plan import allreduce_for_plan, allreduce_rings, choose_allreduce, ring_weights
from planner.collectives.rings import multiring_allreduce
from planner.collectives.simulate import simulate_and_verify
from planner.cost.predict import plan_network, predict


def stride_plan(stride: int, factor: float):
    """topoopt-12 with every cable of ``stride`` at ``factor`` of its rate."""
    plan = build_plan(load_scenario("scenarios/topoopt-12.toml"))
    n = plan.servers
    links = tuple(
        dataclasses.replace(link, gbps=link.gbps * factor) if (link.b - link.a) % n in (stride, n - stride) else link
        for link in plan.links
    )
    return dataclasses.replace(plan, links=links)


def test_weights_are_the_rings_bottleneck_rates():
    plan = stride_plan(5, 0.25)
    rings = allreduce_rings(plan)
    steps = [(ring[1] - ring[0]) % plan.servers for ring in rings]
    weights = ring_weights(plan, rings)
    assert weights == [25.0 if step in (1, 11) else 6.25 for step in steps]
    assert choose_allreduce(plan, 1 << 20, algorithm="topoopt").weights == (tuple(weights),)
    assert choose_allreduce(stride_plan(5, 1.0), 1 << 20, algorithm="topoopt").weights == (
        None,
    )  # TopoOpt's equal split


def test_a_slow_cable_slows_only_the_rings_through_it():
    plan = stride_plan(1, 1.0)
    links = tuple(dataclasses.replace(lk, gbps=5.0) if {lk.a, lk.b} == {0, 1} else lk for lk in plan.links)
    plan = dataclasses.replace(plan, links=links)
    rings = allreduce_rings(plan)
    weights = ring_weights(plan, rings)
    through = [any({r[i], r[(i + 1) % len(r)]} == {0, 1} for i in range(len(r))) for r in rings]
    assert [w for w, t in zip(weights, through) if t] == [5.0] * sum(through)
    assert [w for w, t in zip(weights, through) if not t] == [25.0] * (len(rings) - sum(through))


def test_weighted_split_reduces_and_is_predicted_over_twice_as_fast():
    plan = stride_plan(5, 0.25)
    weighted = allreduce_for_plan(plan, "topoopt", 1 << 20)
    assert weighted.params["weights"] == ring_weights(plan, allreduce_rings(plan))
    assert simulate_and_verify(weighted) == []
    equal = multiring_allreduce(plan.servers, 1 << 20, allreduce_rings(plan))
    net = plan_network(plan, 100e6)
    assert predict(equal, net).seconds / predict(weighted, net).seconds == pytest.approx(2.5, rel=0.05)
