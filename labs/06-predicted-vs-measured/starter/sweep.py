"""Exercise 6: predicted vs measured AllReduce time over a message-size sweep (see README.md)."""


def predicted_vs_measured(scenario_path: str, algorithm: str, sizes: list[int], collective_doc: dict | None) -> dict:
    """The sweep's data: for every size, the planner's predicted time and the measured time
    from a `topolab collective --json` document (None where it has no row), both in the
    real cluster's milliseconds.

    TODO: the predictions here are the ideal bound, not the planner's model, and nothing is
    read from the measurements."""
    n, link_gbps, degree = 12, 25, 4
    points = []
    for size in sizes:
        ideal_ms = 2 * (n - 1) * size * 8 / (n * degree * link_gbps * 1e9) * 1e3
        points.append({"bytes": size, "predicted_real_ms": ideal_ms, "measured_real_ms": None})
    return {"scenario": scenario_path, "algorithm": algorithm, "points": points}


def plot(data: dict, path: str) -> None:
    """Predicted and measured time against message size, both on log axes, into a PNG.

    TODO"""
    raise NotImplementedError("plot the sweep")
