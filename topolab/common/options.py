"""Checks every subcommand shares: bounded numeric flags, writable outputs, root.

Each check fails before any work starts, as a `UsageError` naming the flag (one line, exit
2). Numeric flags are bounded as argparse types, so argparse names the flag itself
("argument --steps: ..."). The maxima are where memory or time would explode; the scenario
keys' own bounds are in docs/scenarios.md.

Output folders (``--out``, ``--run-dir``, the default ``results/...``) follow
`contract.files.folder_problem`: root writes only into a folder (or, for one still to be
made, its nearest existing parent) that root, you or the user who ran ``sudo`` owns, that
others cannot write (unless sticky, like /tmp), and that is not a symbolic link; a folder is
made with `make_output_dir` (checked again as it is made), and every file in it is written
with `contract.files.write_file` (never through a link planted at its name).
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from contract.emulation import AUTO_RATE
from contract.emulation import MAX_LINK_MBPS as MAX_LINK_MBPS  # --link-mbps: [emulation] link_mbps's bounds
from contract.emulation import MIN_LINK_MBPS as MIN_LINK_MBPS
from contract.errors import UsageError
from contract.files import FileInputError, folder_problem, make_owned_folder, nearest_existing

MAX_WAIT_S = 24 * 3600.0  # waiting for another run's lock longer than a day is a mistake
MAX_TIMEOUT_S = 24 * 3600.0
MAX_ITERATIONS = 100_000  # timed iterations of one run; one per line in iterations.jsonl
MAX_PAYLOAD_SCALE = 1.0  # the job's real transfer sizes; more only wastes memory
MIN_PAYLOAD_SCALE = 1e-9


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """argparse type: an integer in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, got {text}")
        return value

    return parse


def bounded_float(low: float, high: float, low_inclusive: bool = False) -> Callable[[str], float]:
    """argparse type: a finite number in (low, high] (or [low, high])."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        above = value >= low if low_inclusive else value > low
        if not math.isfinite(value) or not above or value > high:
            bracket = "[" if low_inclusive else "("
            raise argparse.ArgumentTypeError(f"must be a finite number in {bracket}{low:g}, {high:g}], got {text}")
        return value

    return parse


def _probe_directory(folder: Path, flag: str, shown: str) -> None:
    """Create and remove a file in ``folder``: the only test that also holds for root and /proc."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".topolab-probe-"):
            pass
    except OSError as err:
        raise UsageError(f"{flag} {shown}: cannot write in {folder}: {err.strerror}") from None


def _check_owned(target: Path, flag: str, shown: str) -> None:
    """``target`` (existing or not) is a folder root may write into (`folder_problem`, on
    the folder or, while it does not exist, on its nearest existing parent)."""
    existing = nearest_existing(target)
    problem = folder_problem(existing)
    if problem is not None:
        where = "" if existing == target else f"its folder {str(existing)!r} "
        raise UsageError(f"{flag} {shown}: {where}{problem}")


def not_a_folder(path: Path) -> str:
    """What a path that should be a folder is instead: "afile is a file, not a folder"."""
    if path.is_file():
        return f"{path} is a file, not a folder"
    return f"{path} is not a folder" if os.path.lexists(path) else f"folder {path} does not exist"


def check_output_file(path: str | None, flag: str, inputs: tuple[str, ...] = ()) -> Path | None:
    """``path`` can be written as a regular file, and is none of ``inputs``: its folder is one
    root may write into (`folder_problem`) and the file, if it exists, is no symbolic link."""
    if path is None:
        return None
    shown = repr(path)
    if not path.strip():
        raise UsageError(f"{flag} {shown}: empty file name")
    target = Path(path)
    for source in inputs:
        if os.path.exists(source) and target.exists() and os.path.samefile(source, target):
            raise UsageError(f"{flag} {shown}: is the input file; choose another output")
    if target.is_symlink():
        raise UsageError(f"{flag} {shown}: is a symbolic link; give the file it points to")
    if target.exists():
        if not target.is_file():
            raise UsageError(f"{flag} {shown}: not a regular file")
        if not os.access(target, os.W_OK):
            raise UsageError(f"{flag} {shown}: not writable")
    parent = target.parent
    if not parent.is_dir():
        ancestor = nearest_existing(parent)
        if ancestor.exists() and not ancestor.is_dir():
            raise UsageError(f"{flag} {shown}: {not_a_folder(ancestor)}")
        raise UsageError(f"{flag} {shown}: folder {parent} does not exist")
    _check_owned(parent, flag, shown)
    _probe_directory(parent, flag, shown)
    return target


def check_output_dir(path: str | Path, flag: str) -> Path:
    """``path`` is a folder that exists and is writable, or can be created (nothing is
    created); either way one root may write into (`folder_problem`)."""
    shown = repr(str(path))
    if not str(path).strip():
        raise UsageError(f"{flag} {shown}: empty folder name")
    target = Path(path)
    if target.exists() and not target.is_symlink():
        if not target.is_dir():
            raise UsageError(f"{flag} {shown}: exists and is not a folder")
        _check_owned(target, flag, shown)
        _probe_directory(target, flag, shown)
        return target
    ancestor = nearest_existing(target)
    if ancestor != target and not ancestor.is_dir():
        raise UsageError(f"{flag} {shown}: {not_a_folder(ancestor)}")
    _check_owned(target, flag, shown)
    _probe_directory(ancestor, flag, shown)
    return target


def make_output_dir(path: str | Path, flag: str = "--out") -> Path:
    """Create the results folder ``path`` (and its missing parents, mode 0755) when results
    are about to be written, checked again as it is made (`contract.files.make_owned_folder`):
    a folder swapped for a link, or a parent given away, since `check_output_dir` ran is one
    line naming ``flag``."""
    target = Path(path)
    shown = repr(str(path))
    _check_owned(target, flag, shown)
    try:
        return make_owned_folder(target)
    except FileInputError as err:
        raise UsageError(f"{flag} {shown}: {err.problem}") from None
    except OSError as err:
        raise UsageError(f"{flag} {shown}: cannot create the folder: {err.strerror}") from None


def require_root(command: str) -> None:
    """Commands that build namespaces and shape links need root."""
    if os.geteuid() != 0:
        raise UsageError(
            f"topolab {command} needs root (network namespaces, tc); run it as root, e.g. in the Vagrant VM"
        )


def add_link_mbps_argument(parser: argparse.ArgumentParser, auto: bool = False) -> None:
    """``--link-mbps``, the emulated rate of one plan link, with ``[emulation] link_mbps``'s
    bounds; every command that builds a network for a scenario takes it. ``auto``: the
    command also takes the word ``auto`` (`topolab run`: automatic time dilation), kept as
    `contract.emulation.AUTO_RATE`."""
    number = bounded_float(MIN_LINK_MBPS, MAX_LINK_MBPS, low_inclusive=True)

    def rate(text: str) -> float | str:
        if not auto:
            return number(text)
        if text == AUTO_RATE:
            return AUTO_RATE
        try:
            return number(text)
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentTypeError(f'{err} (or "{AUTO_RATE}")') from None

    parser.add_argument(
        "--link-mbps",
        type=rate,
        metavar="MBPS" + ("|auto" if auto else ""),
        help="override the scenario's emulated rate per link ([emulation] link_mbps"
        + (
            '; "auto", also where the scenario states no rate: the highest rate up to 100 the cores keep up with'
            if auto
            else "; where the scenario states none: 100"
        )
        + ")",
    )


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """Options `run` and `compare` share (and `add_network_arguments`' of every network command)."""
    parser.add_argument(
        "--iterations",
        type=bounded_int(1, MAX_ITERATIONS),
        metavar="N",
        help=f"timed iterations, 1..{MAX_ITERATIONS} (default: [run] iterations)",
    )
    parser.add_argument(
        "--payload-scale",
        type=bounded_float(MIN_PAYLOAD_SCALE, MAX_PAYLOAD_SCALE, low_inclusive=True),
        metavar="F",
        help=f"multiply every transfer size, {MIN_PAYLOAD_SCALE:g}..{MAX_PAYLOAD_SCALE:g} (default: [run] payload_scale)",
    )


def results_folder(out: str | None, scenario_name: str, force: bool, prefix: str = "collective") -> Path:
    """``--out`` (refused when it exists, unless ``force``) or a new timestamped folder
    ``results/<prefix>-<scenario>-<time>``."""
    if out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = Path("results") / f"{prefix}-{scenario_name}-{stamp}"
        suffix = 1
        while target.exists():  # two runs in one second: never share a folder
            suffix += 1
            target = Path("results") / f"{prefix}-{scenario_name}-{stamp}-{suffix}"
        check_output_dir(target, "--out")
        return target
    target = check_output_dir(out, "--out")
    if target.exists() and any(target.iterdir()) and not force:
        raise UsageError(f"--out {out!r}: exists and is not empty; use --force to write into it")
    return target
