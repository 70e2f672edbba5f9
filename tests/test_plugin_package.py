"""The example third-party plugin in examples/plugin-package: installed with pip, found by entry point,
usable from the command line exactly like a first-party plugin."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "examples" / "plugin-package"
SPEC = PACKAGE / "spec.yaml"
DIST = "agentbridge-wordplay"


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
    """A fresh process, so the new entry point is seen; wide columns so the table does not wrap ids."""
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "agentbridge.cli", *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env=env)


def test_plugins_lists_wordplay(installed: None) -> None:
    res = cli("plugins")
    assert res.returncode == 0, res.stderr
    assert "warning" not in res.stderr, res.stderr
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in res.stdout.splitlines()
             if line.startswith("│")]
    start = next(i for i, row in enumerate(cells) if row[0] == "wordplay")
    assert cells[start][1:3] == [DIST, "0.1.0"]
    block = [cells[start][3]]
    for row in cells[start + 1:]:
        if row[0]:
            break
        block.append(row[3])
    assert block == ["environments: wordplay/reverse", "tools: reverse_text", "rewards: wordplay/exact",
                     "datasets: wordplay/words"]


def test_validate_spec(installed: None) -> None:
    res = cli("validate", str(SPEC))
    assert res.returncode == 0, res.stderr
    assert re.match(r"ok: .*spec\.yaml \(wordplay;", res.stdout)


def test_scripted_rollout_solves_every_task(installed: None, tmp_path: Path) -> None:
    res = cli("rollout", str(SPEC), "--policy", "scripted", "-n", "4", "-o", str(tmp_path))
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines() if line]
    assert len(rows) == 4
    assert all(r["finish_reason"] == "done" for r in rows), [r["error"] for r in rows]
    assert [r["reward_components"]["wordplay/exact"] for r in rows] == [1.0] * 4
