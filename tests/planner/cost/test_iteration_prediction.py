"""A plan is self-sufficient: saved as JSON and loaded in a fresh process with no scenario, it
gives the same iteration schedule and the same predicted time (`predict_iteration`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contract.errors import UsageError
from contract.plan import Plan, Workload
from planner import build_plan, parse_scenario
from planner.cost.iteration import IterationOptions, iteration_schedule
from planner.cost.iteration_prediction import NetworkArgs, predict_iteration

REPO = Path(__file__).resolve().parents[3]
# A job whose batch and device rate are not the defaults, with model-parallel tables, so a
# plan that lost any of its workload or placement would predict another time.
JOB = Workload(model="dlrm", batch_per_server=64, device_tflops=312.0)
OPTS = IterationOptions(time_scale=250.0, payload_scale=1e-2)
NETWORK = NetworkArgs(link_bps=100e6, mtu=1450, alpha_s=6.5e-6, op_overhead_s=2e-5, reduce_cap_bytes=256 << 10)

FRESH_PROCESS = """
import json, sys
from contract.plan import Plan
from planner.cost.iteration import IterationOptions
from planner.cost.iteration_prediction import predict_iteration

plan = Plan.from_json(open(sys.argv[1]).read())
opts, network = json.loads(sys.argv[2]), json.loads(sys.argv[3])
schedule, prediction = predict_iteration(plan, IterationOptions(**opts), **network)
print(json.dumps({"seconds": prediction.seconds, "ops": schedule.op_count()}))
"""


def _plan() -> Plan:
    return build_plan(
        parse_scenario(
            {
                "cluster": {"servers": 12, "degree": 4, "link_gbps": 25},
                "workload": {"model": JOB.model, "batch_per_server": JOB.batch_per_server, "device_tflops": 312},
                "parallelism": {"strategy": "hybrid"},
            }
        )
    )


def test_plan_carries_its_workload_through_json():
    plan = _plan()
    assert plan.workload == JOB and plan.model == "dlrm"
    again = Plan.from_json(plan.to_json())
    assert again.workload == JOB and again == plan


def test_a_saved_plan_predicts_the_same_iteration_in_a_fresh_process(tmp_path):
    plan = _plan()
    assert plan.placement.tables  # the tables' placement is part of what must travel
    schedule, prediction = predict_iteration(plan, OPTS, **NETWORK)
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(path), json.dumps(OPTS.__dict__), json.dumps(NETWORK)],
        cwd=tmp_path,  # no scenarios/ folder here: only the plan file
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    fresh = json.loads(out.stdout)
    assert fresh["ops"] == schedule.op_count()
    assert fresh["seconds"] == prediction.seconds  # the same time, to the last bit
    other = predict_iteration(plan, OPTS, **{**NETWORK, "link_bps": 50e6})[1]
    assert other.seconds != prediction.seconds  # the network arguments are what the caller gives


def test_a_plan_without_a_workload_has_no_iteration():
    old = json.loads(_plan().to_json())
    del old["workload"]  # a plan written before plans recorded their workload
    plan = Plan.from_dict(old)
    assert plan.workload is None and plan.model == ""
    with pytest.raises(UsageError, match="records no workload"):
        iteration_schedule(plan)
