"""Exceptions of the emulator, split by what the caller should do about them.

They extend topolab's one hierarchy (`contract.errors`): a failed build is a `RunError`
(exit 1, the message names the host or cable and the cause), bad input a `UsageError`
(exit 2, the message names the field and the value).

`EmulationInputError` means the plan or the `[emulation]` table asks for something this
emulator or this machine cannot do (a link to a nonexistent server, a rate of 0, more hosts
than memory holds). Nothing has been created when it is raised. It is also an
`EmulationError`, so ``except EmulationError`` catches every error of the emulator.
"""

from __future__ import annotations

from contract.errors import RunError, UsageError


class EmulationError(RunError):
    """The emulated network could not be built or did not come out as planned."""


class EmulationInputError(UsageError, EmulationError):
    """Bad input (plan or `[emulation]` table); exit code 2."""


class EmulationBusyError(EmulationError):
    """Another topolab network holds the run lock: nothing ran, try again later (exit 2)."""

    exit_code = 2


class ShapingError(EmulationError):
    """tc refused a cable's shaping, or the qdiscs read back differ from the plan."""
