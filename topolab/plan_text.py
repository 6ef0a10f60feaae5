"""How a plan's rates are said in words, the same in every table and report."""

from __future__ import annotations

from typing import Any


def rate_text(topology: str, link_gbps: float) -> str:
    """What a plan's ``link_gbps`` is: per link, or a hierarchical server's whole budget."""
    if topology == "hierarchical":
        return f"{link_gbps:g} Gbps per server shared by its dimensions"
    return f"{link_gbps:g} Gbps per link"


def bandwidth_of(plan: dict[str, Any]) -> str:
    """What one server has: "4 x 25 Gbps", "1 x 100 Gbps", "100 Gbps over dims 4 x 3"."""
    if plan.get("switches"):
        return f"1 x {plan['link_gbps']:g} Gbps"
    if plan["topology"] == "hierarchical":
        dims = plan.get("extra", {}).get("dims", [])
        return f"{plan['link_gbps']:g} Gbps over dims {' x '.join(map(str, dims))}"
    return f"{plan['degree']} x {plan['link_gbps']:g} Gbps"
