"""Checker of exercise 7: the student's predicted step gain of the plan's rings over Gloo's
one ring, for DDP's buckets on the 12-server prototype at 100 Mbit/s per cable, against the
flow-level model (planner.cost.predict) of the two schedules topolab train predicts with
(topolab.train.schedules: the plan's AllReduce, and Gloo's ring in rank order). With
--emulate (root) the CNN example trains with both backends on the emulated network and the
measured step gain is compared too."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from contract.emulation import EmulatedRates
from contract.physics import DEFAULT_MTU
from planner import build_plan, load_scenario
from topolab.train.schedules import ScheduleService

TITLE = "Train over TopoOpt: the plan's collectives vs Gloo's ring"
STUDENT_FILE = "gain.py"
FUNCTIONS = ("step_gain_seconds(bucket_bytes, servers, rings, cable_bps, mtu)",)
HINT = (
    "a ring AllReduce sends 2(n-1)S/n per rank, at the TCP goodput of a cable, and the plan's "
    "rings each carry 1/rings of the bucket at once while Gloo's one ring carries all of it"
)
REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "scenarios" / "topoopt-12.toml"
EMULATED_MBPS = 100.0
MTU = DEFAULT_MTU
CASES = [[968488], [1 << 20, 25 << 20, 25 << 20], [64 << 20]]  # the CNN's one bucket; DDP's caps; one big one
WITHIN = 0.10  # of the model's gain
MEASURED_WITHIN = 0.35  # the emulated step also has compute and the ranks' software on 2 cores


def model_gain(service: ScheduleService, buckets: list[int]) -> float:
    made = [service.get({"kind": "allreduce", "count": b // 4, "itemsize": 4}) for b in buckets]
    return sum(m.gloo_predicted_s - m.predicted_s for m in made)


def check(student, emulate: bool) -> list[str]:
    plan = build_plan(load_scenario(str(SCENARIO)))
    service = ScheduleService(plan, EmulatedRates(plan.link_gbps, EMULATED_MBPS, MTU))
    rings = len(service.get({"kind": "allreduce", "count": 1024, "itemsize": 4}).programs[0])
    problems = []
    for buckets in CASES:
        want = model_gain(service, buckets)
        got = float(student.step_gain_seconds(list(buckets), plan.servers, rings, EMULATED_MBPS * 1e6, MTU))
        print(f"  buckets {buckets}: your gain {got:.4f} s, the model's {want:.4f} s (emulated)")
        if abs(got / want - 1) > WITHIN:
            problems.append(
                f"buckets {buckets}: {got:.4f} s is {got / want:.2f}x the model's {want:.4f} s (within {WITHIN:.0%})"
            )
    if emulate and not problems:
        problems += check_emulated(student, plan, rings)
    return problems


def check_emulated(student, plan, rings: int) -> list[str]:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "topolab", "train", str(SCENARIO), "--backend", "topolab,gloo", "--out", out]
        cmd += ["--force", "--", sys.executable, str(REPO / "examples" / "train" / "cnn.py"), "--steps", "12"]
        env = dict(os.environ, PYTHONPATH=str(REPO))
        if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode != 0:
            return ["topolab train failed (see its message above)"]
        doc = json.loads((Path(out) / "results.json").read_text())
    measured = doc["comparison"]["measured_s"]
    buckets = [row["bytes"] for row in doc["jobs"]["topolab"]["sizes"] if row["kind"] == "allreduce"]
    got = float(student.step_gain_seconds(buckets, plan.servers, rings, EMULATED_MBPS * 1e6, MTU))
    print(
        f"  emulated: steps gloo {doc['jobs']['gloo']['step_s']:.3f} s, topolab {doc['jobs']['topolab']['step_s']:.3f} s"
    )
    print(f"  measured gain {measured:.3f} s, yours {got:.3f} s")
    if abs(measured / got - 1) > MEASURED_WITHIN:
        return [f"measured gain {measured:.3f} s is {measured / got:.2f}x yours (within {MEASURED_WITHIN:.0%})"]
    return []
