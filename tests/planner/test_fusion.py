"""Operator DAGs of the zoo and their fusion (docs/algorithms.md section 9)."""

import pytest

from planner.fusion import FusionConfig, fuse, operator_cost
from planner.opgraph import Operator, OpGraph, model_graph
from planner.zoo import MODELS, get_model


@pytest.mark.parametrize("model", MODELS)
def test_graph_covers_every_layer_once_in_topological_order(model):
    g = model_graph(model)
    g.validate()
    assert sorted(op.name for op in g.ops) == sorted(l.name for l in get_model(model).layers)
    assert g.params == get_model(model).params


def test_dlrm_tables_and_bottom_mlp_feed_the_interaction():
    g = model_graph("dlrm")
    inter = g.ops[g.index["interaction"]]
    assert {f"emb{i}" for i in range(16)} | {"bot2"} == set(inter.inputs)
    assert g.ops[g.index["top0"]].inputs == ("interaction",)


@pytest.mark.parametrize("model", MODELS)
def test_fusion_conserves_work_and_shrinks_the_graph(model):
    g = model_graph(model)
    f = fuse(g)
    f.validate()
    assert len(f) < len(g)
    assert f.params == g.params
    assert f.flops == pytest.approx(g.flops)
    members = [m for op in f.ops for m in op.members]
    assert sorted(members) == sorted(op.name for op in g.ops)  # a partition of the operators


@pytest.mark.parametrize("model", ["dlrm", "ncf"])
def test_embedding_tables_are_never_fused(model):
    g = model_graph(model)
    f = fuse(g)
    tables = [op for op in f.ops if op.is_embedding]
    assert len(tables) == len([op for op in g.ops if op.is_embedding])
    assert all(len(op.members) == 1 for op in tables)


def test_identical_chain_layers_merge_but_dissimilar_ones_do_not():
    # BERT: 24 identical encoders (plus the cheap pooler) fuse into one group; the word
    # embedding matrix (gradient heavy, almost no FLOPs) stays a group of its own.
    f = fuse(model_graph("bert"))
    names = {op.members[0]: op for op in f.ops}
    assert len(names["enc0"].members) == 25 and "pooler" in names["enc0"].members
    assert names["embed"].members == ("embed",)


def test_cheap_operator_is_attached_to_a_neighbour():
    ops = (
        Operator("a", "dense", 10_000_000, 1e9, 4096, (), ("a",)),
        Operator("tiny", "dense", 0, 10.0, 4096, ("a",), ("tiny",)),
        Operator("b", "dense", 10, 1e10, 4096, ("a",), ("b",)),  # compute heavy: not like `a`
        Operator("c", "dense", 10_000_000, 1e9, 4, ("tiny", "b"), ("c",)),
    )
    g = OpGraph("toy", ops)
    f = fuse(g, FusionConfig())
    owner = {m: op.name for op in f.ops for m in op.members}
    assert owner["tiny"] in (owner["a"], owner["c"])
    assert owner["b"] != owner["a"]
    assert operator_cost(ops[1], FusionConfig()) < operator_cost(ops[0], FusionConfig())
