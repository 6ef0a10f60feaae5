"""Rerouting around dead cables: every path avoids them and is shortest in what remains."""

from __future__ import annotations

import networkx as nx
import pytest

from planner import load_scenario
from planner.build import build_plan
from planner.topology.reroute import cable_index, ranks_using, rerouted_plan
from tests.conftest import SCENARIOS


@pytest.fixture(scope="module")
def plan():
    return build_plan(load_scenario(SCENARIOS / "topoopt-12.toml"))


def _remaining_graph(plan, dead):
    g = nx.MultiGraph()
    g.add_nodes_from(range(plan.nodes))
    g.add_edges_from((l.a, l.b) for k, l in enumerate(plan.links) if k not in dead)
    return g


@pytest.mark.parametrize("dead", [[0], [0, 13], [5, 6, 7]])
def test_every_path_avoids_the_dead_cables_and_is_shortest(plan, dead):
    new = rerouted_plan(plan, dead)
    g = _remaining_graph(plan, set(dead))
    dist = dict(nx.all_pairs_shortest_path_length(g))
    gone = {frozenset((plan.links[k].a, plan.links[k].b)) for k in dead}
    changed = 0
    for u in range(plan.servers):
        for v in range(plan.servers):
            if u == v:
                continue
            path = new.path(u, v)
            hops = {frozenset(h) for h in zip(path, path[1:])}
            assert not hops & gone, (u, v, path)
            assert all(g.has_edge(a, b) for a, b in zip(path, path[1:]))
            assert len(path) - 1 == dist[u][v], (u, v, path)
            changed += path != plan.path(u, v)
    assert changed > 0  # the dead cables did carry routes before


def test_rings_keep_their_order_and_their_steps_avoid_the_dead_cable(plan):
    k = cable_index(plan, 0, 1)
    new = rerouted_plan(plan, [k])
    assert new.rings == plan.rings and new.links == plan.links
    for ring in new.rings:
        for a, b in zip(ring, ring[1:] + ring[:1]):
            path = new.path(a, b)
            assert frozenset((0, 1)) not in {frozenset(h) for h in zip(path, path[1:])}


def test_degrade_scales_one_cable_and_keeps_routes(plan):
    new = rerouted_plan(plan, [], {3: 0.5})
    assert new.links[3].gbps == pytest.approx(plan.links[3].gbps * 0.5)
    assert [l.gbps for i, l in enumerate(new.links) if i != 3] == [l.gbps for i, l in enumerate(plan.links) if i != 3]
    assert (new.next_hop == plan.next_hop).all()


def test_a_cut_that_disconnects_is_refused(plan):
    around_0 = [k for k, l in enumerate(plan.links) if 0 in (l.a, l.b)]
    with pytest.raises(ValueError, match="no longer connected"):
        rerouted_plan(plan, around_0)


def test_cable_index_and_ranks_using(plan):
    k = cable_index(plan, 1, 0)
    assert k is not None and {plan.links[k].a, plan.links[k].b} == {0, 1}
    assert cable_index(plan, 0, 3) is None
    assert ranks_using(plan, [(0, 1), (2, 3)], k) == [0, 1]
    assert ranks_using(plan, [(2, 3)], k) == []
