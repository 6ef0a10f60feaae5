"""Partition a network's nodes over machines: few cables cross, every machine carries its share.

When one emulation spans ``m`` machines, every cable whose ends land on different machines
becomes a tunnel over the machines' underlay (docs/cluster.md). The partition therefore solves
balanced graph partitioning: assign each node to one of ``m`` parts so that the number of
cut cables

    cut(P) = |{ (u, v) in cables : P(u) != P(v) }|

is minimal subject to every part's load being close to ``total load / m``. A node's load is
the traffic it drives: the sum of its cables' rates in plain-link units (``gbps / link_gbps``),
i.e. its degree on a uniform network. Shaping, forwarding and the workers' reduction all cost
CPU in proportion to that traffic (docs/cluster.md, "Sizing").

Two engines, same result type:

- ``pymetis`` (METIS multilevel k-way partitioning; Karypis and Kumar, "A fast and high
  quality multilevel scheme for partitioning irregular graphs", SIAM J. Sci. Comput. 1998)
  with node weights = load and edge weights = parallel cables, when pymetis is importable;
- else recursive Kernighan-Lin bisection (Kernighan and Lin, "An efficient heuristic procedure
  for partitioning graphs", Bell Syst. Tech. J. 1970; ``networkx.algorithms.community.
  kernighan_lin_bisection``): the part count ``m`` is split ``ceil(m/2) : floor(m/2)``, the
  nodes in breadth-first order are cut where the first side reaches its share of the load,
  Kernighan-Lin then swaps pairs of nodes across the cut (sizes stay) while the cut shrinks,
  kept only if the load stays balanced, and each side is partitioned again.
"""

from __future__ import annotations

import importlib.util
from collections import Counter, deque
from dataclasses import dataclass

import networkx as nx
from networkx.algorithms.community import kernighan_lin_bisection

from contract.network import Network

METHODS = ("auto", "pymetis", "kernighan-lin")
# Kernighan-Lin passes per bisection: networkx's default; more passes did not lower the cut of
# the 1024-server degree-8 TopoOpt graph.
KL_MAX_PASSES = 10


@dataclass(frozen=True)
class Partition:
    """Which machine each node runs on, and what that costs."""

    machines: int
    assignment: tuple[int, ...]  # assignment[node] = machine index 0 .. machines-1
    cables: int
    cut_cables: int  # cables whose two ends are on different machines
    loads: tuple[float, ...]  # per machine: the summed load of its nodes
    method: str  # "pymetis" or "kernighan-lin"

    @property
    def cut_fraction(self) -> float:
        return self.cut_cables / self.cables if self.cables else 0.0

    @property
    def imbalance(self) -> float:
        """Largest machine load over the mean machine load (1.0 is perfect balance)."""
        mean = sum(self.loads) / self.machines
        return max(self.loads) / mean if mean else 1.0

    def nodes_of(self, machine: int) -> list[int]:
        return [u for u, m in enumerate(self.assignment) if m == machine]


def pymetis_available() -> bool:
    return importlib.util.find_spec("pymetis") is not None


def partition_network(network: Network, machines: int, method: str = "auto", seed: int = 0) -> Partition:
    """Partition ``network``'s nodes over ``machines``; load = cable rate in plain-link units."""
    edges = [(link.a, link.b) for link in network.links]
    load = [0.0] * network.nodes
    for link in network.links:
        share = link.gbps / network.link_gbps
        load[link.a] += share
        load[link.b] += share
    return partition_graph(network.nodes, edges, machines, load, method=method, seed=seed)


def partition_graph(
    nodes: int,
    edges: list[tuple[int, int]],
    machines: int,
    load: list[float] | None = None,
    method: str = "auto",
    seed: int = 0,
) -> Partition:
    """Partition nodes ``0 .. nodes-1`` joined by ``edges`` (repeats are parallel cables)."""
    if method not in METHODS:
        raise ValueError(f"partition method must be one of {', '.join(METHODS)}, not {method!r}")
    if machines < 1:
        raise ValueError(f"machines must be at least 1, not {machines}")
    if machines > max(nodes, 1):
        raise ValueError(f"{machines} machines for {nodes} nodes: a machine would stay empty")
    if load is None:
        load = [0.0] * nodes
        for a, b in edges:
            load[a] += 1
            load[b] += 1
    use_metis = method == "pymetis" or (method == "auto" and pymetis_available())
    if machines == 1:
        assignment, used = [0] * nodes, "none"
    elif use_metis:
        assignment, used = _metis(nodes, edges, machines, load, seed), "pymetis"
    else:
        graph = _weighted_graph(nodes, edges, load)
        assignment = [0] * nodes
        _recursive_bisection(graph, list(range(nodes)), list(range(machines)), assignment, seed)
        used = "kernighan-lin"
    loads = [0.0] * machines
    for u, m in enumerate(assignment):
        loads[m] += load[u]
    cut = sum(1 for a, b in edges if assignment[a] != assignment[b])
    return Partition(machines, tuple(assignment), len(edges), cut, tuple(loads), used)


def _weighted_graph(nodes: int, edges: list[tuple[int, int]], load: list[float]) -> nx.Graph:
    graph = nx.Graph()
    graph.add_nodes_from((u, {"load": load[u]}) for u in range(nodes))
    for (a, b), count in Counter((min(a, b), max(a, b)) for a, b in edges if a != b).items():
        graph.add_edge(a, b, weight=count)
    return graph


def _metis(nodes: int, edges: list[tuple[int, int]], machines: int, load: list[float], seed: int) -> list[int]:
    import pymetis

    graph = _weighted_graph(nodes, edges, load)
    xadj, adjncy, eweights = [0], [], []
    for u in range(nodes):
        for v, data in graph.adj[u].items():
            adjncy.append(v)
            eweights.append(int(data["weight"]))
        xadj.append(len(adjncy))
    adjacency = pymetis.CSRAdjacency(xadj, adjncy) if hasattr(pymetis, "CSRAdjacency") else None
    # METIS wants integer node weights: loads in hundredths of a plain link.
    vweights = [max(1, round(100 * w)) for w in load]
    options = pymetis.Options(seed=seed)
    if adjacency is not None:  # pymetis 2025: xadj/adjncy keywords are deprecated
        _, membership = pymetis.part_graph(
            machines, adjacency=adjacency, vweights=vweights, eweights=eweights, options=options
        )
    else:
        _, membership = pymetis.part_graph(
            machines, xadj=xadj, adjncy=adjncy, vweights=vweights, eweights=eweights, options=options
        )
    return [int(m) for m in membership]


def _recursive_bisection(graph: nx.Graph, part: list[int], machines: list[int], out: list[int], seed: int) -> None:
    if len(machines) == 1:
        for u in part:
            out[u] = machines[0]
        return
    left_machines, right_machines = machines[: (len(machines) + 1) // 2], machines[(len(machines) + 1) // 2 :]
    sub = graph.subgraph(part)
    order = _breadth_first_order(sub)
    total = sum(sub.nodes[u]["load"] for u in order)
    target = total * len(left_machines) / len(machines)
    left: list[int] = []
    acc = 0.0
    for u in order:
        # keep at least one node per machine on each side
        if len(left) >= len(part) - len(right_machines):
            break
        if acc >= target and len(left) >= len(left_machines):
            break
        left.append(u)
        acc += sub.nodes[u]["load"]
    left_set = set(left)
    right = [u for u in order if u not in left_set]
    a, b = kernighan_lin_bisection(sub, partition=(left_set, set(right)), max_iter=KL_MAX_PASSES, seed=seed)
    # Kernighan-Lin swaps pairs, so the sides keep their sizes; networkx does not promise to
    # return them in the order given (3.x returns the second first).
    if len(a) != len(left_set):
        a, b = b, a
    # Swaps keep node counts, not loads: where nodes differ in load, keep the swaps only if the
    # first side stays as close to its share of the load as the breadth-first split was.
    allowed = abs(acc - target) + max(sub.nodes[u]["load"] for u in order) / 2
    if abs(sum(sub.nodes[u]["load"] for u in a) - target) > allowed:
        a, b = left_set, set(right)
    _recursive_bisection(graph, sorted(a), left_machines, out, seed)
    _recursive_bisection(graph, sorted(b), right_machines, out, seed)


def _breadth_first_order(graph: nx.Graph) -> list[int]:
    """Nodes in breadth-first order from the lowest node of each component: a start whose
    prefixes are compact regions, so the initial cut is already small."""
    seen: set[int] = set()
    order: list[int] = []
    for start in sorted(graph.nodes):
        if start in seen:
            continue
        seen.add(start)
        queue = deque([start])
        while queue:
            u = queue.popleft()
            order.append(u)
            for v in sorted(graph.adj[u]):
                if v not in seen:
                    seen.add(v)
                    queue.append(v)
    return order
