"""Scenario validation: each bad input is one line on stderr naming file and key, exit 2."""

import json
import subprocess
import sys

import pytest

from planner import load_scenario
from planner.scenario import with_overrides
from topolab.cli import main

GOOD = """
[cluster]
servers = 12
degree = 4
link_gbps = 25
[workload]
model = "dlrm"
[topology]
kind = "topoopt"
"""

BAD = [
    ("malformed", "[cluster\nservers = 12", "", "malformed TOML"),
    ("unknown key", GOOD.replace("degree = 4", "degree = 4\nlinks = 3"), "cluster.links", "unknown key"),
    ("unknown table", GOOD + "\n[network]\nx = 1\n", "network", "unknown table"),
    ("wrong type", GOOD.replace("servers = 12", 'servers = "twelve"'), "cluster.servers", "expected int"),
    ("bool as int", GOOD.replace("servers = 12", "servers = true"), "cluster.servers", "expected int"),
    ("servers < 2", GOOD.replace("servers = 12", "servers = 1"), "cluster.servers", ">= 2"),
    ("degree < 1", GOOD.replace("degree = 4", "degree = 0"), "cluster.degree", ">= 1"),
    ("degree >= servers", GOOD.replace("degree = 4", "degree = 12"), "cluster.degree", "below cluster.servers"),
    (
        "odd degree",
        GOOD.replace("degree = 4", "degree = 3") + '[parallelism]\nstrategy = "data"\n',
        "cluster.degree",
        "even degree",
    ),
    ("unknown model", GOOD.replace('"dlrm"', '"gpt5"'), "workload.model", "not one of"),
    ("unknown topology", GOOD.replace('"topoopt"', '"hypercube"'), "topology.kind", "not one of"),
    (
        "group size",
        GOOD.replace('"dlrm"', '"bert"') + '[parallelism]\nstrategy = "hybrid"\nmp_degree = 5\n',
        "parallelism.mp_degree",
        "divide",
    ),
    ("zero rate", GOOD.replace("link_gbps = 25", "link_gbps = 0"), "cluster.link_gbps", ">= 0.001"),
    (
        "torus degree",
        GOOD.replace('"topoopt"', '"torus"').replace("degree = 4", "degree = 6"),
        "cluster.degree",
        "degree 4",
    ),
    (
        "torus shape",
        GOOD.replace('"topoopt"', '"torus"').replace("servers = 12", "servers = 13"),
        "cluster.servers",
        "a x b",
    ),
    ("negative emulated rate", GOOD + "[emulation]\nlink_mbps = -5\n", "emulation.link_mbps", ">= 0.1"),
    ("rate word", GOOD + '[emulation]\nlink_mbps = "fast"\n', "emulation.link_mbps", '"auto"'),
]


@pytest.mark.parametrize("label,text,key,fragment", BAD, ids=[b[0] for b in BAD])
def test_bad_scenario_is_one_line_exit_2(tmp_path, capsys, label, text, key, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(path) in err and key in err and fragment in err, err


def test_auto_rate_reads_and_writes_back(tmp_path):
    """``link_mbps = "auto"``: the default rate as the highest, the choice left to the run, and
    the table written back as the file said it."""
    path = tmp_path / "auto.toml"
    path.write_text(GOOD + '[emulation]\nlink_mbps = "auto"\n')
    s = load_scenario(path)
    assert s.emulation.auto_rate and s.emulation.link_mbps == 100.0
    assert s.emulation.table() == {"link_mbps": "auto"}
    assert with_overrides(s, cluster={"servers": 16}).emulation.auto_rate
    path.write_text(GOOD)  # no rate stated: auto is the default
    assert load_scenario(path).emulation.auto_rate
    path.write_text(GOOD + "[emulation]\nlink_mbps = 100\n")  # a stated rate is kept, and written back
    stated = load_scenario(path)
    assert not stated.emulation.auto_rate and stated.emulation.table() == {"link_mbps": 100.0}
    assert not with_overrides(stated, cluster={"servers": 16}).emulation.auto_rate


def test_missing_file(capsys):
    assert main(["plan", "/nonexistent/scenario.toml"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_good_scenario_and_defaults(tmp_path):
    path = tmp_path / "ok.toml"
    path.write_text("[cluster]\nservers = 8\ndegree = 2\n")
    s = load_scenario(path)
    assert s.cluster.servers == 8 and s.cluster.link_gbps == 25.0 and s.topology.kind == "topoopt"


def test_every_shipped_scenario_plans(scenario_dir):
    files = sorted(scenario_dir.glob("*.toml"))
    assert len(files) >= 10
    for f in files:
        load_scenario(f)
    models = {load_scenario(f).workload.model for f in files if load_scenario(f).cluster.servers == 128}
    assert models == {"dlrm", "candle", "bert", "ncf", "resnet50", "vgg16"}


def test_cli_json_and_out(tmp_path, scenario_dir):
    out = tmp_path / "plan.json"
    proc = subprocess.run(
        [sys.executable, "-m", "topolab", "plan", str(scenario_dir / "topoopt-12.toml"), "--json", "--out", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(proc.stdout)
    assert data["strides"] == [1, 5] and data["summary"]["diameter"] == 3
    assert json.loads(out.read_text()) == data
    human = subprocess.run(
        [sys.executable, "-m", "topolab", "plan", str(scenario_dir / "topoopt-12.toml")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "±1, ±5" in human and "diameter        3 hops" in human


def test_docs_list_every_key_with_its_default_and_range():
    from dataclasses import fields
    from pathlib import Path

    from contract import emulation
    from contract.physics import MAX_MTU
    from planner import scenario
    from planner.model.workload_graph import SOURCE_KEYS

    docs = Path(__file__).resolve().parents[2] / "docs" / "scenarios.md"
    text = docs.read_text()
    assert "docs/scenarios.md" in scenario.__doc__
    # the [emulation] table's maxima live with its schema (contract.emulation)
    bounds = scenario.BOUNDS | {
        ("emulation", "link_mbps"): (emulation.MIN_LINK_MBPS, True, emulation.MAX_LINK_MBPS),
        ("emulation", "budget_mbps"): (0, True, emulation.MAX_LINK_MBPS),
        ("emulation", "mtu"): (576, True, MAX_MTU),
    }
    for section, cls in scenario._SECTIONS.items():
        part = text.split(f"## [{section}]")[1].split("\n## ")[0]
        if section == "workload":  # the model may be named by one of several keys
            for key in SOURCE_KEYS:
                assert any(line.startswith(f"| `{key}` |") for line in part.splitlines()), key
        for f in fields(cls):
            if section == "emulation" and f.name not in emulation.TABLE_KEYS:
                assert f"| `{f.name}` |" not in part, f"run-time setting {f.name} documented as a scenario key"
                continue
            if f.default is None and section == "workload":  # the imported graph: not a key of the file
                continue
            row = next((line for line in part.splitlines() if line.startswith(f"| `{f.name}` |")), None)
            assert row is not None, f"{section}.{f.name} missing from {docs}"
            if isinstance(f.default, str) or f.default is None:  # None: the file's ""
                default = f'`"{f.default or ""}"`'
            else:
                default = "`[]`" if f.default == () else f"{f.default:g}"
            assert row.split("|")[2].strip() == default, row
            bound = bounds.get((section, f.name))
            if bound is not None and f.name not in ("seed", "mp_degree"):
                documented_max = row.split("|")[3].split("..")[1].split()[0].rstrip(",")
                assert float(documented_max) == bound[2], row
