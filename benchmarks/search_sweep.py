"""The evaluation table of issue 6: TopoOpt vs ideal switch, similar-cost Fat-tree, expander.

Runs `topolab sweep` (topolab.sweep.command) on the 128-server DLRM scenario's cluster for all six
models, d = 4 and 8, B = 100 Gbps (and 25 Gbps with --with-25g, where the network matters
more), 1000 MCMC steps per cell, and writes the table, JSON and PNG to
benchmarks/results/search_sweep/. Servers compute at 500 TFLOPS by default: the paper's
server is a "big GPU" of 4 A100s (4 x the zoo's 125 TFLOPS per A100).

    .venv/bin/python benchmarks/search_sweep.py [--steps 1000] [--with-25g]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from topolab.cli import main as topolab_main

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--with-25g", action="store_true", help="also sweep B = 25 Gbps")
    parser.add_argument("--device-tflops", type=float, default=500.0)
    parser.add_argument("--out", default=str(HERE / "results" / "search_sweep"))
    args = parser.parse_args()
    return topolab_main(
        [
            "sweep",
            str(HERE.parent / "scenarios" / "dlrm-128.toml"),
            "--models",
            "all",
            "--topologies",
            "topoopt,switch,fattree,expander",
            "--degrees",
            "4,8",
            "--link-gbps",
            "25,100" if args.with_25g else "100",
            "--steps",
            str(args.steps),
            "--device-tflops",
            str(args.device_tflops),
            "--out",
            args.out,
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
