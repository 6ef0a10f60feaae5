"""One factor for every fixed time limit on work that costs CPU, for machines slower than the
ones the limits were set on.

The emulator's and the workers' limits (a host's shell starting, one host's ``tc -batch``, a
netlink batch, a worker's start) are set for a native machine with a margin of 2x or more, so
that a step that hangs is named within seconds. Under software emulation (a VM without KVM:
qemu's TCG runs Python about 17x slower) every such step is that much slower, and the limits
would end healthy runs. ``TOPOLAB_SLOWDOWN`` (a number from 1 to 100, default 1) multiplies
them all; the Vagrant VM sets it when it runs without KVM (README, "Validate in a VM"). It does not touch
what a scenario or a flag sets (``[run] timeout_s``, ``--timeout``, ``--wait``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from .errors import UsageError

SLOWDOWN_ENV = "TOPOLAB_SLOWDOWN"
MAX_SLOWDOWN = 100.0


def machine_slowdown(environ: Mapping[str, str] = os.environ) -> float:
    """``TOPOLAB_SLOWDOWN`` as a number in [1, 100]; 1 when unset. A bad value is a
    `UsageError` naming the variable and the value."""
    text = environ.get(SLOWDOWN_ENV, "").strip()
    if not text:
        return 1.0
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 1.0 <= value <= MAX_SLOWDOWN:
        raise UsageError(
            f"{SLOWDOWN_ENV}={text!r}: must be a number from 1 to {MAX_SLOWDOWN:g} (how much slower than native)"
        )
    return value


SLOWDOWN = machine_slowdown()
"""This process's factor, read once when the limits are defined."""


def limit_s(native_s: float) -> float:
    """A time limit set for a native machine, on this one."""
    return native_s * SLOWDOWN
