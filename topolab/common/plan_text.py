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


REAL_TIMES = "times are the real cluster's, in ms"
"""What every planning output's times are (plan, predict, place, alloc, sweep): the real
cluster's milliseconds, never the emulation's dilated seconds."""


def iteration_facts(servers: int, batch_per_server: int) -> dict[str, Any]:
    """What one training iteration of a plan covers, for a JSON output."""
    return {
        "servers": servers,
        "batch_per_server": batch_per_server,
        "global_batch": servers * batch_per_server,
        "times": "real cluster, ms",
    }


def iteration_text(servers: int, batch_per_server: int) -> str:
    """What every planning output states once: what one iteration is (the global batch,
    samples per server: ``[workload] batch_per_server``) and what its times are."""
    return (
        f"one training step on a global batch of {servers * batch_per_server:,} samples "
        f"({batch_per_server:,} per server on {servers} servers); {REAL_TIMES}"
    )
