"""Build and teardown time of the emulated network for 12, 32 and 64 servers, degree 4.

Target (issue 3): the 12-server network up in < 1 s and gone in < 1 s. Networks are TopoOpt's
circulant wiring i +- 1, i +- s (s = 5 for 12 servers, the prototype's; else the stride
nearest n / 2.4 coprime to n), built by `contract.network.circulant_network`. Each size is built ``--repeat`` times; the median is reported.
Prints a table and writes JSON (default benchmarks/results/emulator_build.json).

    sudo .venv/bin/python benchmarks/emulator_build.py [--sizes 12 32 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contract.emulation import DEFAULT_RUN_DIR
from contract.network import circulant_network
from emulator import EmulatedNetwork, EmulationConfig

PROTOTYPE_SERVERS, PROTOTYPE_STRIDE = 12, 5
"""The TopoOpt prototype's 12 servers wired i +- 1, i +- 5."""
STRIDE_DIVISOR = 2.4
"""Other sizes: the second stride nearest n / 2.4 (5 for 12), keeping the prototype's shape."""


def stride_for(n: int) -> int:
    if n == PROTOTYPE_SERVERS:
        return PROTOTYPE_STRIDE
    target = round(n / STRIDE_DIVISOR)
    return min((s for s in range(2, n // 2) if math.gcd(s, n) == 1), key=lambda s: abs(s - target))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[12, 32, 64])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--run-dir", default=DEFAULT_RUN_DIR)
    ap.add_argument("--wait", type=float, default=600.0, help="wait this long for another run's lock")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "emulator_build.json"))
    args = ap.parse_args()
    rows = []
    print(f"{'servers':>7} {'cables':>6} {'up s':>7} {'down s':>7}   phases (median, s)", flush=True)
    for n in args.sizes:
        network = circulant_network(n, (1, stride_for(n)))
        ups, downs, phases = [], [], []
        for _ in range(args.repeat):
            net = EmulatedNetwork(
                network, EmulationConfig(run_dir=args.run_dir, lock_wait_s=args.wait), log=lambda m: None
            )
            with net:
                pass
            ups.append(net.facts["build_s"])
            downs.append(net.facts["teardown_s"])
            phases.append(net.facts["build_phases_s"])
        med = {k: statistics.median(p[k] for p in phases) for k in phases[0]}
        row = {
            "servers": n,
            "degree": 4,
            "cables": len(network.links),
            "up_s": statistics.median(ups),
            "down_s": statistics.median(downs),
            "up_all_s": ups,
            "down_all_s": downs,
            "phases_s": med,
        }
        rows.append(row)
        print(
            f"{n:>7} {len(network.links):>6} {row['up_s']:7.3f} {row['down_s']:7.3f}   "
            + ", ".join(f"{k} {v:.3f}" for k, v in med.items()),
            flush=True,
        )
    twelve = next((r for r in rows if r["servers"] == 12), None)
    verdict = None
    if twelve:
        verdict = twelve["up_s"] < 1.0 and twelve["down_s"] < 1.0
        print(
            f"12 servers: up {twelve['up_s']:.3f} s, down {twelve['down_s']:.3f} s -> "
            f"{'meets' if verdict else 'MISSES'} the < 1 s / < 1 s target"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"benchmark": "emulator_build", "load_avg": os.getloadavg(), "rows": rows, "target_12_met": verdict},
            indent=2,
        )
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
