"""`topolab shell` driven through a pipe, as a script or a grader drives it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]
SESSION = [
    "net",
    "links",
    "link h0 h1 down",
    "h0 ping -c1 -W1 h1",
    "link h0 h1 up",
    "h0 ping -c1 -W1 h1",
    "iperf h0 h1",
    "exit",
]
# A piped session ends by itself (~4 s measured, the iperf included); the timeout only stops
# a hang, an order of magnitude later.
SESSION_TIMEOUT_S = 40
IPERF_TOLERANCE = 0.10


def _root_links() -> set[str]:
    out = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0].split("@")[0] for line in out.splitlines() if line.strip()}


def _shell(tmp_path: Path, lines: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "topolab", "shell", "scenarios/topoopt-12.toml", "--run-dir", str(tmp_path)],
        cwd=REPO,
        input="\n".join(lines) + "\n",
        text=True,
        capture_output=True,
        timeout=SESSION_TIMEOUT_S,
    )


def test_piped_session_downs_and_restores_a_cable_and_measures_it(tmp_path):
    before = _root_links()
    proc = _shell(tmp_path, SESSION)
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert "h0 lo:  h0-eth0:h1-eth0" in out  # net shows the h0-h1 cable
    assert "h0-eth0<->h1-eth0 (OK OK) 100 Mbit/s" in out  # links
    down, up = out.split("cable h0-h1 down", 1)[1].split("cable h0-h1 up", 1)
    assert "Network is unreachable" in down and " 0% packet loss" not in down
    assert "1 received, 0% packet loss" in up
    m = re.search(r"Results: h0 -> h1: ([\d.]+) Mbits/sec", up)
    assert m, up[-800:]
    assert abs(float(m.group(1)) - 100.0) <= 100.0 * IPERF_TOLERANCE
    assert "network torn down" in out
    assert _root_links() == before
    assert not list(tmp_path.glob("run-*.json"))


def test_end_of_input_tears_down_and_bad_commands_are_one_line(tmp_path):
    before = _root_links()
    proc = _shell(tmp_path, ["link h0 h3 down", "iperf h0", "route h99", "nodes"])  # no exit: EOF
    assert proc.returncode == 0
    assert "*** link h0 h3 down: no cable between h0 and h3" in proc.stdout
    assert "*** usage: iperf hA hB" in proc.stdout and "*** no node 'h99'" in proc.stdout
    assert "h0 h1 h10 h11" in proc.stdout and "network torn down" in proc.stdout
    assert _root_links() == before
    assert not list(tmp_path.glob("run-*.json"))
