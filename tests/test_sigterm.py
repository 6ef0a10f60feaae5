"""A suite stopped by SIGTERM (CI's time limit, ``kill``) still tears its fixtures down, so a
root test's namespaces and processes do not outlive it (tests/fixtures/sigterm.py)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SLOW_TEST = """
import pytest, sys, time
from pathlib import Path

@pytest.fixture
def resource():
    mark = Path(__file__).with_name("torn-down")
    yield
    mark.write_text("yes")

def test_waits(resource):
    print("ready", flush=True, file=sys.__stdout__)
    time.sleep(60)
"""


def test_sigterm_runs_the_fixtures_teardown(tmp_path: Path) -> None:
    (tmp_path / "test_slow.py").write_text(SLOW_TEST)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "tests.fixtures.sigterm",
         str(tmp_path / "test_slow.py")],
        cwd=REPO, stdout=subprocess.PIPE, text=True, env=os.environ | {"PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready and proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert (tmp_path / "torn-down").read_text() == "yes"
    assert proc.returncode == 2  # pytest's "interrupted"
