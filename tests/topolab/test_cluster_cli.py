"""The commands over several machines as a user runs them: `topolab verify`, `run`,
`collective --algorithm alltoall`, `place --run` and `alloc --measure`'s measurement over three
stand-in machines (tests/fixtures/standins.py), from inside their underlay, reached with the
scenario's ``ssh_identity`` and ``ssh_known_hosts``; and the one-line errors for bad machine
input. (What refuses several machines is refused before any ssh: tests/topolab/test_network_options.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract.physics import tunnel_mtu
from tests.fixtures.standins import StandIns

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "scenarios" / "topoopt-12.toml"
CLI_TIMEOUT_S = 50  # the whole verify; the test's own limit is 60 s
PROBE = "ip -br link | cut -d' ' -f1; echo --; readlink /proc/[0-9]*/ns/net | sort -u; ls /run/topolab 2>/dev/null || true\n"


@pytest.fixture
def standins() -> Iterator[StandIns]:
    with StandIns(3) as machines:
        yield machines
    assert machines.leftovers() == []


def _machine_state(standins: StandIns, index: int) -> str:
    """A stand-in's root-namespace interfaces, the namespaces its processes use, its run files."""
    assert standins.ssh is not None
    return standins.ssh.run(standins.machines[index], PROBE, 5, "probe")


def _scenario_with(tmp_path: Path, **emulation: str) -> Path:
    """topoopt-12 with extra ``[emulation]`` keys (string values)."""
    extra = "".join(f'{key} = "{value}"\n' for key, value in emulation.items())
    text = SCENARIO.read_text()
    assert text.count("[emulation]\n") == 1
    path = tmp_path / "topoopt-12.toml"
    path.write_text(text.replace("[emulation]\n", "[emulation]\n" + extra))
    return path


def _topolab(
    *argv: str, prefix: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [*prefix, sys.executable, "-m", "topolab", *argv],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=CLI_TIMEOUT_S,
            env=None if env is None else {**os.environ, **env},
        )
    except subprocess.TimeoutExpired as e:  # name the step it was at: its progress lines
        stderr = e.stderr.decode() if isinstance(e.stderr, bytes) else e.stderr or ""
        pytest.fail(f"topolab {argv[0]} took over {CLI_TIMEOUT_S} s; its last words: {stderr[-1500:]}")


def _verify_over_standins(standins: StandIns, scenario: Path, tmp_path: Path, *flags: str) -> dict:
    """``topolab verify --json`` over the stand-ins, run inside their underlay; its report,
    after checking it passed and left nothing on any machine."""
    assert standins.ssh is not None
    before = [_machine_state(standins, i) for i in range(3)]
    addresses = ",".join(m.address for m in standins.machines)
    done = _topolab(
        "verify", str(scenario), "--machines", addresses, "--json", "--run-dir", str(tmp_path / "run"), *flags,
        prefix=tuple(standins.in_underlay()),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"] is True
    facts = report["facts"]
    assert facts["machines"] == [m.address for m in standins.machines]
    assert facts["mtu"] == 1450 and facts["netem"] is False and facts["tunnels"] > 0
    assert facts["teardown_s"] is not None
    assert "verify: 3 machines" in done.stderr and "cables cross" in done.stderr  # the partition is logged
    assert [_machine_state(standins, i) for i in range(3)] == before  # nothing left on any machine
    return report


def test_cluster_cli_verify_topoopt12_over_three_machines(standins: StandIns, tmp_path: Path) -> None:
    assert standins.ssh is not None
    scenario = _scenario_with(
        tmp_path, ssh_identity=str(standins.ssh.identity), ssh_known_hosts=str(standins.ssh.known_hosts)
    )
    report = _verify_over_standins(standins, scenario, tmp_path)
    assert report["paths"] == {**report["paths"], "pairs": 12 * 11, "equal": 12 * 11, "mismatches": []}
    assert report["reachability"]["reached"] == 12 * 11
    # every direction of every cable, the 12 tunnels included, within verify's 5% of the TCP
    # maximum at MTU 1450 (docs/cluster.md section 6: 94.6-95.4 of 95.5 Mbit/s) and shaped
    goodput = report["goodput"]
    assert report["facts"]["tunnels"] == 12
    assert goodput["cables"] == 24 and all(not link["error"] for link in goodput["links"])
    assert goodput["directions_ok"] == goodput["directions"] == 48
    assert 1 - goodput["tolerance"] <= goodput["ratio_min"] <= goodput["ratio_max"] <= 1 + goodput["tolerance"]


def test_cluster_cli_run_over_three_machines_shares_no_file(standins: StandIns, tmp_path: Path) -> None:
    # the end-to-end run with its temporary files (the workers' control socket, their specs)
    # where the stand-ins cannot see them, as real machines cannot: verified, nothing left
    assert standins.ssh is not None
    scenario = _scenario_with(
        tmp_path, ssh_identity=str(standins.ssh.identity), ssh_known_hosts=str(standins.ssh.known_hosts)
    )
    before = [_machine_state(standins, i) for i in range(3)]
    addresses = ",".join(m.address for m in standins.machines)
    out = tmp_path / "out"
    done = _topolab(
        "run", str(scenario), "--machines", addresses, "--iterations", "2", "--out", str(out),
        "--run-dir", str(tmp_path / "run"),
        prefix=tuple(standins.in_underlay()), env={"TMPDIR": str(standins.driver_dir)},
    )  # fmt: skip
    assert done.returncode in (0, 3), done.stderr[-2000:]  # 3: verified, prediction over tolerance
    results = json.loads((out / "results.json").read_text())
    assert results["summary"]["verified"] is True
    assert results["emulation"]["machines"] == addresses.split(",") and results["emulation"]["tunnels"] == 12
    assert "verification passed" in done.stdout
    # the cables' MTU is the tunnels' (1450), not the scenario's 9000: recorded, and predicted at
    assert results["scenario"]["emulation"]["mtu"] == 9000
    assert results["emulation"]["mtu"] == tunnel_mtu() == 1450
    assert results["predicted"]["mtu"] == 1450
    assert results["predicted"]["time_scale"] == results["emulation"]["time_scale"] == 250.0
    assert "MTU 1450" in done.stderr
    print(f"3 stand-ins: {done.stdout.strip().splitlines()[0]}")  # measured, predicted, error (pytest -s)
    assert [_machine_state(standins, i) for i in range(3)] == before


def _over_standins(standins: StandIns, tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    """``topolab ARGV --machines <the stand-ins>`` run inside their underlay, its temporary files
    where the stand-ins cannot see them; checked to have logged the partition and to have left
    nothing on any machine."""
    assert standins.ssh is not None
    before = [_machine_state(standins, i) for i in range(3)]
    addresses = ",".join(m.address for m in standins.machines)
    done = _topolab(
        *argv, "--machines", addresses, "--run-dir", str(tmp_path / "run"),
        prefix=tuple(standins.in_underlay()), env={"TMPDIR": str(standins.driver_dir)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "3 machines" in done.stderr and "cables cross" in done.stderr  # built over the machines
    assert [_machine_state(standins, i) for i in range(3)] == before
    return done


def _ssh_keys(standins: StandIns) -> str:
    assert standins.ssh is not None
    return f'ssh_identity = "{standins.ssh.identity}"\nssh_known_hosts = "{standins.ssh.known_hosts}"\n'


def test_cluster_cli_alltoall_over_three_machines(standins: StandIns, tmp_path: Path) -> None:
    # the single-path routing needs no planes: it runs over the machines (the planned ones
    # are refused in one line)
    assert standins.ssh is not None
    scenario = _scenario_with(
        tmp_path, ssh_identity=str(standins.ssh.identity), ssh_known_hosts=str(standins.ssh.known_hosts)
    )
    out = tmp_path / "out"
    done = _over_standins(
        standins, tmp_path, "collective", str(scenario), "--algorithm", "alltoall", "--routing", "single",
        "--repeat", "1", "--out", str(out),
    )  # fmt: skip
    doc = json.loads((out / "results.json").read_text())
    (single,) = doc["results"]
    assert single["variant"] == "single" and single["verified"] is True and len(single["times_s"]) == 1
    assert "single" in done.stdout


CANDLE_12 = """\
[cluster]
servers = 12
degree = 4
link_gbps = 25

[workload]
model = "candle"
batch_per_server = 128

[parallelism]
strategy = "data"

[emulation]
link_mbps = 100
{keys}
[run]
timeout_s = 60
"""


def test_cluster_cli_place_run_over_three_machines(standins: StandIns, tmp_path: Path) -> None:
    scenario = tmp_path / "candle-12.toml"
    scenario.write_text(CANDLE_12.format(keys=_ssh_keys(standins)))
    done = _over_standins(
        standins, tmp_path, "place", str(scenario), "--run", "--iterations", "1", "--time-limit", "5", "--json"
    )
    runs = json.loads(done.stdout)["run"]["runs"]
    assert runs and all(r["verified"] for r in runs.values())
    baseline = next(r for label, r in runs.items() if label.startswith("baseline"))
    assert baseline["transfers_checked"] >= 2  # activations forward, gradients back, across servers


ALLOC_MEASURE = """\
import json, sys
from emulator import EmulationConfig
from topolab.alloc.command import SweepCase, config_rows, measure_row
from topolab.common.network import NetworkFlags, network_config

case = SweepCase((4, 3), ("fc", "ring"), 100.0, 400.0, 2 << 20)
row = config_rows(case)[0]
scenario = EmulationConfig(ssh_identity=sys.argv[2], ssh_known_hosts=sys.argv[3])
config = network_config(scenario, NetworkFlags(machines=tuple(sys.argv[1].split(",")), run_dir=sys.argv[4]))
log = []
out = measure_row(case, row, repeat=1, config=config, log=log.append)
print(json.dumps({"verified": out["verified"], "measured_s": out["measured_s"], "model_s": row["model_s"], "log": log}))
"""


def test_cluster_alloc_measure_over_three_machines(standins: StandIns, tmp_path: Path) -> None:
    # `topolab alloc --sweep --measure --machines` measures every split this way (ten networks
    # in a row: too long for one test); here LIBRA's split of hierarchical-12's 4 x 3 fc x ring
    assert standins.ssh is not None
    before = [_machine_state(standins, i) for i in range(3)]
    addresses = ",".join(m.address for m in standins.machines)
    done = subprocess.run(
        [*standins.in_underlay(), sys.executable, "-c", ALLOC_MEASURE, addresses, str(standins.ssh.identity),
         str(standins.ssh.known_hosts), str(tmp_path / "run")],
        capture_output=True, text=True, cwd=REPO, timeout=CLI_TIMEOUT_S,
        env={**os.environ, "TMPDIR": str(standins.driver_dir)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["verified"] is True
    assert any(line.startswith("3 machines") for line in out["log"]), out["log"]
    assert out["measured_s"] >= 0.95 * out["model_s"]  # shaped links cap it at the model, as on one machine
    assert [_machine_state(standins, i) for i in range(3)] == before


def test_cluster_cli_killed_verify_is_cleaned_on_every_machine(standins: StandIns, tmp_path: Path) -> None:
    assert standins.ssh is not None
    ssh_files = ["--ssh-identity", str(standins.ssh.identity), "--ssh-known-hosts", str(standins.ssh.known_hosts)]
    scenario = _scenario_with(
        tmp_path, ssh_identity=str(standins.ssh.identity), ssh_known_hosts=str(standins.ssh.known_hosts)
    )
    addresses = ",".join(m.address for m in standins.machines)
    before = [_machine_state(standins, i) for i in range(3)]
    # the killed driver cannot remove its ssh control directory: `topolab clean` does. Both
    # get a temporary directory of the test's own (short: a control socket's path must fit in
    # 108 bytes)
    scratch = tempfile.mkdtemp(prefix="tlk-", dir="/tmp")
    verify = subprocess.Popen(
        [*standins.in_underlay(), sys.executable, "-m", "topolab", "verify", str(scenario), "--machines", addresses,
         "--no-goodput", "--run-dir", str(tmp_path / "run")],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": scratch},
    )  # fmt: skip
    try:
        assert verify.stderr is not None
        lines = [verify.stderr.readline() for _ in range(2)]  # the partition, then "network up"
        assert "network up" in lines[1], lines
    except BaseException:
        shutil.rmtree(scratch)
        raise
    finally:
        verify.kill()  # SIGKILL: no teardown runs
        verify.wait(5)
    assert [_machine_state(standins, i) for i in range(3)] != before  # the hosts outlive their driver
    assert len(os.listdir(scratch)) == 1  # its ssh control directory
    clean = ["clean", "--run-dir", str(tmp_path / "run"), "--machines", addresses, *ssh_files, "--json"]
    try:
        done = _topolab(*clean, prefix=tuple(standins.in_underlay()), env={"TMPDIR": scratch})
        left_here = os.listdir(scratch)
    finally:
        shutil.rmtree(scratch)
    assert done.returncode == 0, done.stderr
    cleaned = json.loads(done.stdout)["cleaned"]
    assert sorted(run.split(":")[0] for run in cleaned) == addresses.split(","), cleaned
    assert json.loads(done.stdout)["killed_on_machines"] >= 12  # 12 host shells at least
    assert [_machine_state(standins, i) for i in range(3)] == before
    (control,) = json.loads(done.stdout)["ssh_control_dirs"]  # the killed driver's, here
    assert Path(control).parent == Path(scratch) and left_here == []
    again = _topolab(*clean, prefix=tuple(standins.in_underlay()))
    assert again.returncode == 0 and json.loads(again.stdout)["cleaned"] == []


@pytest.mark.parametrize(
    ("flag", "emulation", "names"),
    [
        ("localhost", {}, "--machines: 'localhost' is this machine's loopback"),
        ("127.0.0.1,192.0.2.9", {}, "--machines: '127.0.0.1' is this machine's loopback"),
        ("192.0.2.9,192.0.2.9", {}, "--machines: a machine is listed twice"),
        (",", {}, "--machines: give one or more machine addresses"),
        (
            "192.0.2.9",
            {"ssh_identity": "/nonexistent/key"},
            "emulation.ssh_identity = '/nonexistent/key': no such file",
        ),
        ("192.0.2.9", {"ssh_user": "a b"}, "topoopt-12.toml: emulation.ssh_user: must be a user name, got 'a b'"),
    ],
)
def test_cluster_cli_bad_machine_input_is_one_line(tmp_path: Path, flag: str, emulation: dict, names: str) -> None:
    done = _topolab("verify", str(_scenario_with(tmp_path, **emulation)), "--machines", flag, "--no-goodput")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and names in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
