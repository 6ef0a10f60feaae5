"""Shared fixtures. Root-only tests are marked `root` and skipped for other users."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests: CI replays the same examples every run (derandomized, no example database),
# so a failure there is a real regression; a local run explores new examples. An example that
# fails locally is pinned in its test with @example so CI checks it from then on.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))

pytest_plugins = ["tests.fixtures.sigterm"]  # SIGTERM tears fixtures down, as Ctrl-C does

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "scenarios"


def pytest_collection_modifyitems(config, items):
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="needs root for network namespaces")
        for item in items:
            if "root" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def scenario_dir() -> Path:
    return SCENARIOS


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A private temporary folder short enough to hold a control socket's folder (a Unix
    socket's path is at most 107 bytes; tmp_path's may be too long)."""
    with tempfile.TemporaryDirectory(prefix="tl-") as tmp:
        yield Path(tmp)
