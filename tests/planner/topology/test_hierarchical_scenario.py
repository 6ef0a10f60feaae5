"""Hierarchical networks from scenario files: the list keys, their one-line errors, the
allocation stored in the plan, and the iteration and collective schedules on the plan."""

from __future__ import annotations

import pytest

from planner import build_plan
from planner.bandwidth.libra import allocate, allreduce_workload
from planner.collectives import simulate_and_verify
from planner.collectives.from_plan import allreduce_for_plan
from planner.collectives.hierarchical import PIPELINE_CHUNKS, pipeline_chunks
from planner.cost.iteration import IterationOptions, iteration_schedule
from planner.scenario import HIERARCHICAL_LISTS, load_scenario, parse_scenario, with_overrides
from planner.topology.hierarchical import BLOCKS, HierarchicalInputError, demand_workload, layout_span
from topolab.cli import main

BASE = """[cluster]
servers = 12
[parallelism]
strategy = "data"
[topology]
kind = "hierarchical"
dims = [4, 3]
blocks = ["fc", "ring"]
budget_gbps = 100
"""


def _scenario(text: str, tmp_path, name: str = "h.toml"):
    path = tmp_path / name
    path.write_text(text)
    return load_scenario(path)


def test_list_keys_parse_and_budgets_resolve(tmp_path):
    s = _scenario(BASE + "allocation = [0.7, 0.3]\n[emulation]\nbudget_mbps = 400\n", tmp_path)
    t = s.topology
    assert (t.dims, t.blocks, t.allocation, t.budget_gbps) == ((4, 3), ("fc", "ring"), (0.7, 0.3), 100.0)
    assert s.emulation.link_mbps == 400.0  # the emulated budget per server drives the emulator
    again = with_overrides(s, topology={"allocation": "equal"})  # round trip as compare/sweep do it
    assert again.topology.allocation == "equal" and again.topology.dims == (4, 3)


def test_default_budget_is_degree_times_link_rate():
    data = {
        "cluster": {"servers": 12, "degree": 4, "link_gbps": 25},
        "parallelism": {"strategy": "data"},
        "topology": {"kind": "hierarchical", "dims": [4, 3], "blocks": ["fc", "ring"]},
    }
    assert parse_scenario(data).topology.budget_gbps == 100.0


def test_scenario_blocks_are_the_networks_blocks():
    from planner import scenario

    assert scenario.HIERARCHICAL_KEYS[: len(HIERARCHICAL_LISTS)] == tuple(HIERARCHICAL_LISTS)
    data = {"cluster": {"servers": 6}, "topology": {"kind": "hierarchical", "dims": [2, 3]}}
    for block in BLOCKS:  # every block the network builder knows is accepted
        data["topology"]["blocks"] = [block, block]
        data["parallelism"] = {"strategy": "data"}
        assert parse_scenario(data).topology.blocks == (block, block)


BAD = [
    ("product != servers", BASE.replace("[4, 3]", "[4, 4]"), "topology.dims"),
    (
        "dimension of size 1",
        BASE.replace("servers = 12", "servers = 4").replace("[4, 3]", "[4, 1]"),
        "topology.dims[1]",
    ),
    ("unknown block", BASE.replace('"ring"]', '"mesh"]'), "topology.blocks[1]"),
    ("blocks count", BASE.replace('["fc", "ring"]', '["fc"]'), "topology.blocks"),
    ("fractions sum", BASE + "allocation = [0.5, 0.6]\n", "topology.allocation"),
    ("fraction count", BASE + "allocation = [1.0]\n", "topology.allocation"),
    ("negative fraction", BASE + "allocation = [1.5, -0.5]\n", "topology.allocation"),
    ("allocation name", BASE + 'allocation = "best"\n', "topology.allocation"),
    ("allocation number", BASE + "allocation = 0.5\n", "topology.allocation"),
    ("dims a number", BASE.replace("dims = [4, 3]", "dims = 12"), "topology.dims"),
    ("dims of strings", BASE.replace("[4, 3]", '["4", "3"]'), "topology.dims[0]"),
    ("dims of floats", BASE.replace("[4, 3]", "[4.0, 3.0]"), "topology.dims[0]"),
    ("dims empty", BASE.replace("[4, 3]", "[]"), "topology.dims"),
    ("list for a number", BASE.replace("budget_gbps = 100", "budget_gbps = [60, 40]"), "topology.budget_gbps"),
    ("budget_mbps list", BASE + "[emulation]\nbudget_mbps = [400]\n", "emulation.budget_mbps"),
    ("blocks a string", BASE.replace('["fc", "ring"]', '"fc"'), "topology.blocks"),
    ("schedule", BASE + 'schedule = "parallel"\n', "topology.schedule"),
    ("objective", BASE + 'objective = "cost"\n', "topology.objective"),
    ("price without objective", BASE + "price_per_gbps = [1.0, 2.0]\n", "topology.price_per_gbps"),
    ("price count", BASE + 'objective = "time_x_cost"\nprice_per_gbps = [1.0]\n', "topology.price_per_gbps"),
    ("price zero", BASE + 'objective = "time_x_cost"\nprice_per_gbps = [1.0, 0]\n', "topology.price_per_gbps"),
    ("dims missing", BASE.replace("dims = [4, 3]\n", ""), "topology.dims"),
    ("dims on topoopt", "[topology]\ndims = [4, 3]\n", "topology.dims"),
    ("budget_mbps on topoopt", "[emulation]\nbudget_mbps = 400\n", "emulation.budget_mbps"),
    ("search", BASE.replace('"data"', '"search"'), "parallelism.strategy"),
    (
        "mp groups not whole dimensions",
        BASE.replace('strategy = "data"', 'strategy = "hybrid"\nmp_degree = 2') + '[workload]\nmodel = "bert"\n',
        "parallelism.mp_degree",
    ),
    ("link_mbps and budget_mbps", BASE + "[emulation]\nlink_mbps = 100\nbudget_mbps = 400\n", "emulation.link_mbps"),
]


@pytest.mark.parametrize("text,key", [pytest.param(t, k, id=i) for i, t, k in BAD])
def test_bad_input_is_one_line_naming_the_key(tmp_path, capsys, text, key):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{path}: {key}" in err, err


def test_plan_stores_libra_equal_and_the_chosen_split(tmp_path):
    s = _scenario(BASE, tmp_path)
    plan = build_plan(s)
    alloc = plan.extra["allocation"]
    nbytes = plan.demand.allreduce_bytes
    libra = allocate([4, 3], allreduce_workload(nbytes), 100.0)
    assert alloc["libra"]["shares"] == pytest.approx(libra.shares)
    assert alloc["shares"] == pytest.approx(libra.shares) and alloc["choice"] == "libra"
    # pipelined: B_d proportional to a_d = 2 S (p-1)/p over the shrinking message (1.5 S : S/3)
    assert alloc["shares"][0] / alloc["shares"][1] == pytest.approx(4.5)
    assert alloc["equal"]["shares"] == [0.5, 0.5]
    assert alloc["equal"]["model_s"] / alloc["libra"]["model_s"] == pytest.approx(3.0 / (1.5 + 1 / 3))
    rates = {round(link.gbps, 6) for link in plan.links}  # fc cables: B_0/3, ring cables: B_1/2
    assert rates == {round(100 * alloc["shares"][0] / 3, 6), round(100 * alloc["shares"][1] / 2, 6)}
    fixed = build_plan(with_overrides(s, topology={"allocation": [0.6, 0.4]}))
    assert fixed.extra["allocation"]["shares"] == [0.6, 0.4] and fixed.extra["allocation"]["choice"] == "fractions"


def test_hybrid_workload_spans_the_groups_dimensions(tmp_path):
    text = BASE.replace('strategy = "data"', 'strategy = "hybrid"\nmp_degree = 4') + '[workload]\nmodel = "bert"\n'
    plan = build_plan(_scenario(text, tmp_path))
    workload = demand_workload([4, 3], plan.demand)
    spans = {(c.kind, c.dims) for c in workload.collectives}
    # sharded layers' replicas over dimension 1, the rest over both, model-parallel in dimension 0
    assert spans == {("allreduce", (0, 1)), ("allreduce", (1,)), ("all_to_all", (0,))}
    assert layout_span([4, 3], 4) == (1,) and layout_span([4, 3], 1) == (0, 1)
    with pytest.raises(HierarchicalInputError):
        layout_span([4, 3], 2)
    # the model-parallel bytes make dimension 0 weigh more than for the AllReduce alone
    assert plan.extra["allocation"]["shares"][0] > 0.5


@pytest.mark.parametrize("schedule", ["pipelined", "sequential"])
def test_iteration_uses_the_hierarchical_allreduce_and_verifies(tmp_path, schedule):
    text = BASE.replace('strategy = "data"', 'strategy = "hybrid"\nmp_degree = 4') + f'schedule = "{schedule}"\n'
    text += '[workload]\nmodel = "bert"\nbatch_per_server = 2\n'
    plan = build_plan(_scenario(text, tmp_path))
    sched = iteration_schedule(plan, IterationOptions(payload_scale=2e-3))
    streams = {s for prog in sched.programs for s in prog}
    assert {"d0.rs", "d1.rs.cw", "d1.rs.ccw", "d1.ag.cw", "d0.ag"} <= streams
    assert not any(s.startswith("ar") for s in streams)  # no flat rings on a hierarchical plan
    assert simulate_and_verify(sched) == []


def test_collective_adapter_runs_the_plans_schedule(tmp_path):
    plan = build_plan(_scenario(BASE, tmp_path))
    sched = allreduce_for_plan(plan, "hierarchical", 1 << 20)
    assert sched.params["chunks"] == PIPELINE_CHUNKS and simulate_and_verify(sched) == []
    seq = build_plan(_scenario(BASE + 'schedule = "sequential"\n', tmp_path, "s.toml"))
    assert allreduce_for_plan(seq, "hierarchical", 1 << 20).params["chunks"] == 1
    flat = build_plan(_scenario("[cluster]\nservers = 12\n", tmp_path, "t.toml"))  # one dimension of 12
    one_d = allreduce_for_plan(flat, "hierarchical", 1 << 20)
    assert one_d.params["dims"] == [12] and simulate_and_verify(one_d) == []
    assert pipeline_chunks(100) == 1 and pipeline_chunks(1 << 30) == PIPELINE_CHUNKS


def test_shipped_scenarios_plan():
    for name in ("hierarchical-12", "hierarchical-bert-12"):
        s = load_scenario(f"scenarios/{name}.toml")
        plan = build_plan(s)
        assert plan.topology == "hierarchical" and plan.servers == 12
        assert s.emulation.link_mbps == 400.0 and plan.link_gbps == 100.0
