"""Small plans built directly (no planner needed): for the emulator's tests and benchmarks.

`circulant_plan(12, (1, 5))` is the TopoOpt prototype's wiring (i +- 1, i +- 5) with
shortest-path next hops from networkx; `switch_plan(12)` puts one forwarding node in the
middle with one 4x cable per server (the ideal-switch baseline's 100 Gbps port).
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from contract.plan import Link, Plan, Routes, Summary, TrafficDemand


def _table_from_graph(g: nx.MultiGraph, nodes: int) -> tuple[tuple[int, ...], ...]:
    table = np.full((nodes, nodes), -1, dtype=int)
    for v in range(nodes):  # BFS from each destination; next hop of u is its parent towards v
        for u, parent in nx.bfs_predecessors(g, v):
            table[u, v] = parent
    return tuple(tuple(int(x) for x in row) for row in table)


def _plan(servers: int, switches: int, links: list[Link], link_gbps: float, topology: str, degree: int) -> Plan:
    nodes = servers + switches
    g = nx.MultiGraph()
    g.add_nodes_from(range(nodes))
    g.add_edges_from((l.a, l.b) for l in links)
    return Plan(servers=servers, degree=degree, link_gbps=link_gbps, latency_us=1.0, topology=topology,
                links=tuple(links), routes=Routes(kind="table", table=_table_from_graph(g, nodes)),
                demand=TrafficDemand(allreduce=(), mp=()),
                summary=Summary(diameter=0, mean_hops=0.0, bisection_gbps=0.0, relayed_fraction=0.0),
                switches=switches)


def circulant_plan(n: int, strides: tuple[int, ...] = (1, 5), link_gbps: float = 25.0) -> Plan:
    """C_n(strides): one cable i -- i+s for every stride (degree 2 * len(strides))."""
    links = [Link(i, (i + s) % n, link_gbps) for s in strides for i in range(n)]
    return _plan(n, 0, links, link_gbps, "topoopt", 2 * len(strides))


def switch_plan(n: int, degree: int = 4, link_gbps: float = 25.0) -> Plan:
    """n servers, each on one cable of ``degree * link_gbps`` to a forwarding node ``n``."""
    links = [Link(i, n, degree * link_gbps) for i in range(n)]
    return _plan(n, 1, links, link_gbps, "switch", degree)
