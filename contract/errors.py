"""The one error hierarchy of topolab. Every layer raises a subclass of `TopolabError`; the
CLI prints its message as one line and exits with its ``exit_code``, never a traceback.

- `UsageError` (exit 2): the input is wrong (a scenario field, a flag, a file); the message
  names the field or flag and the value.
- `RunError` (exit 1): the input was fine but the run failed (a host, a worker, a cable); the
  message names the host or rank and the cause.
"""

from __future__ import annotations


class TopolabError(Exception):
    """Base of every error topolab raises on purpose."""

    exit_code = 1


class UsageError(TopolabError, ValueError):
    """Bad input: a scenario field, a flag or a file. Exit 2."""

    exit_code = 2


class RunError(TopolabError, RuntimeError):
    """A run that could not complete (host, worker, network). Exit 1."""

    exit_code = 1
