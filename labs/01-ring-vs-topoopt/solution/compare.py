"""Exercise 1, reference solution: the planner's flow-level predictions."""

from pathlib import Path

from contract.physics import time_scale
from planner import build_plan, load_scenario
from planner.collectives.from_plan import allreduce_for_plan
from planner.predict import plan_network, predict

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def allreduce_seconds(nbytes: int) -> dict[str, float]:
    """Each setup's schedule predicted on its plan's network as it is emulated (cables at
    [emulation] link_mbps, TCP goodput at MTU 9000, routes, per-hop latency, the receivers'
    reduce rate), then divided by the time scale: the real cluster's seconds, as topolab
    run and topolab collective report them."""
    times = {}
    for setup, scenario, algorithm in (
        ("ring", "topoopt-12.toml", "ring"),
        ("topoopt", "topoopt-12.toml", "topoopt"),
        ("switch", "switch-12.toml", "ring"),
    ):
        loaded = load_scenario(str(SCENARIOS / scenario))
        plan = build_plan(loaded)
        link_mbps = loaded.emulation.link_mbps
        network = plan_network(plan, link_bps=link_mbps * 1e6)
        emulated_s = predict(allreduce_for_plan(plan, algorithm, nbytes), network).seconds
        times[setup] = emulated_s / time_scale(plan.link_gbps, link_mbps)
    return times
