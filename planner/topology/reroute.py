"""Rerouting around failed cables: a plan's network after some cables die or slow down.

Reference: docs/algorithms.md section 4 (routes), docs/scenarios.md (faults). TopoOpt
(NSDI 2023, section 5) argues that a direct-connect fabric survives a cable failure by
recomputing its forwarding tables over the remaining graph; here:

- **down**: the cable leaves the graph. New routes are shortest paths in the remaining
  graph G - E_dead (`planner.topology.routing.next_hop_table`, destination based, so every hop's
  table agrees). A cable is never deleted from ``plan.links``: cable indices name
  interfaces in the emulator and must stay stable; a dead cable simply carries no route.
- **degrade**: the cable stays, its rate is multiplied by ``factor`` (routes unchanged:
  hop count is the routing metric).
- **rings**: the AllReduce rings keep their server order. A ring step between two servers
  whose cable died becomes a relayed logical edge: its path (the new routes) goes around
  the dead cable, so every consecutive pair's path avoids it ("rings relayed around it"),
  and the schedule the workers run is unchanged; only its routes and predicted time change.

`cable_index` finds the plan cable between two nodes; `ranks_using` names the ranks whose
traffic crosses a cable (what a fault without rerouting breaks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from contract.plan import Link, Plan, Routes

from .routing import next_hop_table


def cable_index(plan: Plan, a: int, b: int) -> int | None:
    """Index in ``plan.links`` of the first cable joining ``a`` and ``b`` (either order)."""
    for k, link in enumerate(plan.links):
        if {link.a, link.b} == {a, b} and a != b:
            return k
    return None


def rerouted_plan(plan: Plan, dead: Iterable[int] = (), degraded: dict[int, float] | None = None) -> Plan:
    """``plan`` with the cables ``dead`` (indices into ``plan.links``) out of every route and
    the cables of ``degraded`` running at ``factor`` times their rate. Raises ValueError if
    the remaining graph is no longer connected (no reroute can save the job)."""
    dead = set(dead)
    degraded = degraded or {}
    links = tuple(
        Link(link.a, link.b, link.gbps * degraded[k]) if k in degraded else link for k, link in enumerate(plan.links)
    )
    routes = plan.routes
    if dead:
        alive = [(link.a, link.b) for k, link in enumerate(plan.links) if k not in dead]
        try:
            table = next_hop_table(plan.nodes, alive)
        except ValueError:
            cut = ", ".join(f"{plan.links[k].a}-{plan.links[k].b}" for k in sorted(dead))
            raise ValueError(f"without cable(s) {cut} the topology is no longer connected") from None
        routes = Routes("table", table=tuple(map(tuple, table.tolist())))
    return dataclasses.replace(plan, links=links, routes=routes)


def path_cables(plan: Plan, src: int, dst: int) -> set[frozenset[int]]:
    """The node pairs (as sets) a packet from ``src`` to ``dst`` crosses."""
    nodes = plan.path(src, dst)
    return {frozenset(hop) for hop in zip(nodes, nodes[1:])}


def ranks_using(plan: Plan, pairs: Iterable[tuple[int, int]], cable: int) -> list[int]:
    """Source and destination ranks of the ``pairs`` (src, dst) whose route crosses ``cable``."""
    link = plan.links[cable]
    hop = frozenset((link.a, link.b))
    ranks: set[int] = set()
    for src, dst in pairs:
        if src != dst and hop in path_cables(plan, src, dst):
            ranks.update((src, dst))
    return sorted(ranks)
