"""The example third-party backend in examples/backend-package: installed with pip, found by entry point, usable
from the command line exactly like a first-party backend."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentbridge.conformance import cases

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "examples" / "backend-package"
SPEC = PACKAGE / "spec.yaml"
DIST = "agentbridge-mini"


def _installed() -> bool:
    try:
        md.distribution(DIST)
    except md.PackageNotFoundError:
        return False
    return True


@pytest.fixture(scope="module")
def installed() -> Iterator[None]:
    """pip-install the package (editable) into this interpreter's environment; undo it afterwards."""
    was_installed = _installed()
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-e",
                          str(PACKAGE)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    yield
    if not was_installed:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", DIST], capture_output=True, timeout=600)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """A fresh process, so the new entry point is seen; wide columns so tables do not wrap."""
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("AGENTBRIDGE_PLUGINS", None)  # found through its entry point only
    return subprocess.run([sys.executable, "-m", "agentbridge.cli", *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env=env)


def test_backends_lists_mini(installed: None) -> None:
    res = cli("backends")
    assert res.returncode == 0, res.stderr
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in res.stdout.splitlines() if line.startswith("│")]
    mini = next(row for row in rows if row[0] == "mini")
    assert mini[1:3] == ["grpo", "no"] and mini[-1] == "this one"


def test_compile_and_check(installed: None, tmp_path: Path) -> None:
    res = cli("compile", str(SPEC), "-o", str(tmp_path / "job"))
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "job" / "manifest.json").read_text())["backend"] == "mini"
    res = cli("check", str(tmp_path / "job"))
    assert res.returncode == 0, res.stderr
    assert "passes mini's validators" in res.stdout


def test_conformance_command(installed: None) -> None:
    res = cli("conformance", "--backend", "mini", "--kind", "text")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("identical") == len(cases("text")), res.stdout
