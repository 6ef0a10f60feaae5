"""Imported models: PyTorch factories traced into operator graphs, graph files, the plan that
carries its graph, and the one-line errors of bad input (planner.model.model_import, graph_file,
workload_graph; docs/models.md). The models are tiny (tests/fixtures/models/tiny.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from torch.utils.flop_counter import FlopCounterMode

from contract.errors import UsageError
from contract.graph import GraphFormatError, OperatorGraph
from contract.plan import Plan, Workload
from planner import build_plan, parse_scenario
from planner.cost.iteration import iteration_schedule
from planner.model.fusion import fuse
from planner.model.graph_file import read_graph, write_graph
from planner.model.model_import import import_model
from planner.model.workload_graph import workload_graph
from planner.strategy.strategies import fixed_strategy, op_traffic

REPO = Path(__file__).resolve().parents[3]
TINY = "tests/fixtures/models/tiny.py"
BLOCK_TORCH = "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"


@pytest.fixture(scope="module")
def tiny() -> OperatorGraph:
    return import_model(f"{TINY}:build_meta", REPO)


def _scenario(workload: dict, strategy: str = "data", source: str = "<scenario>"):
    return parse_scenario(
        {
            "cluster": {"servers": 12, "degree": 4, "link_gbps": 25},
            "workload": {"batch_per_server": 16, **workload},
            "parallelism": {"strategy": strategy},
        },
        source,
    )


def test_every_parameter_once_and_torch_counts_the_same_flops_as_a_whole_training_step(tiny):
    sys.path.insert(0, str(REPO / "tests/fixtures/models"))
    try:
        import tiny as fixture
    finally:
        sys.path.pop(0)
    model, (x,) = fixture.build()
    assert tiny.params == sum(p.numel() for p in model.parameters())
    assert tiny.param_bytes == 4 * tiny.params
    with FlopCounterMode(display=False) as fwd:
        out = model(x)
    with FlopCounterMode(display=False) as bwd:
        out.sum().backward()
    assert tiny.forward_flops == fwd.get_total_flops()
    assert tiny.backward_flops == bwd.get_total_flops()
    assert tiny.batch == fixture.BATCH
    names = [op.name for op in tiny.ops]
    assert len(set(names)) == len(names) and all("+" not in n for n in names)
    conv = next(op for op in tiny.ops if op.kind == "conv")
    assert conv.params == 8 * 3 * 3 * 3 + 8 and conv.out_bytes == fixture.BATCH * 8 * 8 * 8 * 4
    assert conv.backward_flops == conv.forward_flops  # its input needs no gradient: the weights' only


def test_embedding_tables_are_tables_and_hybrid_places_them():
    g = import_model(f"{TINY}:build_tables", REPO)
    tables = [op for op in g.ops if op.kind == "embedding"]
    assert [op.params for op in tables] == [16_000, 8_000]
    s = _scenario({"model": f"{TINY}:build_tables"}, strategy="hybrid", source=str(REPO / "x.toml"))
    plan = build_plan(s)
    assert len(plan.placement.tables) == 2 and plan.demand.mp_bytes > 0


def test_graph_file_round_trip_and_plans_equal_the_traced_model(tiny, tmp_path):
    path = tmp_path / "tiny.json"
    write_graph(tiny, path)
    assert read_graph(path) == tiny
    assert json.loads(path.read_text())["format"] == "topolab.opgraph/1"
    from_model = build_plan(_scenario({"model": f"{TINY}:build_meta"}, source=str(REPO / "x.toml")))
    from_file = build_plan(_scenario({"graph": str(path)}))
    assert from_file.demand == from_model.demand
    assert from_model.demand.allreduce_bytes == tiny.param_bytes  # data parallel: every gradient once
    assert from_file.workload.graph == tiny and from_model.workload.graph == tiny


def test_per_sample_figures_and_own_backward_flops_reach_the_schedule(tiny):
    w = Workload("tiny", batch_per_server=16, device_tflops=1.0, graph=tiny)
    g = workload_graph(w)
    assert g.flops == pytest.approx(tiny.forward_flops / tiny.batch)
    assert sum(op.backward_flops for op in g.ops) == pytest.approx(tiny.backward_flops / tiny.batch)
    strategy = fixed_strategy(g, 12, "data")
    seconds = sum(op_traffic(g, strategy, i, 12, 16, 1.0).backward[0] for i in range(len(g)))
    assert seconds == pytest.approx(16 * tiny.backward_flops / tiny.batch / 1e12)
    fused = fuse(g)
    assert fused.param_bytes == g.param_bytes
    assert sum(op.backward_flops for op in fused.ops) == pytest.approx(sum(op.backward_flops for op in g.ops))


def test_measured_durations_override_the_flop_model(tiny):
    timed = OperatorGraph(
        tiny.name,
        tiny.source,
        tiny.batch,
        tuple(type(op)(**{**op.__dict__, "forward_us": 100.0, "backward_us": 300.0}) for op in tiny.ops),
    )
    g = workload_graph(Workload("t", batch_per_server=tiny.batch, device_tflops=50.0, graph=timed))
    t = op_traffic(g, fixed_strategy(g, 4, "data"), 0, 4, tiny.batch, 50.0)
    assert t.compute[0] == pytest.approx(100e-6) and t.backward[0] == pytest.approx(300e-6)


def test_a_saved_plan_of_an_imported_model_predicts_in_a_fresh_process_without_torch(tiny, tmp_path):
    plan = build_plan(_scenario({"model": f"{TINY}:build_meta"}, strategy="hybrid", source=str(REPO / "x.toml")))
    again = Plan.from_json(plan.to_json())
    assert again == plan and again.workload == plan.workload
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    script = BLOCK_TORCH + (
        "from contract.plan import Plan\nfrom planner.cost.iteration import iteration_schedule\n"
        f"print(iteration_schedule(Plan.from_json(open({str(path)!r}).read())).op_count())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert int(out.stdout) == iteration_schedule(plan).op_count()


def test_a_graph_file_plans_without_torch_and_a_torch_model_says_how_to_install_it(tiny, tmp_path):
    write_graph(tiny, tmp_path / "g.json")
    (tmp_path / "graph.toml").write_text('[workload]\ngraph = "g.json"\n[parallelism]\nstrategy = "data"\n')
    (tmp_path / "model.toml").write_text(f'[workload]\nmodel = "{REPO / TINY}:build"\n')
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = BLOCK_TORCH + "from topolab.cli import main; sys.exit(main(sys.argv[1:]))"
    ok = subprocess.run(
        [sys.executable, "-c", run, "plan", str(tmp_path / "graph.toml")], capture_output=True, text=True, env=env
    )
    assert ok.returncode == 0, ok.stderr
    assert f"{tiny.params:,} parameters" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-c", run, "plan", str(tmp_path / "model.toml")], capture_output=True, text=True, env=env
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert len(bad.stderr.strip().splitlines()) == 1 and "pip install" in bad.stderr and "torch" in bad.stderr


@pytest.mark.parametrize(
    "spec,expect",
    [
        ("missing.py:build", "missing.py: no such file"),
        (f"{TINY}:nope", "has no function 'nope'"),
        (f"{TINY}:NOT_A_FUNCTION", "is not a function"),
        (f"{TINY}:build_raises", "build_raises() raised RuntimeError: no weights on this machine"),
        (f"{TINY}:build_not_module", "returned object, not (torch.nn.Module, example_inputs)"),
        (f"{TINY}:build_branchy", "data-dependent control flow at tests/fixtures/models/tiny.py:"),
        (f"{TINY}:build_wrong_shape", "the example inputs do not fit the model"),
        ("no_such_package.models:build", "no_such_package.models: no such module"),
        ("json", "expected 'file.py:factory' or 'package.module:factory'"),
    ],
)
def test_bad_models_are_one_line_naming_the_file_and_the_cause(spec, expect, monkeypatch):
    monkeypatch.chdir(REPO)
    with pytest.raises(UsageError) as err:
        import_model(spec)
    assert expect in str(err.value) and "\n" not in str(err.value)


def test_the_branch_is_named_by_its_line():
    with pytest.raises(UsageError, match=r"tiny\.py:\d+ `if h\.sum\(\) > 0:`"):
        import_model(f"{TINY}:build_branchy", REPO)


GOOD_OP = {
    "name": "a",
    "kind": "dense",
    "params": 2,
    "param_bytes": 8,
    "forward_flops": 4.0,
    "backward_flops": 8.0,
    "out_bytes": 16,
    "inputs": [],
}


def _doc(**changes):
    doc = {"format": "topolab.opgraph/1", "name": "m", "source": "", "batch": 2, "ops": [dict(GOOD_OP)]}
    doc.update(changes)
    return doc


@pytest.mark.parametrize(
    "doc,field",
    [
        (_doc(format="topolab.opgraph/9"), "format"),
        (_doc(batch=0), "batch"),
        (_doc(batch="2"), "batch"),
        (_doc(ops=[]), "ops"),
        (_doc(extra=1), "extra"),
        (_doc(ops=[{k: v for k, v in GOOD_OP.items() if k != "params"}]), "ops[0].params"),
        (_doc(ops=[{**GOOD_OP, "forward_flops": -1.0}]), "ops[0].forward_flops"),
        (_doc(ops=[{**GOOD_OP, "inputs": ["b"]}]), "ops[0].inputs"),
        (_doc(ops=[GOOD_OP, GOOD_OP]), "ops[1].name"),
        (_doc(ops=[{**GOOD_OP, "name": "a+b"}]), "ops[0].name"),
        (_doc(ops=[{**GOOD_OP, "colour": "red"}]), "ops[0].colour"),
        ([1, 2], "(document)"),
    ],
)
def test_bad_graph_files_name_the_field(doc, field, tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError) as err:
        read_graph(path)
    assert str(err.value).startswith(f"{path}: {field}: ")
    with pytest.raises(GraphFormatError):
        OperatorGraph.from_dict(doc)


def test_a_good_graph_document_reads(tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps(_doc()))
    g = read_graph(path)
    assert g.params == 2 and g.ops[0].forward_us is None


@pytest.mark.parametrize(
    "content,expect", [(None, "no such graph file"), ("{nope", "not JSON"), (b"\xff\xfe", "not UTF-8")]
)
def test_unreadable_graph_files(content, expect, tmp_path):
    path = tmp_path / "g.json"
    if isinstance(content, str):
        path.write_text(content)
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(UsageError, match=expect):
        read_graph(path)


def test_the_workload_section_names_one_model(tmp_path):
    with pytest.raises(UsageError, match="workload.graph: set one of model, graph, chakra"):
        _scenario({"model": "bert", "graph": "g.json"})
    with pytest.raises(UsageError, match="workload.model: 'gpt5' is not one of"):
        _scenario({"model": "gpt5"})
    with pytest.raises(UsageError, match="no such graph file"):
        _scenario({"graph": str(tmp_path / "missing.json")})


def test_overrides_keep_an_imported_graph_and_another_model_replaces_it(tiny, tmp_path):
    from planner.scenario import with_overrides

    write_graph(tiny, tmp_path / "g.json")
    s = _scenario({"graph": str(tmp_path / "g.json")})
    wider = with_overrides(s, cluster={"degree": 6})
    assert wider.workload == s.workload and wider.cluster.degree == 6
    assert with_overrides(s, workload={"model": "bert"}).workload.graph is None


def test_a_deep_residual_graph_schedules_without_repeating_dependencies():
    from contract.graph import GraphOperator

    ops, prev = [GraphOperator("stem", "dense", 10, 40, 1e6, 2e6, 64)], "stem"
    for i in range(40):  # x -> a -> b -> add(x, b): every join doubled the ancestors' ops before
        ops += [
            GraphOperator(f"a{i}", "dense", 10, 40, 1e6, 2e6, 64, (prev,)),
            GraphOperator(f"b{i}", "dense", 10, 40, 1e6, 2e6, 64, (f"a{i}",)),
            GraphOperator(f"add{i}", "other", 0, 0, 0.0, 0.0, 64, (prev, f"b{i}")),
        ]
        prev = f"add{i}"
    graph = OperatorGraph("residual", "test", 1, tuple(ops))
    plan = build_plan(_scenario({"graph": graph}))
    schedule = iteration_schedule(plan)
    afters = [op.after for program in schedule.programs for ops in program.values() for op in ops]
    assert afters and all(len(a) == len(set(a)) for a in afters)
