"""TotientPerms / SelectPermutations against the authors' rule (docs/algorithms.md section 1)."""

from math import gcd

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner import build_plan, parse_scenario
from planner.topology.totient import select_permutations, totient_strides


def test_paper_example_n12():
    assert totient_strides(12) == [1, 5, 7, 11]  # the whole list, p and n - p
    assert totient_strides(12, 6) == [2, 10]
    assert totient_strides(12, 4) == [3, 9]
    assert totient_strides(12, 3) == [4, 8]
    assert totient_strides(12, 2) == [6]


@given(st.integers(2, 400))
def test_full_ring_candidates_are_the_coprime_strides(n):
    cands = totient_strides(n)
    assert cands == [p for p in range(1, n) if gcd(p, n) == 1]
    # every candidate ring visits every server
    for p in cands[:5]:
        assert len({(i * p) % n for i in range(n)}) == n


@given(st.integers(2, 200), st.data())
def test_subgroup_candidates_stay_on_cosets(n, data):
    g = data.draw(st.sampled_from([k for k in range(2, n + 1) if n % k == 0]))
    for p in totient_strides(n, g):
        assert p % (n // g) == 0
        ring = {(i * p) % n for i in range(g)}
        assert ring == set(range(0, n, n // g))  # the coset of 0, visited completely


def test_select_is_geometric_and_distinct():
    assert select_permutations(totient_strides(16), 4, 16) == [1, 3, 5, 9]
    assert select_permutations(totient_strides(128), 4, 128) == [1, 5, 13, 39]
    assert select_permutations(totient_strides(1024), 4, 1024) == [1, 7, 33, 181]
    assert select_permutations([1], 3) == [1, 1, 1]  # fewer candidates: parallel rings


@given(st.integers(3, 300), st.integers(1, 6))
def test_select_never_takes_a_stride_and_its_negation(n, m):
    chosen = select_permutations(totient_strides(n), m, n)
    distinct = {min(p, n - p) for p in chosen}
    assert len(chosen) == m
    assert len(distinct) == min(m, len({min(p, n - p) for p in totient_strides(n)}))


def test_1024_servers_degree_8_has_diameter_8():
    plan = build_plan(
        parse_scenario(
            {
                "cluster": {"servers": 1024, "degree": 8},
                "workload": {"model": "resnet50"},
                "parallelism": {"strategy": "data"},
            }
        )
    )
    assert plan.strides == (1, 7, 33, 181) and plan.summary.diameter == 8


def _independent_diameter(n, strides):
    g = nx.circulant_graph(n, strides)
    return nx.diameter(g)


@pytest.mark.parametrize("n,d", [(12, 4), (16, 4), (30, 6), (64, 8), (128, 8), (432, 8), (1024, 8), (97, 6)])
def test_data_parallel_plan_matches_rule(n, d):
    s = parse_scenario(
        {"cluster": {"servers": n, "degree": d}, "workload": {"model": "resnet50"}, "parallelism": {"strategy": "data"}}
    )
    plan = build_plan(s)
    expected = select_permutations(totient_strides(n), d // 2, n)
    assert list(plan.strides) == expected
    assert plan.summary.diameter == _independent_diameter(n, expected)


def test_prototype_is_i_plus_minus_1_and_5():
    s = parse_scenario({"cluster": {"servers": 12, "degree": 4}})
    plan = build_plan(s)
    assert plan.strides == (1, 5) and plan.summary.diameter == 3
    pairs = sorted((min(l.a, l.b), max(l.a, l.b)) for l in plan.links)
    assert pairs == sorted((min(i, (i + p) % 12), max(i, (i + p) % 12)) for p in (1, 5) for i in range(12))


def test_select_half_range_ends_at_n_over_2():
    # the geometric sequence from 1 to the largest candidate <= n/2: ratio = 511^(1/4) = 4.75
    assert select_permutations(totient_strides(1024), 4, 1024, "half") == [1, 5, 23, 109]
    assert select_permutations(totient_strides(12), 2, 12, "half") == [1, 5]  # as "full" here
    with pytest.raises(ValueError, match="stride_range 'whole'"):
        select_permutations(totient_strides(12), 2, 12, "whole")


@given(st.integers(3, 300), st.integers(1, 6))
def test_select_half_range_strides_stay_at_or_below_n_over_2(n, m):
    chosen = select_permutations(totient_strides(n), m, n, "half")
    rings = [p for p in totient_strides(n) if 2 * p <= n]  # each ring once
    assert len(chosen) == m
    if m <= len(rings):  # enough distinct rings: m of them, each written as its stride <= n/2
        assert len(set(chosen)) == m and set(chosen) <= set(rings)


def test_1024_servers_half_range_plan_cuts_fewer_cables_over_4_machines():
    from planner.topology.partition import partition_network

    scenario = {
        "cluster": {"servers": 1024, "degree": 8},
        "workload": {"model": "resnet50"},
        "parallelism": {"strategy": "data"},
    }
    half = build_plan(parse_scenario({**scenario, "topology": {"stride_range": "half"}}))
    assert half.strides == (1, 5, 23, 109) and half.summary.diameter == _independent_diameter(1024, half.strides) == 9
    assert partition_network(half.network, 4).cut_fraction <= 0.15
