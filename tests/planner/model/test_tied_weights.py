"""Tied weights: a parameter read by several operators (a GPT's token embedding and its output
projection) is one parameter, counted once, whose gradient every strategy reduces once over
the servers holding its readers (contract.graph.SharedParameter; planner.model.model_import;
planner.strategy.strategies). The expected bytes are counted here by hand from the model's
shapes (tests/fixtures/models/gpt.py), not from the planner."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from contract.graph import GraphFormatError, OperatorGraph
from planner import build_plan, parse_scenario
from planner.model.fusion import fuse
from planner.model.graph_file import read_graph, write_graph
from planner.model.model_import import import_model
from planner.model.workload_graph import imported_graph
from planner.search import SearchConfig, search
from planner.strategy.strategies import (
    OpChoice,
    Strategy,
    data_parallel,
    fixed_strategy,
    op_traffic,
    traffic_arrays,
)

REPO = Path(__file__).resolve().parents[3]
GPT = "tests/fixtures/models/gpt.py"
SERVERS = 16
FLOAT = 4  # float32 parameters: 4 bytes of gradient each


def _fixture():
    spec = importlib.util.spec_from_file_location("gpt_fixture", REPO / GPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


G = _fixture()
W, V = G.WIDTH, G.VOCAB
BLOCK = 2 * W + (W * 3 * W + 3 * W) + (W * W + W) + 2 * W + (W * 4 * W + 4 * W) + (4 * W * W + W)
DENSE = G.LAYERS * BLOCK + 2 * W  # the blocks and the final norm
TOKENS = V * W  # the token table; the untied model's output projection is another V x W
POSITIONS = G.CONTEXT * W  # the position table (a table: hybrid places it, its gradient stays there)


@pytest.fixture(scope="module")
def tied() -> OperatorGraph:
    return import_model(f"{GPT}:build", REPO)


@pytest.fixture(scope="module")
def untied() -> OperatorGraph:
    return import_model(f"{GPT}:build_untied", REPO)


def _scenario(factory: str, strategy: str):
    return parse_scenario(
        {
            "cluster": {"servers": SERVERS, "degree": 4, "link_gbps": 25},
            "workload": {"batch_per_server": 8, "model": f"{GPT}:{factory}"},
            "parallelism": {"strategy": strategy},
        },
        str(REPO / "scenario.toml"),
    )


def _reduced(groups: dict[int, float]) -> float:
    """Gradient bytes reduced in all: each of the m coset groups of layout m reduces groups[m]."""
    return sum(m * b for m, b in groups.items())


def test_a_tied_weight_is_one_parameter_that_both_its_readers_share(tied, untied):
    assert tied.params == DENSE + TOKENS + POSITIONS
    assert untied.params == tied.params + TOKENS  # the untied projection's own V x W
    (shared,) = tied.shared
    assert (shared.params, shared.param_bytes) == (TOKENS, FLOAT * TOKENS)
    assert shared.ops == ("tokens/embedding", "head/mm")  # the first reader counts it
    counter = next(op for op in tied.ops if op.name == "tokens/embedding")
    assert counter.params == TOKENS
    assert next(op for op in tied.ops if op.name == "head/mm").params == 0
    assert untied.shared == ()


@pytest.mark.parametrize(
    "factory, strategy, expected",
    [
        ("build", "data", FLOAT * (DENSE + TOKENS + POSITIONS)),  # every unique parameter once
        ("build_untied", "data", FLOAT * (DENSE + 2 * TOKENS + POSITIONS)),
        # hybrid places the position table; the tied token weight is the projection's too, on
        # every server: its one gradient is AllReduced over all of them
        ("build", "hybrid", FLOAT * (DENSE + TOKENS)),
        # untied: the token table is placed (its rows' gradients stay there), the projection's
        # own V x W weight is dense
        ("build_untied", "hybrid", FLOAT * (DENSE + TOKENS)),
    ],
)
def test_plans_allreduce_the_bytes_counted_by_hand(factory, strategy, expected):
    plan = build_plan(_scenario(factory, strategy))
    assert plan.demand.allreduce_bytes == expected
    assert all(len(g.members) == SERVERS for g in plan.demand.allreduce)


def test_the_tied_gradient_is_not_dropped(tied, untied):
    def allreduce(graph: OperatorGraph, strategy: str) -> float:
        g = imported_graph(graph, 100.0)
        return _reduced(traffic_arrays(g, fixed_strategy(g, SERVERS, strategy), SERVERS, 8).groups)

    for strategy in ("data", "hybrid"):
        assert allreduce(tied, strategy) >= allreduce(untied, strategy) - FLOAT * TOKENS
    assert allreduce(untied, "data") - allreduce(tied, "data") == FLOAT * TOKENS  # its extra weight
    # hybrid places the untied token table (no reduction) and reduces the projection's own V x W;
    # tied, that V x W is one weight, reduced once: the same bytes, not V x W fewer
    assert allreduce(tied, "hybrid") == allreduce(untied, "hybrid")


def _choices(graph, **by_name: OpChoice) -> Strategy:
    """Data parallel but for the operators named (dense ones get ``dense`` if given)."""
    dense = by_name.pop("dense", None)
    out = []
    for op in graph.ops:
        if op.name in by_name:
            out.append(by_name[op.name])
        elif dense is not None and not op.is_embedding:
            out.append(dense)
        else:
            out.append(OpChoice())
    return tuple(out)


@pytest.mark.parametrize(
    "choices, expected",
    [
        # the token table placed on server 3 (a move the search makes): the projection still
        # holds the weight everywhere, so the whole gradient is reduced over all servers
        ({"tokens/embedding": OpChoice(owner=3)}, {1: FLOAT * (DENSE + TOKENS + POSITIONS)}),
        # every dense operator tensor-parallel over pairs, the table replicated: the weight is
        # whole on every server (the table), so it is reduced in full over all of them
        ({"dense": OpChoice(mp=2)}, {1: FLOAT * (TOKENS + POSITIONS), 2: FLOAT * DENSE / 2}),
        # both: the table placed, the projection's halves on the pairs' cosets: reduced there
        (
            {"dense": OpChoice(mp=2), "tokens/embedding": OpChoice(owner=3)},
            {1: FLOAT * POSITIONS, 2: FLOAT * (DENSE + TOKENS) / 2},
        ),
    ],
)
def test_every_strategy_reduces_the_tied_gradient_where_its_readers_hold_it(tied, choices, expected):
    g = imported_graph(tied, 100.0)
    groups = traffic_arrays(g, _choices(g, **choices), SERVERS, 8).groups
    assert groups == pytest.approx(expected)


def test_the_iteration_reduces_the_tied_gradient_after_the_last_backward_that_adds_to_it(tied):
    """What the schedule and the prediction replay (op_traffic per operator) carries the tied
    bytes once, issued with the token table: the last reader whose backward adds to them."""
    g = imported_graph(tied, 100.0)
    strategy = fixed_strategy(g, SERVERS, "hybrid")
    traffic = [op_traffic(g, strategy, i, SERVERS, 8, 100.0) for i in range(len(g))]
    assert sum(t.ar_layout * t.ar_bytes for t in traffic) == FLOAT * (DENSE + TOKENS)
    head, tokens = g.index["head/mm"], g.index["tokens/embedding"]
    assert (traffic[tokens].ar_layout, traffic[tokens].ar_bytes) == (1, FLOAT * TOKENS)
    assert traffic[head].ar_bytes == 0.0


def test_fusion_keeps_the_tie_and_the_search_reduces_it(tied):
    g = imported_graph(tied, 100.0)
    fused = fuse(g)
    assert len(fused.shared) == 1 and len(fused.shared[0].ops) == 2
    assert _reduced(traffic_arrays(fused, data_parallel(fused), SERVERS, 8).groups) == pytest.approx(
        FLOAT * tied.params
    )
    result = search(_scenario("build", "search"), SearchConfig(steps=40, seed=1))
    placed = sum(
        op.param_bytes
        for op, c in zip(result.graph.ops, result.strategy)
        if op.is_embedding and c.owner >= 0 and "tokens/embedding" not in op.members
    )
    assert result.demand.allreduce_bytes == pytest.approx(FLOAT * tied.params - placed, abs=SERVERS)


def test_the_graph_file_records_the_tie_and_old_files_read(tied, tmp_path):
    path = tmp_path / "gpt.json"
    write_graph(tied, path)
    assert read_graph(path) == tied
    doc = json.loads(path.read_text())
    assert doc["shared"] == [
        {
            "name": "tokens.weight",
            "params": TOKENS,
            "param_bytes": FLOAT * TOKENS,
            "ops": ["tokens/embedding", "head/mm"],
        }
    ]
    del doc["shared"]  # a file without the field (written before it existed): every reader its own
    assert OperatorGraph.from_dict(doc).shared == ()


@pytest.mark.parametrize(
    "shared, field",
    [
        ([{"name": "w", "params": 1, "param_bytes": 4, "ops": ["tokens/embedding", "nowhere"]}], "shared[0].ops[1]"),
        ([{"name": "w", "params": 1, "param_bytes": 4, "ops": ["tokens/embedding"]}], "shared[0].ops"),
        ([{"name": "w", "params": 1, "param_bytes": 4, "ops": ["head/mm", "tokens/embedding"]}], "shared[0].ops[0]"),
        ([{"name": "w", "params": 1, "ops": ["tokens/embedding", "head/mm"]}], "shared[0].param_bytes"),
        ([{"name": "w", "params": 1, "param_bytes": 4, "ops": ["tokens/embedding", "head/mm"], "x": 1}], "shared[0].x"),
        ("tokens.weight", "shared"),
    ],
)
def test_a_bad_shared_list_names_the_field(tied, shared, field):
    doc = tied.to_dict()
    doc["shared"] = shared
    with pytest.raises(GraphFormatError) as err:
        OperatorGraph.from_dict(doc)
    assert err.value.field == field
