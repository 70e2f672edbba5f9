"""Shared fixtures: the built-in tokenizers (built offline once, cached), a calculator agent, the example
third-party backend as the core's fake backend, and headless Chromium to look at pages as a person would."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentbridge.spec import load_spec

MINI_PACKAGE = Path(__file__).resolve().parents[1] / "examples" / "backend-package"


@pytest.fixture(scope="session")
def qwen_tokenizer() -> Any:
    """The real Qwen2.5 vocabulary with the Qwen2.5 chat template."""
    from agentbridge.models import load_tokenizer

    return load_tokenizer("builtin:tiny-qwen2.5")


@pytest.fixture(scope="session")
def tiny_tokenizer() -> Any:
    from agentbridge.models import load_tokenizer

    return load_tokenizer("builtin:tiny")


@pytest.fixture(scope="session")
def calculator_spec() -> Any:
    return load_spec("examples/calculator.yaml")


@pytest.fixture
def mini_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The ``mini`` backend of examples/backend-package, from its source tree: the fake backend of the core's tests.

    Importable here and in the processes a test starts (``PYTHONPATH``); registered in this process unless a
    plugin (its entry point, or the example's own conftest) already did.
    """
    from agentbridge.plugins import get_plugins

    monkeypatch.syspath_prepend(str(MINI_PACKAGE))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(MINI_PACKAGE), os.environ.get("PYTHONPATH"))
                                                     if p))
    plugins = get_plugins()
    ours = "mini" not in plugins.backends.ids()
    if ours:
        from agentbridge_mini import __version__, plugin

        plugins.register("mini-under-test", plugin, ("agentbridge-mini (source tree)", __version__))
    yield plugins.backends.get("mini")
    if ours:
        plugins.unregister("mini-under-test")


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Debian's headless Chromium driven by Selenium (chromedriver), one window of 1400x1000 for the session."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    assert chromium and chromedriver, "chromium or chromedriver is missing: run scripts/system-deps.sh"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--disable-extensions", "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path_factory.mktemp('profile')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver, log_output=os.devnull), options=options)
    try:
        yield driver
    finally:
        driver.quit()
