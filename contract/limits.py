"""One factor for every fixed time limit on work that costs CPU, for machines slower than the
ones the limits were set on.

The emulator's and the workers' limits (a host's shell starting, one host's ``tc -batch``, a
netlink batch, a worker's start) are set for a native machine with a margin of 2x or more, so
that a step that hangs is named within seconds. Under software emulation (a VM without KVM:
qemu's TCG runs Python about 17x slower) every such step is that much slower, and the limits
would end healthy runs. ``TOPOLAB_SLOWDOWN`` (a number from 1 to 100, default 1) multiplies
them all; the Vagrant VM sets it when it runs without KVM (docs/vm.md). It does not touch
what a scenario or a flag sets (``[run] timeout_s``, ``--timeout``, ``--wait``).

A step whose work grows with the network (one host's ``tc -batch``, a netlink batch, the
read-back of every class) gets `work_limit_s`: its measured cost per unit of work times the
units, times the steps that share the cores with it, times `WORK_MARGIN`; never below the
fixed limit it had (its floor), and on this machine (`limit_s`). It stays a bound: a step
that hangs fails after that limit, which its error states.
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


WORK_MARGIN = 10.0
"""How many times its measured cost a step of the build may take before it counts as hung:
the costs were measured alone on a quiet 2-core machine, and a busy one (other runs, the
kernel's locks held by others) is several times slower."""


def work_limit_s(floor_s: float, work_s: float, sharing: int = 1) -> float:
    """The time limit of a step whose work takes ``work_s`` alone (its units times their cost
    measured on a native machine), while ``sharing`` such steps run beside it and take turns
    with it (for the cores or a kernel lock): `WORK_MARGIN` times ``work_s * sharing``, at
    least ``floor_s``, on this machine (`limit_s`)."""
    return limit_s(max(floor_s, work_s * max(1, sharing) * WORK_MARGIN))
