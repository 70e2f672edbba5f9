"""`check` looks at the backend's own environment: a plugin installed here but not there is one line, not a pass;
and the record of backend environments belongs to the checkout, not the user."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from agentbridge import backend_envs
from agentbridge.backends import backend_python
from agentbridge.hooks import hookimpl
from agentbridge.plugins import get_plugins
from agentbridge.preflight import backend_env_problems
from agentbridge.spec import dump_spec, load_spec


def other_interpreter(tmp_path: Path) -> Path:
    """Another interpreter path for this venv: agentbridge imports there, but a plugin registered only in this
    process does not exist there."""
    wrapper = tmp_path / "backend-python"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def test_a_plugin_missing_in_the_backend_environment_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTBRIDGE_LOCALONLY_PYTHON", str(other_interpreter(tmp_path)))
    monkeypatch.delenv("AGENTBRIDGE_PLUGINS", raising=False)
    module = types.ModuleType("local_only_plugin")
    module.register_rewards = hookimpl(lambda register: register("local/only", lambda t, task: 1.0))  # type: ignore[attr-defined]
    plugins = get_plugins()
    plugins.register("local_only_plugin", module)
    try:
        spec = load_spec("examples/calculator.yaml", ["reward.1.id=local/only"], registries=plugins.registries)
        path = tmp_path / "spec.yaml"
        path.write_text(dump_spec(spec))
        (line,) = backend_env_problems(path, "localonly", "no_such_backend_module")
        assert line.startswith("reward[1].id: unknown reward 'local/only'") and "localonly's environment" in line
        fine = tmp_path / "fine.yaml"
        fine.write_text(dump_spec(load_spec("examples/calculator.yaml")))
        assert backend_env_problems(fine, "localonly", "no_such_backend_module") == []
    finally:
        plugins.unregister("local_only_plugin")
    assert backend_env_problems(path, "trl", "json") == []  # runs in this interpreter: checked here already


def test_environments_are_recorded_per_checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AGENTBRIDGE_HOME", raising=False)
    for name in ("one", "two"):
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    monkeypatch.chdir(tmp_path / "one" / "sub")
    backend_envs.record("tiny", {"python": sys.executable})
    assert json.loads((tmp_path / "one" / ".agentbridge" / "environments.json").read_text())["tiny"]
    assert backend_python("tiny", "no_such_module_here") == sys.executable
    monkeypatch.chdir(tmp_path / "two")
    assert backend_envs.recorded() == {}  # the second checkout does not see the first one's environments
    monkeypatch.setenv("AGENTBRIDGE_HOME", str(tmp_path / "one" / ".agentbridge"))  # shared on purpose
    assert backend_envs.recorded()["tiny"]["python"] == sys.executable
