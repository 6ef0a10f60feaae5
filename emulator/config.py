"""The emulator's configuration is `contract.emulation.EmulationConfig`, the one schema of the
scenario's ``[emulation]`` table and of the run-time settings (lock, run folder, reference
rate, destination classes); re-exported here with its machine-address check, so the
emulator's callers need not know where it lives."""

from __future__ import annotations

from contract.emulation import EmulationConfig, EmulationConfigError, check_machines

__all__ = ["EmulationConfig", "EmulationConfigError", "check_machines"]
