"""Every bad input is one line on stderr naming the field or flag, exit code 2, no traceback,
and an answer, not a hang (nothing is planned, searched or emulated first: a search of 10**9
steps would not end).

Most cases call `topolab.cli.main` in-process (fast); a few run the real command. Scenario
files are written to tmp_path; ``{s}`` in a command line stands for a valid scenario file,
``{tmp}`` for the test's folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planner.scenario import BOUNDS
from topolab.cli import main

# A hang guard, an order of magnitude above the answers: the slowest measured 4.6 s (`sweep`,
# a new process importing the cost model before it reads its flags), in-process ones under 2.5 s.
ANSWER_WITHIN_S = 40.0
REPO = Path(__file__).resolve().parents[2]
VALID = "[cluster]\nservers = 12\ndegree = 4\n"


def _numeric_cases() -> list[tuple[str, str, str]]:
    """For every bounded key: below its minimum, above its maximum, and values of the wrong kind."""
    cases = []
    for (section, key), (low, _inclusive, high) in BOUNDS.items():
        is_int = isinstance(high, int)
        dotted = f"{section}.{key}"
        values = {
            "below": str(int(low) - 1) if is_int else repr(-1.0 if low == 0 else low / 2),
            "above": str(int(high) * 2 + 1) if is_int else repr(high * 10),
            "string": '"12"',
            "bool": "true",
            "list": "[1, 2]",
            "table": "{ a = 1 }",
        }
        if is_int:
            values["float"] = "1.5"
        else:
            values |= {"nan": "nan", "inf": "inf", "-inf": "-inf"}
        if low == 0 and values["below"] == "-1.0" and key in ("latency_us", "switch_gbps"):
            values["below"] = "-0.5"
        for label, value in values.items():
            cases.append((f"{dotted}={label}", f"[{section}]\n{key} = {value}\n", dotted))
    return cases


CHOICE_CASES = [
    (f"{dotted}={label}", f"[{dotted.split('.')[0]}]\n{dotted.split('.')[1]} = {value}\n", dotted)
    for dotted in (
        "workload.model",
        "parallelism.strategy",
        "topology.kind",
        "topology.degree_split",
        "emulation.netem",
    )
    for label, value in (("unknown", '"nope"'), ("int", "3"), ("empty", '""'))
]

CROSS_CASES = [
    (
        "expander degree 1",
        VALID.replace("degree = 4", "degree = 1") + '[topology]\nkind = "expander"\n',
        "cluster.degree",
    ),
    (
        "topoopt degree 1 with search",
        VALID.replace("degree = 4", "degree = 1") + '[parallelism]\nstrategy = "search"\n',
        "cluster.degree",
    ),
    ("topoopt degree 1", VALID.replace("degree = 4", "degree = 1"), "cluster.degree"),
    ("ring degree 1", VALID.replace("degree = 4", "degree = 1") + '[topology]\nkind = "ring"\n', "cluster.degree"),
    ("ring odd degree", VALID.replace("degree = 4", "degree = 3") + '[topology]\nkind = "ring"\n', "cluster.degree"),
    ("torus degree 2", VALID.replace("degree = 4", "degree = 2") + '[topology]\nkind = "torus"\n', "cluster.degree"),
    ("torus prime n", '[cluster]\nservers = 13\ndegree = 4\n[topology]\nkind = "torus"\n', "cluster.servers"),
    ("degree = servers", VALID.replace("degree = 4", "degree = 12"), "cluster.degree"),
    ("degree > servers", VALID.replace("degree = 4", "degree = 40"), "cluster.degree"),
    (
        "expander odd n x d",
        '[cluster]\nservers = 13\ndegree = 3\n[topology]\nkind = "expander"\n',
        "cluster.degree",
    ),
    ("mp_degree 999", VALID + "[parallelism]\nmp_degree = 999\n", "parallelism.mp_degree"),
    ("mp_degree 13 > 12", VALID + "[parallelism]\nmp_degree = 13\n", "parallelism.mp_degree"),
    (
        "mp_degree 5 explicit",
        VALID + '[parallelism]\nstrategy = "data"\nmp_degree = 5\n',
        "parallelism.mp_degree",
    ),
    (
        "hybrid bert mp_degree 5",
        VALID + '[workload]\nmodel = "bert"\n[parallelism]\nmp_degree = 5\n',
        "parallelism.mp_degree",
    ),
    ("servers 1e9", "[cluster]\nservers = 1e9\n", "cluster.servers"),
    ("servers 1000000", "[cluster]\nservers = 1000000\n", "cluster.servers"),
    ("servers 2**63-1", "[cluster]\nservers = 9223372036854775807\n", "cluster.servers"),
    ("search_steps 1e9", "[parallelism]\nsearch_steps = 1e9\n", "parallelism.search_steps"),
    ("search_steps 10**9", "[parallelism]\nsearch_steps = 1000000000\n", "parallelism.search_steps"),
    ("mtu 1e10", "[emulation]\nmtu = 1e10\n", "emulation.mtu"),
    ("mtu 10**10", "[emulation]\nmtu = 10000000000\n", "emulation.mtu"),
    ("mtu 100", "[emulation]\nmtu = 100\n", "emulation.mtu"),
    ("link_gbps 1e12", "[cluster]\nlink_gbps = 1e12\n", "cluster.link_gbps"),
    ("link_gbps 1e-320", "[cluster]\nlink_gbps = 1e-320\n", "cluster.link_gbps"),
    ("link_gbps huge int", "[cluster]\nlink_gbps = 9223372036854775807\n", "cluster.link_gbps"),
    ("file without cabling", '[topology]\nkind = "file"\n', "topology.cabling"),
    ("cabling on topoopt", '[topology]\ncabling = "c.csv"\n', "topology.cabling"),
    ("routes on expander", '[topology]\nkind = "expander"\nroutes = "r.json"\n', "topology.routes"),
    ("cabling missing file", '[topology]\nkind = "file"\ncabling = "missing.csv"\n', "topology.cabling"),
    ("cabling a folder", '[topology]\nkind = "file"\ncabling = "."\n', "topology.cabling"),
    ("cabling /dev/zero", '[topology]\nkind = "file"\ncabling = "/dev/zero"\n', "topology.cabling"),
    ("cabling not a string", '[topology]\nkind = "file"\ncabling = 3\n', "topology.cabling"),
    ("unknown key", VALID + "links = 3\n", "cluster.links"),
    ("unknown table", VALID + "[network]\nx = 1\n", "network"),
    ("section not a table", "cluster = 3\n", "cluster"),
    ("section is a list", "cluster = [1]\n", "cluster"),
]


def _deep(depth: int) -> str:
    return "a = " + "{ b = " * depth + "1" + " }" * depth + "\n"


# (id, bytes of the file, what the message must say)
FILE_CASES = [
    ("malformed", b"[cluster\nservers = 12\n", "malformed TOML"),
    ("utf-16", VALID.encode("utf-16"), "UTF-8"),
    ("utf-16 without BOM", VALID.encode("utf-16-le"), "UTF-8"),
    ("latin-1", "# caf\u00e9\n[cluster]\nservers = 12\n".encode("latin-1"), "UTF-8"),
    ("garbage", bytes(range(128, 256)) * 3, "UTF-8"),
    ("NUL bytes", b"\x00" * 64, "NUL"),
    ("deep inline tables", _deep(3000).encode(), "nested too deeply"),
    ("deep arrays", ("a = " + "[" * 3000 + "]" * 3000 + "\n").encode(), "TOML"),
    ("too large", b"# " + b"x" * (1 << 20) + b"\n", "larger than"),
]

SCENARIO_CASES = _numeric_cases() + CHOICE_CASES + CROSS_CASES

PRICE_FILES = {
    "prices_null.json": '{"fibre": null}',
    "prices_list.json": '{"fibre": [1]}',
    "prices_nan.json": '{"fibre": NaN}',
    "prices_inf.json": '{"fibre": Infinity}',
    "prices_negative.json": '{"patch_panel_port": -5}',
    "prices_string.json": '{"fibre": "ten"}',
    "prices_table_nan.json": '{"nic_port": {"100": NaN}}',
    "prices_table_speed.json": '{"nic_port": {"fast": 10}}',
    "prices_unknown.json": '{"gold": 1}',
    "prices_not_json.json": "{fibre: 1",
    "prices_array.json": "[1, 2]",
}

# (id, command line, the flag the message must name)
FLAG_CASES = [
    ("no command", [], "COMMAND"),
    ("unknown command", ["frob"], "frob"),
    ("unknown top option", ["--frob"], "--frob"),
    ("plan without scenario", ["plan"], "scenario"),
    ("plan unknown flag", ["plan", "{s}", "--frob"], "--frob"),
    ("plan --out empty", ["plan", "{s}", "--out", ""], "--out"),
    ("plan --out is the input", ["plan", "{s}", "--out", "{s}"], "--out"),
    ("plan --out /proc", ["plan", "{s}", "--out", "/proc/topolab-plan.json"], "--out"),
    ("plan --out /dev/full", ["plan", "{s}", "--out", "/dev/full"], "--out"),
    ("plan --out missing folder", ["plan", "{s}", "--out", "{tmp}/missing/plan.json"], "--out"),
    ("plan --out a folder", ["plan", "{s}", "--out", "{tmp}"], "--out"),
    ("plan missing file", ["plan", "{tmp}/missing.toml"], "missing.toml"),
    ("plan a folder", ["plan", "{tmp}"], "folder"),
    ("run --iterations 0", ["run", "{s}", "--iterations", "0"], "--iterations"),
    ("run --iterations -1", ["run", "{s}", "--iterations", "-1"], "--iterations"),
    ("run --iterations 1e9", ["run", "{s}", "--iterations", "1e9"], "--iterations"),
    ("run --iterations 10**9", ["run", "{s}", "--iterations", "1000000000"], "--iterations"),
    ("run --iterations abc", ["run", "{s}", "--iterations", "abc"], "--iterations"),
    ("run --payload-scale 0", ["run", "{s}", "--payload-scale", "0"], "--payload-scale"),
    ("run --payload-scale nan", ["run", "{s}", "--payload-scale", "nan"], "--payload-scale"),
    ("run --payload-scale inf", ["run", "{s}", "--payload-scale", "inf"], "--payload-scale"),
    ("run --payload-scale 2", ["run", "{s}", "--payload-scale", "2"], "--payload-scale"),
    ("run --payload-scale 1e-320", ["run", "{s}", "--payload-scale", "1e-320"], "--payload-scale"),
    ("run --wait -1", ["run", "{s}", "--wait", "-1"], "--wait"),
    ("run --wait nan", ["run", "{s}", "--wait", "nan"], "--wait"),
    ("run --wait 1e9", ["run", "{s}", "--wait", "1e9"], "--wait"),
    ("run --out empty", ["run", "{s}", "--out", ""], "--out"),
    ("run --out /dev/full", ["run", "{s}", "--out", "/dev/full"], "--out"),
    ("run --out a file", ["run", "{s}", "--out", "{s}"], "--out"),
    ("run --out /proc", ["run", "{s}", "--out", "/proc/topolab-results"], "--out"),
    ("run --run-dir /dev/full", ["run", "{s}", "--out", "{tmp}/out", "--run-dir", "/dev/full"], "--run-dir"),
    ("run --run-dir empty", ["run", "{s}", "--out", "{tmp}/out", "--run-dir", ""], "--run-dir"),
    ("compare --topologies unknown", ["compare", "{s}", "--topologies", "hypercube"], "--topologies"),
    ("compare --topologies empty", ["compare", "{s}", "--topologies", ","], "--topologies"),
    ("compare --iterations 0", ["compare", "{s}", "--iterations", "0"], "--iterations"),
    ("compare --payload-scale nan", ["compare", "{s}", "--payload-scale", "nan"], "--payload-scale"),
    ("compare --out /dev/full", ["compare", "{s}", "--out", "/dev/full"], "--out"),
    ("compare --out empty", ["compare", "{s}", "--out", ""], "--out"),
    ("collective --repeat 0", ["collective", "{s}", "--repeat", "0"], "--repeat"),
    ("collective --repeat 1e9", ["collective", "{s}", "--repeat", "1e9"], "--repeat"),
    ("collective --repeat 1001", ["collective", "{s}", "--repeat", "1001"], "--repeat"),
    ("collective --bytes 3", ["collective", "{s}", "--bytes", "3"], "--bytes"),
    ("collective --bytes 4G", ["collective", "{s}", "--bytes", "4G"], "--bytes"),
    ("collective --bytes range too large", ["collective", "{s}", "--bytes", "1M..1G"], "--bytes"),
    ("collective --bytes huge", ["collective", "{s}", "--bytes", "99999999999999999999G"], "--bytes"),
    ("collective --bytes x", ["collective", "{s}", "--bytes", "x"], "--bytes"),
    ("collective --algorithm", ["collective", "{s}", "--algorithm", "butterfly"], "--algorithm"),
    ("collective --chunk 1K", ["collective", "{s}", "--chunk", "1K"], "--chunk"),
    ("collective --chunk 1G", ["collective", "{s}", "--chunk", "1G"], "--chunk"),
    ("collective --segment 3", ["collective", "{s}", "--segment", "3"], "--segment"),
    ("collective --segment 1G", ["collective", "{s}", "--segment", "1G"], "--segment"),
    ("run --link-mbps fast", ["run", "{s}", "--link-mbps", "fast"], '"auto"'),
    ("collective --link-mbps auto", ["collective", "{s}", "--link-mbps", "auto"], "--link-mbps"),
    ("collective --link-mbps 0", ["collective", "{s}", "--link-mbps", "0"], "--link-mbps"),
    ("collective --link-mbps nan", ["collective", "{s}", "--link-mbps", "nan"], "--link-mbps"),
    ("collective --link-mbps 1e12", ["collective", "{s}", "--link-mbps", "1e12"], "--link-mbps"),
    ("collective --timeout 0", ["collective", "{s}", "--timeout", "0"], "--timeout"),
    ("collective --timeout inf", ["collective", "{s}", "--timeout", "inf"], "--timeout"),
    ("collective --wait -5", ["collective", "{s}", "--wait", "-5"], "--wait"),
    ("collective --run-dir /dev/full", ["collective", "{s}", "--run-dir", "/dev/full"], "--run-dir"),
    ("verify --links 0", ["verify", "{s}", "--links", "0"], "--links"),
    ("verify --links x", ["verify", "{s}", "--links", "x"], "--links"),
    ("verify --link-mbps 0", ["verify", "{s}", "--link-mbps", "0"], "--link-mbps"),
    ("verify --link-mbps -inf", ["verify", "{s}", "--link-mbps", "-inf"], "--link-mbps"),
    ("verify --seconds 0", ["verify", "{s}", "--seconds", "0"], "--seconds"),
    ("verify --seconds 1e6", ["verify", "{s}", "--seconds", "1e6"], "--seconds"),
    ("verify --budget-gbps 0", ["verify", "{s}", "--budget-gbps", "0"], "--budget-gbps"),
    ("verify --tolerance 2", ["verify", "{s}", "--tolerance", "2"], "--tolerance"),
    ("verify --tolerance nan", ["verify", "{s}", "--tolerance", "nan"], "--tolerance"),
    ("verify --reference-gbps 1e12", ["verify", "{s}", "--reference-gbps", "1e12"], "--reference-gbps"),
    ("verify --wait inf", ["verify", "{s}", "--wait", "inf"], "--wait"),
    ("verify --run-dir /dev/full", ["verify", "{s}", "--run-dir", "/dev/full"], "--run-dir"),
    ("shell --link-mbps -1", ["shell", "{s}", "--link-mbps", "-1"], "--link-mbps"),
    ("shell --wait nan", ["shell", "{s}", "--wait", "nan"], "--wait"),
    ("shell --run-dir empty", ["shell", "{s}", "--run-dir", ""], "--run-dir"),
    ("clean unknown flag", ["clean", "--frob"], "--frob"),
    ("sweep --steps 0", ["sweep", "{s}", "--steps", "0"], "--steps"),
    ("sweep --steps 1e9", ["sweep", "{s}", "--steps", "1e9"], "--steps"),
    ("sweep --steps 10**9", ["sweep", "{s}", "--steps", "1000000000"], "--steps"),
    ("sweep --steps abc", ["sweep", "{s}", "--steps", "abc"], "--steps"),
    ("sweep --seed -1", ["sweep", "{s}", "--seed", "-1"], "--seed"),
    ("sweep --seed 2**40", ["sweep", "{s}", "--seed", "1099511627776"], "--seed"),
    ("sweep --link-gbps 1e12", ["sweep", "{s}", "--link-gbps", "1e12"], "--link-gbps"),
    ("sweep --link-gbps 1e-320", ["sweep", "{s}", "--link-gbps", "1e-320"], "--link-gbps"),
    ("sweep --link-gbps nan", ["sweep", "{s}", "--link-gbps", "nan"], "--link-gbps"),
    ("sweep --link-gbps inf", ["sweep", "{s}", "--link-gbps", "inf"], "--link-gbps"),
    ("sweep --link-gbps 0", ["sweep", "{s}", "--link-gbps", "0"], "--link-gbps"),
    ("sweep --link-gbps x", ["sweep", "{s}", "--link-gbps", "25,x"], "--link-gbps"),
    ("sweep --link-gbps empty", ["sweep", "{s}", "--link-gbps", ","], "--link-gbps"),
    ("sweep --degrees 0", ["sweep", "{s}", "--degrees", "0"], "--degrees"),
    ("sweep --degrees 1", ["sweep", "{s}", "--degrees", "1"], "--degrees"),
    ("sweep --degrees 12", ["sweep", "{s}", "--degrees", "12"], "--degrees"),
    ("sweep --degrees 1000", ["sweep", "{s}", "--degrees", "1000"], "--degrees"),
    ("sweep --degrees x", ["sweep", "{s}", "--degrees", "4,x"], "--degrees"),
    ("sweep --degrees word", ["sweep", "{s}", "--degrees", "4,x"], "--degrees: 'x' is not an integer"),
    ("sweep --link-gbps word", ["sweep", "{s}", "--link-gbps", "x"], "--link-gbps: 'x' is not a number"),
    ("sweep --models missing file", ["sweep", "{s}", "--models", "{tmp}/missing.json"], "--models"),
    ("plan --out in a file", ["plan", "{s}", "--out", "{s}/p.json"], "{s} is a file, not a folder"),
    ("plan --out deeper in a file", ["plan", "{s}", "--out", "{s}/a/p.json"], "{s} is a file, not a folder"),
    ("sweep --out in a file", ["sweep", "{s}", "--out", "{s}/a"], "{s} is a file, not a folder"),
    ("plan --partition 0", ["plan", "{s}", "--partition", "0"], "--partition"),
    ("predict --strategies", ["predict", "{s}", "--strategies", "data,pipeline"], "--strategies"),
    ("predict --strategies empty", ["predict", "{s}", "--strategies", ","], "--strategies"),
    ("sweep --models", ["sweep", "{s}", "--models", "gpt5"], "--models"),
    ("sweep --topologies", ["sweep", "{s}", "--topologies", "dragonfly"], "--topologies"),
    ("sweep --device-tflops 0", ["sweep", "{s}", "--device-tflops", "0"], "--device-tflops"),
    ("sweep --device-tflops nan", ["sweep", "{s}", "--device-tflops", "nan"], "--device-tflops"),
    ("sweep --device-tflops 1e12", ["sweep", "{s}", "--device-tflops", "1e12"], "--device-tflops"),
    ("sweep --out /dev/full", ["sweep", "{s}", "--out", "/dev/full"], "--out"),
    ("sweep --out empty", ["sweep", "{s}", "--out", ""], "--out"),
    ("sweep --out a file", ["sweep", "{s}", "--out", "{s}"], "--out"),
    ("sweep --prices missing", ["sweep", "{s}", "--prices", "{tmp}/missing.json"], "--prices"),
    *[(f"sweep --prices {name}", ["sweep", "{s}", "--prices", "{tmp}/" + name], "--prices") for name in PRICE_FILES],
    ("report missing folder", ["report", "{tmp}/missing"], "DIR"),
    ("report not a results folder", ["report", "{tmp}"], "DIR"),
    ("report bad results.json", ["report", "{tmp}/badresults"], "results.json"),
]


def _assert_one_line_exit_2(code: int, err: str, elapsed: float, fragment: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    assert fragment in err, err
    assert elapsed < ANSWER_WITHIN_S


def _call(argv: list[str], capsys) -> tuple[int, str, float]:
    t0 = time.monotonic()
    code = main(argv)
    elapsed = time.monotonic() - t0
    return code, capsys.readouterr().err, elapsed


@pytest.mark.parametrize("label,text,key", SCENARIO_CASES, ids=[c[0] for c in SCENARIO_CASES])
def test_bad_scenario_value(tmp_path, capsys, label, text, key):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    code, err, elapsed = _call(["plan", str(path)], capsys)
    _assert_one_line_exit_2(code, err, elapsed, key)
    assert str(path) in err


@pytest.mark.parametrize("label,content,fragment", FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_bad_scenario_file(tmp_path, capsys, label, content, fragment):
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    code, err, elapsed = _call(["plan", str(path)], capsys)
    _assert_one_line_exit_2(code, err, elapsed, fragment)


@pytest.fixture
def flag_env(tmp_path):
    scenario = tmp_path / "ok.toml"
    scenario.write_text(VALID)
    for name, text in PRICE_FILES.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "badresults").mkdir()
    (tmp_path / "badresults" / "results.json").write_text("{not json")
    return {"s": str(scenario), "tmp": str(tmp_path)}


@pytest.mark.parametrize("label,argv,flag", FLAG_CASES, ids=[c[0] for c in FLAG_CASES])
def test_bad_flag(flag_env, capsys, label, argv, flag):
    argv = [a.format(**flag_env) for a in argv]
    flag = flag.format(**flag_env)
    code, err, elapsed = _call(argv, capsys)
    _assert_one_line_exit_2(code, err, elapsed, flag)
    assert Path(flag_env["s"]).read_text() == VALID  # the input is never overwritten


@pytest.mark.parametrize("command", ["run", "verify", "shell", "compare", "collective", "clean"])
def test_commands_that_build_networks_say_root_is_needed(flag_env, capsys, monkeypatch, command):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    argv = [command] if command == "clean" else [command, flag_env["s"]]
    if command in ("run", "compare"):
        argv += ["--out", f"{flag_env['tmp']}/out"]
    code, err, elapsed = _call(argv, capsys)
    _assert_one_line_exit_2(code, err, elapsed, "needs root")
    assert not (Path(flag_env["tmp"]) / "out").exists()


SUBPROCESS_CASES = [
    ("servers 2**63-1", "[cluster]\nservers = 9223372036854775807\n", ["plan", "{s}"], "cluster.servers"),
    ("utf-16", None, ["plan", "{s}"], "UTF-8"),
    ("out empty", VALID, ["plan", "{s}", "--out", ""], "--out"),
    ("sweep --steps 10**9", VALID, ["sweep", "{s}", "--steps", "1000000000"], "--steps"),
    ("search_steps 10**9", "[parallelism]\nsearch_steps = 1000000000\n", ["plan", "{s}"], "search_steps"),
]


@pytest.mark.parametrize("label,text,argv,fragment", SUBPROCESS_CASES, ids=[c[0] for c in SUBPROCESS_CASES])
def test_bad_input_as_a_real_command(tmp_path, label, text, argv, fragment):
    scenario = tmp_path / "s.toml"
    if text is None:
        scenario.write_bytes(VALID.encode("utf-16"))
    else:
        scenario.write_text(text)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "topolab", *[a.format(s=scenario) for a in argv]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=ANSWER_WITHIN_S + 10,
    )
    _assert_one_line_exit_2(proc.returncode, proc.stderr, time.monotonic() - t0, fragment)
    assert proc.stdout == ""


def test_corpus_is_large():
    cases = len(SCENARIO_CASES) + len(FILE_CASES) + len(FLAG_CASES) + len(SUBPROCESS_CASES)
    assert cases >= 150, cases


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/sbin/runuser").exists(), reason="needs root and runuser")
def test_a_real_unprivileged_user_is_told_root_is_needed():
    reachable = subprocess.run(
        ["/usr/sbin/runuser", "-u", "nobody", "--", "test", "-x", sys.executable, "-a", "-r", str(REPO / "topolab")],
        capture_output=True,
        timeout=ANSWER_WITHIN_S,
    )
    if reachable.returncode != 0:  # e.g. a checkout under /root, which only root may enter
        pytest.skip(f"user nobody cannot run {sys.executable} from this checkout")
    proc = subprocess.run(
        [
            "/usr/sbin/runuser",
            "-u",
            "nobody",
            "--",
            sys.executable,
            "-m",
            "topolab",
            "verify",
            "scenarios/smoke-12.toml",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=ANSWER_WITHIN_S + 10,
    )
    _assert_one_line_exit_2(proc.returncode, proc.stderr, 0.0, "needs root")
