"""Shared fixtures: a private cache directory and a small world (tests never touch ~/.cache)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    mp = pytest.MonkeyPatch()
    path = tmp_path_factory.mktemp("cache")
    mp.setenv("AGENTBRIDGE_CACHE", str(path))
    mp.delenv("AGENTBRIDGE_SEARCH_URL", raising=False)
    yield path
    mp.undo()
