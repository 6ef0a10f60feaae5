"""TOPOLAB_SLOWDOWN: one factor on the emulator's and the workers' fixed time limits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from contract.errors import UsageError
from contract.limits import SLOWDOWN_ENV, machine_slowdown


def test_unset_or_empty_is_native_speed() -> None:
    assert machine_slowdown({}) == 1.0
    assert machine_slowdown({SLOWDOWN_ENV: " "}) == 1.0
    assert machine_slowdown({SLOWDOWN_ENV: "17"}) == 17.0


@pytest.mark.parametrize("value", ["abc", "0.5", "0", "-3", "101", "nan", "inf"])
def test_a_bad_factor_names_the_variable_and_the_value(value: str) -> None:
    with pytest.raises(UsageError, match=f"{SLOWDOWN_ENV}='{value}'"):
        machine_slowdown({SLOWDOWN_ENV: value})


def test_every_limit_scales_with_the_factor_and_the_command_refuses_a_bad_one() -> None:
    probe = (
        "from emulator import hostconfig, host, nlbatch; from workers import coordinator;"
        "print(hostconfig.TC_TIMEOUT_S, host.HOST_START_TIMEOUT_S, nlbatch.NETLINK_TIMEOUT_S,"
        " coordinator.START_TIMEOUT_S)"
    )

    def limits(factor: str) -> list[float]:
        env = os.environ | {SLOWDOWN_ENV: factor}
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
        return [float(x) for x in out.stdout.split()]

    native, slow = limits("1"), limits("4")
    assert slow == [4 * x for x in native]
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "topolab",
            "predict",
            str(Path(__file__).resolve().parents[2] / "scenarios" / "topoopt-12.toml"),
        ],
        env=os.environ | {SLOWDOWN_ENV: "fast"},
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        f"topolab: {SLOWDOWN_ENV}='fast': must be a number from 1 to 100 (how much slower than native)"
    ]
