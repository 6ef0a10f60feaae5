"""How fast the `topolab` command answers, end to end, as a user starts it.

Times, as separate processes (interpreter start and every import included): ``topolab
--help``, ``topolab --version``, a bad scenario (exit 2 before any planning), and ``topolab
plan`` of a 1024-server TopoOpt scenario with d = 8. Median of ``--repeat`` runs (default 5)
each. Targets: --help under 0.3 s, the 1024-server plan under 0.5 s. Prints a table and
writes benchmarks/results/cli_speed.json.

    .venv/bin/python benchmarks/cli_speed.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGETS_S = {"help": 0.3, "plan-1024": 0.5}
PLAN_1024 = '[cluster]\nservers = 1024\ndegree = 8\nlink_gbps = 100\n[topology]\nkind = "topoopt"\n'
BAD = "[cluster]\nservers = 1000000\n"


def time_command(argv: list[str], repeat: int, expect_code: int) -> list[float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "topolab", *argv], cwd=REPO, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if proc.returncode != expect_code:
            raise SystemExit(f"topolab {' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "cli_speed.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plan_file, bad_file = Path(tmp, "plan-1024.toml"), Path(tmp, "bad.toml")
        plan_file.write_text(PLAN_1024)
        bad_file.write_text(BAD)
        cases = {
            "help": (["--help"], 0),
            "version": (["--version"], 0),
            "bad-scenario": (["plan", str(bad_file)], 2),
            "plan-1024": (["plan", str(plan_file)], 0),
        }
        rows = []
        for name, (argv, code) in cases.items():
            times = time_command(argv, args.repeat, code)
            target = TARGETS_S.get(name)
            median = statistics.median(times)
            rows.append(
                {
                    "case": name,
                    "argv": ["topolab", *argv[:1]],
                    "seconds_median": median,
                    "seconds_max": max(times),
                    "target_s": target,
                    "met": None if target is None else median < target,
                }
            )
            verdict = "" if target is None else f"  target < {target:g} s: {'met' if median < target else 'MISSED'}"
            print(f"{name:14} median {median:6.3f} s  max {max(times):6.3f} s{verdict}")
    doc = {
        "repeat": args.repeat,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
