"""``modify_backend_config``: every first-party adapter's compile hands its backend config to the hook, and what
the hook changes is what the job directory holds."""

from __future__ import annotations

import json
import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentbridge.hooks import hookimpl
from agentbridge.plugins import get_plugins
from agentbridge.spec import load_spec

SEEN: list[tuple[str, str]] = []
LR = 3e-7  # not the spec's 1e-4


@hookimpl
def modify_backend_config(spec: Any, backend: str, config: dict[str, Any]) -> None:
    SEEN.append((spec.name, backend))
    if backend == "trl":
        config["learning_rate"] = LR
    elif backend == "verl":
        config["actor_rollout_ref"]["actor"]["optim"]["lr"] = LR
    elif backend == "openrlhf":
        config["actor.adam.lr"] = LR


@pytest.fixture
def config_plugin() -> Iterator[None]:
    plugins = get_plugins()
    plugins.register("test-modify-config", types.SimpleNamespace(modify_backend_config=modify_backend_config))
    SEEN.clear()
    yield
    plugins.unregister("test-modify-config")


def _compile(backend: str, out: Path) -> Path:
    spec = load_spec("examples/calculator.yaml", [f"backend.name={backend}", "data.train.size=8", "data.eval.size=4",
                                                  "data.dev.size=4"])
    return get_plugins().backends.get(backend).compile(spec, out).path


def test_trl_job_holds_what_the_hook_set(config_plugin: None, tmp_path: Path) -> None:
    job = _compile("trl", tmp_path / "trl")
    assert SEEN == [("calculator", "trl")]
    assert json.loads((job / "grpo_config.json").read_text())["learning_rate"] == LR


def test_verl_job_holds_what_the_hook_set(config_plugin: None, tmp_path: Path) -> None:
    pytest.importorskip("agentbridge_verl")
    job = _compile("verl", tmp_path / "verl")
    assert SEEN == [("calculator", "verl")]
    config = yaml.safe_load((job / "agentbridge_job.yaml").read_text())
    assert config["actor_rollout_ref"]["actor"]["optim"]["lr"] == LR


def test_openrlhf_job_holds_what_the_hook_set(config_plugin: None, tmp_path: Path) -> None:
    pytest.importorskip("agentbridge_openrlhf")
    job = _compile("openrlhf", tmp_path / "openrlhf")
    assert SEEN == [("calculator", "openrlhf")]
    for script in ("launch.sh", "submit.sh"):
        assert re.search(r"--actor\.adam\.lr 3e-07\s", (job / script).read_text()), script
