"""`topolab train` and the topolab backend of torch.distributed: bad input, the schedules the
driver makes, the report's figures, every collective through the backend on loopback, and
(as root) DDP on an emulated network: the same parameters as Gloo and as one process, a
crashed rank named in one line with nothing left, a script that never initializes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contract.emulation import EmulatedRates
from planner import build_plan, load_scenario
from topolab.cli import main
from topolab.train.report import compare, job_summary
from topolab.train.schedules import ControlServer, ScheduleService, scaled
from topolab_torch import protocol

REPO = Path(__file__).resolve().parents[2]
TRAIN4 = str(REPO / "scenarios" / "train-4.toml")
EXAMPLES = REPO / "examples" / "train"


@pytest.fixture(scope="module")
def plan4():
    return build_plan(load_scenario(TRAIN4))


def test_bad_input_is_one_line_exit_2(capsys):
    for argv, fragment in (
        (["train", TRAIN4, "--", "no-such-program-here"], "not found on PATH"),
        (["train", TRAIN4, "--", "./no/such/file"], "no such executable file"),
        (["train", TRAIN4, "--world-size", "12", "--", sys.executable], "has 4 servers"),
        (["train", TRAIN4, "--backend", "nccl", "--", sys.executable], "--backend"),
        (["train", TRAIN4], "no command"),
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and fragment in err, err


def test_schedules_are_the_plans_and_scale_to_the_item_size(plan4):
    service = ScheduleService(plan4, EmulatedRates(plan4.link_gbps, 100.0, 9000))
    made = service.get({"kind": "allreduce", "count": 1 << 20, "itemsize": 4, "root": 0})
    assert made.algorithm == "topoopt (2 rings)" and set(made.buffers) == {"grad"}
    # both directions of the ring at once: half Gloo's one ring in rank order
    assert made.gloo_predicted_s == pytest.approx(2 * made.predicted_s, rel=0.05)
    assert service.get({"kind": "allreduce", "count": 1 << 20, "itemsize": 4, "root": 0}) is made  # made once
    wide = service.get({"kind": "allreduce", "count": 1 << 20, "itemsize": 8, "root": 0})
    assert wide.buffers["grad"] == 8 << 20
    ops = [op for prog in wide.programs for ops in prog.values() for op in ops if op["op"] != "compute"]
    assert all(op["offset"] % 8 == 0 and op["length"] % 8 == 0 for op in ops)
    assert wide.predicted_s == pytest.approx(2 * made.predicted_s, rel=0.05)
    assert scaled(service_schedule(plan4), 4).to_dict() == service_schedule(plan4).to_dict()
    with pytest.raises(ValueError, match="unknown collective"):
        service.get({"kind": "gather", "count": 4, "itemsize": 4})


def test_the_calibration_is_the_zero_payload_twin_of_the_allreduce(plan4):
    from topolab.common.calibrate import critical_ops

    service = ScheduleService(plan4, EmulatedRates(plan4.link_gbps, 100.0, 9000))
    twin = service.get(protocol.CALIBRATION_KEY)
    grads = service.get({"kind": "allreduce", "count": 1311946, "itemsize": 4, "root": 0})  # the CNN's bucket
    assert twin.schedule.op_count() == grads.schedule.op_count() and twin.buffers["grad"] <= 64
    ops = critical_ops(plan4, twin.schedule)
    assert ops == critical_ops(plan4, grads.schedule) > 0
    assert service.op_overhead(0.012) == pytest.approx(0.012 / ops)
    with_cost = service.predictions(1e-3)[("allreduce", grads.nbytes)]
    assert with_cost == pytest.approx(grads.predicted_s + ops * 1e-3, rel=0.2) and with_cost > grads.predicted_s


def service_schedule(plan):
    from topolab.train.schedules import plan_allreduce

    return plan_allreduce(plan, 4096)


def _write_rank(folder: Path, rank: int, steps: list[float], collectives: list[tuple[int, float, float, float]]):
    for k, seconds in enumerate(steps):
        protocol.append_record(
            protocol.rank_file(str(folder), rank, "steps.jsonl"),
            {"step": k, "t_start": 10.0 * k, "t_end": 10.0 * k + seconds, "seconds": seconds},
        )
    for step, start, end, predicted in collectives:
        record = {"kind": "allreduce", "bytes": 4096, "algorithm": "topoopt", "step": step}
        record.update(t_start=start, t_end=end, seconds=end - start, predicted_s=predicted)
        protocol.append_record(protocol.rank_file(str(folder), rank, "collectives.jsonl"), record)


def test_summary_takes_the_slowest_rank_and_the_last_start(tmp_path):
    # rank 1 joins each AllReduce 0.2 s late: the collective's time starts then
    _write_rank(tmp_path, 0, [1.0, 0.5, 0.7], [(0, 1.0, 1.5, 0.25), (1, 11.0, 11.4, 0.25), (2, 21.0, 21.4, 0.25)])
    _write_rank(tmp_path, 1, [1.1, 0.6, 0.6], [(0, 1.2, 1.5, 0.25), (1, 11.2, 11.4, 0.25), (2, 21.2, 21.5, 0.25)])
    s = job_summary(tmp_path, 2, 30.0, {4096: 0.5})
    assert s["steps"] == [1.1, 0.6, 0.7] and s["step_s"] == pytest.approx(0.65)
    (row,) = s["sizes"]
    assert row["count"] == 3 and row["per_step"] == 1.0 and row["gloo_predicted_s"] == 0.5
    assert row["measured_s"] == pytest.approx(0.3)
    assert s["communication"]["measured_s"] == pytest.approx(0.25)  # steps 1 and 2: 0.2, 0.3
    gloo = {"steps": [1.0, 0.9], "step_s": 0.9, "communication": {}}
    s["gloo_predicted_s"] = 0.5
    assert compare({"topolab": s, "gloo": gloo}) == pytest.approx(
        {"measured_s": 0.25, "predicted_s": 0.25, "speedup": 0.9 / 0.65}
    )


COLLECTIVES_SCRIPT = """
import os, torch, torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group(os.environ["TOPOLAB_BACKEND"])
r, n = dist.get_rank(), dist.get_world_size()
xs = [torch.randn(1000, generator=torch.Generator().manual_seed(q)) for q in range(n)]
x, total = xs[r], sum(xs)
y = x.clone(); dist.all_reduce(y); assert torch.allclose(y, total, atol=1e-5)
every = [torch.empty_like(y) for _ in range(n)]; dist.all_gather(every, y)
assert all(torch.equal(e, y) for e in every), "the sums differ between ranks"
z = x.double(); dist.all_reduce(z, op=dist.ReduceOp.AVG); assert torch.allclose(z, total.double() / n, atol=1e-6)
b = x.clone(); dist.broadcast(b, src=n - 1); assert torch.equal(b, xs[n - 1])
out = torch.empty(n * 1000); dist.all_gather_into_tensor(out, x); assert torch.equal(out, torch.cat(xs))
part = torch.empty(1000 // n); dist.reduce_scatter_tensor(part, x)
assert torch.allclose(part, total.chunk(n)[r], atol=1e-5)
a2a = torch.empty(1000); dist.all_to_all_single(a2a, x); assert torch.equal(a2a, torch.cat([q.chunk(n)[r] for q in xs]))
i = torch.arange(5) * (r + 1); dist.all_reduce(i); assert torch.equal(i, torch.arange(5) * (n * (n + 1) // 2))
dist.barrier()
works = [dist.all_reduce(torch.full((100,), float(k)), async_op=True) for k in range(5)]
[w.wait() for w in works]
try:
    dist.all_reduce(x.clone(), op=dist.ReduceOp.MAX)
except Exception as exc:
    assert "SUM and AVG only" in str(exc)
else:
    raise AssertionError("MAX ran")
print("ok", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_every_collective_through_the_backend_on_loopback(plan4, tmp_path):
    """Four ranks on 127.0.0.1 with the driver's control channel: every collective is exact."""
    _every_collective_on_loopback(plan4, tmp_path)


def test_an_msccl_allreduce_runs_through_the_backend_on_tensors_of_any_size(tmp_path):
    """With ``[collectives] allreduce = "msccl:..."`` every AllReduce runs the XML, whose chunks
    need not divide the tensor: the backend runs it on a zero-padded copy and copies back."""
    import shutil

    shutil.copy(REPO / "tests" / "fixtures" / "msccl" / "ring_allreduce_4.xml", tmp_path / "ring.xml")
    scenario = tmp_path / "train-4-msccl.toml"
    text = Path(TRAIN4).read_text() + '\n[collectives]\nallreduce = "msccl:ring.xml"\n'
    scenario.write_text(text)
    plan = build_plan(load_scenario(scenario))
    records = _every_collective_on_loopback(plan, tmp_path)
    assert any(r["kind"] == "allreduce" and "msccl" in r["algorithm"] for r in records), records


def _every_collective_on_loopback(plan4, tmp_path) -> list[dict]:
    pytest.importorskip("torch")
    script = tmp_path / "collectives.py"
    script.write_text(COLLECTIVES_SCRIPT)
    endpoint = f"ipc://{tmp_path}/control.ipc"
    server = ControlServer(endpoint, 4, ScheduleService(plan4, EmulatedRates(plan4.link_gbps, 100.0, 9000)))
    server.start()
    from topolab.train.jobs import rank_environment

    procs = []
    try:
        for r in range(4):
            env = rank_environment(dict(os.environ), r, 4, "127.0.0.1", "topolab", tmp_path, endpoint, "127.0.0.1")
            env["MASTER_PORT"] = str(29400 + os.getpid() % 500)
            procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True))
        outs = [p.communicate(timeout=150)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        server.stop()
    assert [p.returncode for p in procs] == [0] * 4 and all("ok" in o for o in outs)
    records = [json.loads(line) for line in (tmp_path / "rank-0.collectives.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in records} >= {"allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall"}
    assert all(r["seconds"] >= 0 and r["predicted_s"] >= 0 for r in records)
    assert (tmp_path / "rank-3.init").exists()
    return records


def _relative(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max() / b[k].abs().max().clamp_min(1e-30)) for k in b)


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ddp_trains_the_same_parameters_as_gloo_and_one_process(tmp_path, capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    steps = ["--steps", "6", "--double", "--save", "params-{backend}.pt"]
    argv = ["train", TRAIN4, "--backend", "topolab,gloo", "--run-dir", str(tmp_path), "--out", "out"]
    assert main([*argv, "--", sys.executable, str(EXAMPLES / "cnn.py"), *steps]) == 0
    subprocess.run([sys.executable, str(EXAMPLES / "cnn.py"), "--single", "4", *steps], check=True)
    topolab, gloo, single = (torch.load(f"params-{b}.pt") for b in ("topolab", "gloo", "single"))
    assert _relative(topolab, gloo) < 1e-6 and _relative(topolab, single) < 1e-6
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["status"] == "ok" and set(doc["jobs"]) == {"topolab", "gloo"}
    job = doc["jobs"]["topolab"]
    assert len(job["steps"]) == 6
    grads = [row for row in job["sizes"] if row["kind"] == "allreduce"]
    assert grads and all(row["per_step"] >= 1 and row["predicted_s"] > 0 for row in grads)
    assert "Step, gloo minus topolab" in (tmp_path / "out" / "report.md").read_text()
    assert "step   5" in capsys.readouterr().out  # rank 0's output, streamed
    assert (tmp_path / "out" / "gloo" / "rank-3.stdout").exists()


def _our_processes(folder: Path) -> list[int]:
    """Processes whose environment names ``folder`` as their train folder."""
    mark = f"{protocol.ENV_DIR}={folder.resolve()}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_crashed_rank_is_one_line_and_nothing_is_left(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "out"
    argv = ["train", TRAIN4, "--run-dir", str(tmp_path), "--out", str(out), "--"]
    argv += [sys.executable, str(EXAMPLES / "cnn.py"), "--steps", "20", "--crash", "1", "3"]
    assert main(argv) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("topolab:")]
    assert len(lines) == 1 and "rank 1 exited with code 1" in lines[0] and "fails at step 3" in lines[0], lines
    assert _our_processes(out) == []
    assert json.loads((out / "results.json").read_text())["status"] == "failed"


@pytest.mark.root
@pytest.mark.timeout(120)
def test_a_script_that_never_initializes_is_named_after_the_wait(tmp_path, capsys):
    argv = ["train", TRAIN4, "--run-dir", str(tmp_path), "--out", str(tmp_path / "out"), "--init-timeout", "3"]
    assert main([*argv, "--", sys.executable, "-c", "import time; time.sleep(60)"]) == 1
    err = capsys.readouterr().err
    line = [x for x in err.splitlines() if x.startswith("topolab:")]
    assert len(line) == 1 and "did not call torch.distributed.init_process_group within 3 s" in line[0], err
    assert _our_processes(tmp_path / "out") == []


def test_a_rank_gets_torchruns_environment_and_the_autoload_first(tmp_path):
    from topolab.train.jobs import AUTOLOAD_DIR, REPO_ROOT, rank_environment

    base = {"PYTHONPATH": "/mine", "OMP_NUM_THREADS": "4", "KEEP": "1"}
    env = rank_environment(base, 5, 12, "198.18.0.1", "gloo", tmp_path, "ipc:///x", "198.18.0.6")
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR")} == {
        "RANK": "5",
        "WORLD_SIZE": "12",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "198.18.0.1",
    }
    assert env["TOPOLAB_BACKEND"] == "gloo" and env["TOPOLAB_ADDRESS"] == "198.18.0.6" and env["KEEP"] == "1"
    assert env["OMP_NUM_THREADS"] == "4"  # the caller's choice stays
    assert env["PYTHONPATH"].split(os.pathsep) == [str(AUTOLOAD_DIR), str(REPO_ROOT), "/mine"]


def test_the_blame_goes_to_the_peer_a_failed_rank_names():
    from topolab.train.jobs import named_peer

    addresses = ["198.18.0.1", "198.18.0.2", "198.18.0.11"]
    line = "topolab backend, rank 0: allreduce: rank 0: peer rank 2 (198.18.0.11:4000) disconnected"
    assert named_peer(line, addresses, 0) == 2
    assert named_peer("Connection closed by peer [198.18.0.11]:36785", addresses, 0) == 2
    assert named_peer("Connection closed by peer [198.18.0.1]:36785", addresses, 1) == 0
    assert named_peer("RuntimeError: rank 1 fails at step 3", addresses, 1) is None
    assert named_peer("peer rank 1 said hello", addresses, 1) is None  # itself
