"""A network's cable capacities, computed once (`contract.network.cable_capacities`): goodput
per direction, parallel cables summed, at the planned or the emulated rates; and the
planner's models read the same numbers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from contract.emulation import EmulatedRates
from contract.network import cable_capacities, connection_capacities
from contract.plan import Link
from planner.collectives.forest import plan_capacities
from planner.cost.costmodel.network import NetworkModel
from planner.cost.predict import plan_network
from planner.placement import plan_capacity
from tests.fixtures.sample_plans import circulant_plan

# two parallel 10 Gbit/s cables between 0 and 1, one 25 Gbit/s cable between 1 and 2
LINKS = (Link(0, 1, 10.0), Link(1, 0, 10.0), Link(1, 2, 25.0))
PAYLOAD_1500 = (1500 - 52) / (1500 + 14)  # (mtu - IPv4, TCP, timestamps) / (mtu + Ethernet header)


def test_parallel_cables_add_up_in_both_directions():
    caps = cable_capacities(LINKS, mtu=1500)
    assert set(caps) == {(0, 1), (1, 0), (1, 2), (2, 1)}
    assert caps[(0, 1)] == caps[(1, 0)] == pytest.approx(20e9 / 8 * PAYLOAD_1500)  # 2 x 10 Gbit/s
    assert caps[(1, 2)] == caps[(2, 1)] == pytest.approx(25e9 / 8 * PAYLOAD_1500)
    assert caps[(0, 1)] == pytest.approx(2_391_017_173, rel=1e-9)  # 2.5e9 B/s x 1448/1514, by hand


def test_one_connection_gets_one_of_parallel_cables():
    # a multipath route hashes a connection onto one cable: the fastest is the most it gets
    links = (*LINKS, Link(1, 2, 10.0))  # a slower cable beside the 25 Gbit/s one
    caps = connection_capacities(links, mtu=1500)
    assert set(caps) == {(0, 1), (1, 0), (1, 2), (2, 1)}  # edges of two cables only
    assert caps[(0, 1)] == caps[(1, 0)] == pytest.approx(10e9 / 8 * PAYLOAD_1500)
    assert caps[(1, 2)] == pytest.approx(25e9 / 8 * PAYLOAD_1500)
    assert cable_capacities(links, mtu=1500)[(1, 2)] == pytest.approx(35e9 / 8 * PAYLOAD_1500)
    assert connection_capacities(LINKS[2:], mtu=1500) == {}
    rates = EmulatedRates(reference_gbps=10.0, link_mbps=100.0, mtu=1500)
    assert rates.connection_capacities(links)[(2, 1)] == pytest.approx(250e6 / 8 * PAYLOAD_1500)


def test_emulated_rates_scale_every_cable_by_the_reference():
    # 10 Gbit/s stands for 100 Mbit/s: the parallel pair carries 2 x 100, the fast cable 250
    rates = EmulatedRates(reference_gbps=10.0, link_mbps=100.0, mtu=1500)
    assert rates.link_rate_bps(LINKS) == [100_000_000, 100_000_000, 250_000_000]
    caps = rates.capacities(LINKS)
    assert caps[(1, 0)] == pytest.approx(200e6 / 8 * PAYLOAD_1500)
    assert caps[(2, 1)] == pytest.approx(250e6 / 8 * PAYLOAD_1500)
    assert rates.time_scale == 100.0


def test_the_planner_models_read_the_same_capacities():
    plan = circulant_plan(6, (1, 2))
    plan = dataclasses.replace(plan, links=plan.links + (Link(0, 1, 25.0),))  # a parallel cable
    planned = cable_capacities(plan.links, 1500)
    emulated = EmulatedRates(plan.link_gbps, 100.0, 1500).capacities(plan.links)
    assert plan_network(plan, mtu=1500).capacity == planned
    assert plan_network(plan, link_bps=100e6, mtu=1500).capacity == emulated
    assert plan_capacities(plan, mtu=1500) == {(a, b): c for (a, b), c in planned.items() if a < b}
    model = NetworkModel(plan, mtu=1500)
    assert (
        model.capacity[model.link_id[0, 1]] == planned[(0, 1)] == pytest.approx(2 * 25e9 / 8 * PAYLOAD_1500)
    )  # stride 1 and the parallel one
    _rates, egress = plan_capacity(plan, 1500)
    assert np.allclose(egress, [sum(c for (a, _b), c in planned.items() if a == v) for v in range(plan.servers)])
    assert egress[0] == pytest.approx(5 * 25e9 / 8 * PAYLOAD_1500)  # four cables and the parallel one
