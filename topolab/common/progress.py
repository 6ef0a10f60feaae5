"""A one-line progress bar on stderr for long work (iterations, sweeps, link checks).

On a terminal it redraws one line; elsewhere (CI logs, pipes) it prints one line per step,
so logs stay readable. The elapsed time it shows comes from ``clock`` (seconds; default
`time.perf_counter`)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


class Progress:
    def __init__(
        self,
        total: int,
        label: str,
        stream: TextIO | None = None,
        width: int = 24,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.total, self.label, self.width = max(1, total), label, width
        self.stream = stream or sys.stderr
        self.count = 0
        self.clock = clock
        self.t0 = clock()
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def step(self, message: str = "") -> None:
        self.count += 1
        filled = int(self.width * self.count / self.total)
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = self.clock() - self.t0
        line = f"  {self.label} [{bar}] {self.count}/{self.total} {elapsed:6.1f}s {message}"
        if self.tty:
            self.stream.write("\r\x1b[2K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
