"""Exercise 1, reference solution: the README's formula with each setup's rings, link rate
and hops per step."""

SERVERS = 12
MTU = 9000
ALPHA_S = 1e-6  # latency_us = 1 of scenarios/topoopt-12.toml and switch-12.toml, per hop
# setup -> (P rings at once, link_bps of a ring's link, h hops of a ring step's route)
SETUPS = {
    "ring": (1, 25e9, 1),  # one ring on one of the four 25 Gbps interfaces, neighbours cabled
    "topoopt": (4, 25e9, 1),  # rings +1, -1, +5, -5: every interface, both directions
    "switch": (1, 100e9, 2),  # one ring through the switch: server -> switch -> server
}


def allreduce_seconds(nbytes: int) -> dict[str, float]:
    """T = 2(k-1)S/(kPB) + 2(k-1)h alpha per setup, B the TCP goodput of one link."""
    times = {}
    k, S, alpha = SERVERS, nbytes, ALPHA_S
    for setup, (P, link_bps, h) in SETUPS.items():
        B = link_bps * (MTU - 52) / (MTU + 14) / 8  # TCP goodput of one link, bytes/s
        T = 2 * (k - 1) * S / (k * P * B) + 2 * (k - 1) * h * alpha
        times[setup] = T
    return times
