"""``[[cables]]``: cables with their own planned rate (heterogeneous networks), in the plan,
the prediction and (emulated at the same scale) the emulator's shaping."""

import pytest

from planner import build_plan, parse_scenario
from planner.cost.predict import plan_network
from planner.scenario import ScenarioError

BASE = {"cluster": {"servers": 12, "degree": 4, "link_gbps": 25}, "topology": {"kind": "topoopt"}}
SLOW = [{"a": 0, "b": 1, "gbps": 5}, {"a": 7, "b": 8, "gbps": 5}, {"a": 4, "b": 9, "gbps": 5}]


def test_overrides_reach_the_plan_and_the_prediction():
    plan = build_plan(parse_scenario({**BASE, "cables": SLOW}))
    slow = {(min(link.a, link.b), max(link.a, link.b)) for link in plan.links if link.gbps == 5}
    assert slow == {(0, 1), (7, 8), (4, 9)}
    assert all(link.gbps == 25 for link in plan.links if (min(link.a, link.b), max(link.a, link.b)) not in slow)
    net = plan_network(plan, link_bps=100e6)  # emulated: 25 Gbit/s -> 100 Mbit/s, so 5 -> 20
    assert net.capacity[(0, 1)] == pytest.approx(net.capacity[(1, 2)] / 5)


@pytest.mark.parametrize(
    "cables, key",
    [
        ([{"a": 0, "b": 2, "gbps": 5}], "cables[0]"),  # no such cable in the plan (i+-1, i+-5)
        ([{"a": 0, "b": 1, "gbps": 0}], "cables[0].gbps"),
        ([{"a": 0, "b": 1, "gbps": -3}], "cables[0].gbps"),
        ([{"a": 0, "b": 12, "gbps": 5}], "cables[0].b"),
        ([{"a": 3, "b": 3, "gbps": 5}], "cables[0].b"),
        ([{"a": 0, "b": 1, "gbps": 5}, {"a": 1, "b": 0, "gbps": 7}], "cables[1]"),
        ([{"a": 0, "b": 1}], "cables[0].gbps"),
        ([{"a": 0, "b": 1, "gbps": 5, "speed": 1}], "cables[0].speed"),
        ([{"a": "0", "b": 1, "gbps": 5}], "cables[0].a"),
    ],
)
def test_bad_overrides_name_the_entry(cables, key):
    with pytest.raises(ScenarioError) as err:
        build_plan(parse_scenario({**BASE, "cables": cables}))
    assert err.value.key == key and "\n" not in str(err.value)
