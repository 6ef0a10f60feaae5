"""Shared fixtures. Root-only tests are marked `root` and skipped for other users."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
