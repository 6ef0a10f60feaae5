"""The price model and the similar-cost Fat-tree (docs/algorithms.md section 8)."""

import pytest

from planner import parse_scenario
from planner.cost.costmodel.baselines import network_scenario
from planner.cost.costmodel.price import PriceModel, similar_cost_fattree_gbps


def test_direct_connect_bill_of_materials():
    p = PriceModel()
    n, d = 128, 8
    per_port = p.nic_port[100.0] + p.transceiver[100.0] + p.patch_panel_port
    assert p.direct_connect(n, d, 100) == pytest.approx(n * d * per_port + n * d / 2 * p.fibre)


def test_fattree_tiers_and_ports():
    p = PriceModel(switch_radix=64)
    cost, ports = p.fattree_ports(128, 100)
    assert ports == {100.0: 1}
    assert p.tiers(128, 1) == 2 and p.tiers(32, 1) == 1 and p.tiers(4096, 1) == 3
    per_port = p.nic_port[100.0] + 4 * p.transceiver[100.0] + 3 * p.switch_port[100.0] + 2 * p.fibre
    assert cost == pytest.approx(128 * per_port)
    assert p.fattree(128, 300) > p.fattree(128, 200) > p.fattree(128, 100)


@pytest.mark.parametrize("d,b", [(4, 100), (8, 100), (8, 25), (6, 200)])
def test_similar_cost_fattree_is_the_fastest_affordable(d, b):
    p = PriceModel()
    x, cost, budget = similar_cost_fattree_gbps(128, d, b, p)
    assert cost <= budget
    assert p.fattree(128, x + 5) > budget  # the next step of the sweep is too expensive
    assert x < d * b  # at these prices switching costs more than patching


def test_prices_from_json_data_and_errors():
    p = PriceModel.from_dict(
        {"patch_panel_port": 50, "nic_port": {"10": 1, "25": 2, "40": 3, "100": 4, "200": 5, "400": 6}}
    )
    assert p.patch_panel_port == 50.0 and p.nic_port[100.0] == 4.0
    with pytest.raises(ValueError, match="unknown price key"):
        PriceModel.from_dict({"ocs_port": 520})
    with pytest.raises(ValueError, match="same speeds"):
        PriceModel.from_dict({"nic_port": {"100": 400}})
    assert PriceModel.from_dict(PriceModel().to_dict()) == PriceModel()


def test_network_scenarios():
    base = parse_scenario(
        {"cluster": {"servers": 128, "degree": 8, "link_gbps": 100, "latency_us": 1}, "workload": {"model": "bert"}}
    )
    ft = network_scenario(base, "fattree")
    assert ft.scenario.topology.kind == "switch" and ft.scenario.topology.switch_gbps == ft.per_server_gbps
    assert ft.scenario.cluster.latency_us == 2.0
    sw = network_scenario(base, "switch")
    assert sw.per_server_gbps == 800 and sw.scenario.topology.switch_gbps == 800
    assert network_scenario(base, "topoopt").scenario.parallelism.strategy == "search"
    with pytest.raises(ValueError):
        network_scenario(base, "dragonfly")
