"""Exceptions of the emulator, split by what the caller should do about them.

`EmulationInputError` means the plan or the `[emulation]` table asks for something this
emulator or this machine cannot do (a link to a nonexistent server, a rate of 0, more hosts
than memory holds). The CLI maps it to one line on stderr and exit code 2; nothing has been
created when it is raised.
"""

from __future__ import annotations


class EmulationError(RuntimeError):
    """The emulated network could not be built or did not come out as planned."""


class EmulationInputError(EmulationError, ValueError):
    """Bad input (plan or `[emulation]` table); map to exit code 2."""


class EmulationBusyError(EmulationError):
    """Another topolab network holds the run lock."""


class ShapingError(EmulationError):
    """The qdiscs read back from the kernel differ from what the plan asked for."""
