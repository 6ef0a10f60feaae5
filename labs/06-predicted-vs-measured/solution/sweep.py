"""Exercise 6, reference solution: planner.cost.predict over a sweep, next to topolab collective's measurements."""

from contract.physics import time_scale
from planner import build_plan, load_scenario
from planner.collectives.from_plan import allreduce_for_plan
from planner.cost.predict import plan_network, predict


def predicted_vs_measured(scenario_path: str, algorithm: str, sizes: list[int], collective_doc: dict | None) -> dict:
    scenario = load_scenario(scenario_path)
    plan = build_plan(scenario)
    mbps = scenario.emulation.link_mbps
    scale = time_scale(plan.link_gbps, mbps)
    # the links as emulated, the plan's per-hop latency dilated as the emulator applies it:
    # divided by the time scale, the real cluster's time (docs/algorithms.md section 6)
    network = plan_network(
        plan, link_bps=mbps * 1e6, mtu=scenario.emulation.mtu, alpha_s=plan.latency_us * 1e-6 * scale
    )
    measured = {
        row["bytes"]: row["time_real_ms"]
        for row in (collective_doc or {}).get("results", [])
        if row["algorithm"] == algorithm
    }
    points = [
        {
            "bytes": size,
            "predicted_real_ms": predict(allreduce_for_plan(plan, algorithm, size), network).seconds / scale * 1e3,
            "measured_real_ms": measured.get(size),
        }
        for size in sizes
    ]
    return {"scenario": scenario.name, "algorithm": algorithm, "points": points}


def plot(data: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [p["bytes"] / (1 << 20) for p in data["points"]]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(sizes, [p["predicted_real_ms"] for p in data["points"]], "o--", label="predicted (planner.cost.predict)")
    measured = [(s, p["measured_real_ms"]) for s, p in zip(sizes, data["points"]) if p["measured_real_ms"] is not None]
    if measured:
        ax.plot(*zip(*measured), "s-", label="measured (topolab collective)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("AllReduce size (MiB)")
    ax.set_ylabel("time (real cluster ms)")
    ax.set_title(f"{data['scenario']}, {data['algorithm']}: predicted vs measured", wrap=True)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
