"""Shared fixtures: one small browser pool for the whole session; a missing Chromium fails loudly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentbridge_gui.browser import BrowserPool, BrowserUnavailable, find_binaries


@pytest.fixture(scope="session", autouse=True)
def chromium() -> None:
    """These tests drive a real browser: without one they fail (CI installs chromium + chromium-driver)."""
    try:
        find_binaries()
    except BrowserUnavailable as e:
        pytest.fail(f"agentbridge-gui tests need a real headless Chromium: {e}", pytrace=False)


@pytest.fixture(scope="session")
def pool() -> Iterator[BrowserPool]:
    with BrowserPool(1, op_timeout_s=10.0) as p:
        yield p
