"""Price model of the networks compared in the evaluation (docs/algorithms.md section 8).

TopoOpt compares itself with a Fat-tree "at similar cost": the per-server bandwidth of a
non-blocking Fat-tree is swept (10 to 1600 Gbps in the paper) until the Fat-tree costs what
the direct-connect cluster costs. This module makes that choice explicit and checkable.

Bill of materials (USD):

- direct connect (TopoOpt, expander, torus, ring): per server d NIC ports of B, d
  transceivers of B (one at each cable end: n d in total), d patch-panel ports (every
  interface plugs into a patch panel / optical patch panel), and n d / 2 fibres;
- non-blocking Fat-tree of per-server bandwidth X: X is realized with the cheapest set of
  NIC ports of the available speeds that reaches at least X; every host port is a full
  tree of links: two tiers (leaf-spine) when n x ports fits ``radix**2 / 2``, else three.
  Per host port a t-tier tree needs t links (2 t transceivers, t fibres) and 2 t - 1
  switch ports of that speed;
- ideal switch: one port of d x B per server into a single switch; priced like a one-tier
  tree (reported for reference; it is the upper bound, not a cost-matched baseline).

Default prices: representative 2022 list prices of optics, NICs and switch ports (vendor
web shops such as fs.com; per-port figures of dual-port NICs and 32/64-port switches), in
the spirit of the cost appendix of the TopoOpt paper (Wang et al., NSDI 2023), which prices
the same components (NIC, transceiver, electrical switch port, patch panel port). They are
NOT copied from the paper: pass your own quotes (`PriceModel.from_dict`, the sweep's
``--prices FILE.json``). The patch-panel port price follows TopoOpt's choice of a robotic
fibre patch panel (about $100 per port).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

_SPEEDS = (10.0, 25.0, 40.0, 100.0, 200.0, 400.0)


def _table(values: tuple[float, ...]) -> dict[float, float]:
    return dict(zip(_SPEEDS, values))


@dataclass(frozen=True)
class PriceModel:
    """Component prices in USD; per-speed tables are keyed by Gbps."""

    nic_port: dict[float, float] = field(default_factory=lambda: _table((100, 120, 200, 400, 700, 1200)))
    transceiver: dict[float, float] = field(default_factory=lambda: _table((20, 40, 50, 99, 300, 600)))
    switch_port: dict[float, float] = field(default_factory=lambda: _table((50, 80, 120, 200, 400, 700)))
    patch_panel_port: float = 100.0
    fibre: float = 10.0
    switch_radix: int = 64

    @classmethod
    def from_dict(cls, d: dict) -> PriceModel:
        """From JSON-like data; tables may use string keys ("100": 400)."""
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown price key(s): {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))})")
        kw = {}
        for k, v in d.items():
            if k in ("nic_port", "transceiver", "switch_port"):
                if not isinstance(v, dict) or not v:
                    raise ValueError(f"{k}: expected a table of Gbps -> USD")
                kw[k] = {float(s): float(p) for s, p in v.items()}
            elif k == "switch_radix":
                kw[k] = int(v)
            else:
                kw[k] = float(v)
        model = cls(**kw)
        for k in ("nic_port", "transceiver", "switch_port"):
            if set(getattr(model, k)) != set(model.nic_port):
                raise ValueError(f"{k}: must price the same speeds as nic_port")
        return model

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("nic_port", "transceiver", "switch_port"):
            d[k] = {f"{s:g}": p for s, p in d[k].items()}
        return d

    def _price(self, table: dict[float, float], gbps: float) -> float:
        if gbps in table:
            return table[gbps]
        # A speed between listed ones costs as the next faster listed speed.
        faster = [s for s in sorted(table) if s >= gbps]
        if not faster:
            top = max(table)
            return table[top] * math.ceil(gbps / top)
        return table[faster[0]]

    # ---- bills of materials ----------------------------------------------------------
    def direct_connect(self, n: int, d: int, gbps: float) -> float:
        """Total USD of n servers with d direct-connect interfaces of ``gbps``."""
        per_port = self._price(self.nic_port, gbps) + self._price(self.transceiver, gbps) + self.patch_panel_port
        return n * d * per_port + n * d / 2 * self.fibre

    def tiers(self, n: int, ports_per_server: int) -> int:
        hosts = n * ports_per_server
        if hosts <= self.switch_radix:
            return 1
        return 2 if hosts <= self.switch_radix**2 // 2 else 3

    def _tree_port(self, speed: float, tiers: int) -> float:
        """One host port of ``speed`` with its full non-blocking tree above it."""
        return (
            self.nic_port[speed]
            + 2 * tiers * self.transceiver[speed]
            + (2 * tiers - 1) * self.switch_port[speed]
            + tiers * self.fibre
        )

    def fattree_ports(self, n: int, gbps: float) -> tuple[float, dict[float, int]]:
        """(USD, {speed: ports per server}): the cheapest set of ports reaching ``gbps``.

        Unbounded knapsack over the listed speeds (at 5 Gbps resolution) with the per-port
        price of a two-tier tree, then re-priced with the tier count the port total needs."""
        unit = 5.0
        speeds = sorted(self.nic_port)
        need = int(math.ceil(gbps / unit - 1e-9))
        steps = {s: max(1, int(round(s / unit))) for s in speeds}
        inf = float("inf")
        cost = [0.0] + [inf] * need
        pick: list[float | None] = [None] * (need + 1)
        for r in range(1, need + 1):
            for s in speeds:
                c = self._tree_port(s, 2) + cost[max(0, r - steps[s])]
                if c < cost[r]:
                    cost[r], pick[r] = c, s
        chosen: dict[float, int] = {}
        r = need
        while r > 0:
            s = pick[r]
            chosen[s] = chosen.get(s, 0) + 1
            r = max(0, r - steps[s])
        t = self.tiers(n, sum(chosen.values()))
        return n * sum(c * self._tree_port(s, t) for s, c in chosen.items()), chosen

    def fattree(self, n: int, gbps: float) -> float:
        return self.fattree_ports(n, gbps)[0]

    def ideal_switch(self, n: int, gbps: float) -> float:
        """A non-blocking fabric of ``gbps`` per server: at scale, a Fat-tree of that rate."""
        return self.fattree(n, gbps)


def similar_cost_fattree_gbps(
    n: int, d: int, gbps: float, prices: PriceModel | None = None, grid: range = range(10, 1601, 5)
) -> tuple[float, float, float]:
    """(per-server Gbps, Fat-tree USD, direct-connect USD): the fastest Fat-tree on the
    paper's 10-1600 Gbps sweep (5 Gbps steps) whose cost does not exceed the d x B
    direct-connect cluster's. Falls back to the grid's first point if even that costs more."""
    prices = prices or PriceModel()
    budget = prices.direct_connect(n, d, gbps)
    best_x, best_cost = float(grid[0]), prices.fattree(n, float(grid[0]))
    for x in grid:
        cost = prices.fattree(n, float(x))
        if cost <= budget and x >= best_x:
            best_x, best_cost = float(x), cost
    return best_x, best_cost, budget
