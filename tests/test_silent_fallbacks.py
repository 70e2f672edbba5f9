"""No silent fallbacks: an environment without an expert is refused by the scripted policy (at ``rollout`` and
before a warm start builds demonstrations), an expert with no next action fails its episode, and an empty
``<answer></answer>`` is not well-formed."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agentbridge.env import Task
from agentbridge.plugins import Plugins
from agentbridge.rewards import answer_format
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.spec import load_spec
from agentbridge.tools import ToolEnvironment, tool
from agentbridge.trajectory import Trajectory

PLUGIN = textwrap.dedent('''
    """Registers an environment with tools but no scripted expert."""
    from agentbridge.hooks import hookimpl
    from agentbridge.tools import ToolEnvironment


    class PlainEnv(ToolEnvironment):
        resets = 0

        async def reset(self, task):
            PlainEnv.resets += 1
            return await super().reset(task)


    @hookimpl
    def register_environments(register):
        register("plain/noexpert", PlainEnv)
''')


@tool
def echo(text: str) -> str:
    """Echo the text."""
    return text


def test_has_expert() -> None:
    from agentbridge.rollout.policy import has_expert

    class WithExpert(ToolEnvironment):
        def expert_action(self) -> str:
            return "<answer>1</answer>"

    assert not has_expert(ToolEnvironment([echo]))
    assert not has_expert(object())
    assert has_expert(WithExpert([echo]))


def test_scripted_policy_refuses_env_without_expert(tiny_tokenizer: Any) -> None:
    with pytest.raises(ValueError, match="ToolEnvironment has no scripted expert") as e:
        ScriptedPolicy.for_env(ToolEnvironment([echo]), tiny_tokenizer)
    assert "\n" not in str(e.value)


def test_expert_without_next_action_fails_the_episode(tiny_tokenizer: Any) -> None:
    """An expert that returns None has no next turn: the episode ends with an error, not an empty answer."""
    from agentbridge.rollout.driver import run_episode
    from agentbridge.rollout.renderer import Renderer
    from agentbridge.trajectory import Limits

    class LostExpert(ToolEnvironment):
        def expert_action(self) -> str | None:
            return None

    env = LostExpert([echo])
    traj = asyncio.run(run_episode(ScriptedPolicy.for_env(env, tiny_tokenizer), env, Task("t", "q"),
                                   Renderer(tiny_tokenizer), Limits()))
    assert traj.finish_reason == "error"
    assert "LostExpert.expert_action() returned None" in (traj.error or "")


def _plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Plugins:
    (tmp_path / "plain_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    module = importlib.import_module("plain_plugin")
    plugins = Plugins()
    plugins.register("plain_plugin", module, ("(in-process)", ""))
    return plugins


def test_warm_start_refuses_before_demonstrations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  tiny_tokenizer: Any) -> None:
    from agentbridge.training.warm_start import demonstrations

    plugins = _plugins(tmp_path, monkeypatch)
    spec = load_spec("examples/calculator.yaml", ["environment.id=plain/noexpert", "environment.args={}"],
                     registries=plugins.registries)
    agent = Agent(spec, tiny_tokenizer, plugins)
    with pytest.raises(ValueError, match="environment.id plain/noexpert: PlainEnv has no scripted expert"):
        demonstrations(agent, 4)
    assert sys.modules["plain_plugin"].PlainEnv.resets == 0  # refused before any episode


def test_rollout_scripted_refuses_env_without_expert(tmp_path: Path) -> None:
    (tmp_path / "plain_plugin.py").write_text(PLUGIN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "AGENTBRIDGE_PLUGINS": "plain_plugin"}
    res = subprocess.run([sys.executable, "-m", "agentbridge.cli", "rollout", "examples/calculator.yaml",
                          "--policy", "scripted", "-n", "2", "-o", str(tmp_path / "out"),
                          "--set", "environment.id=plain/noexpert", "--set", "environment.args={}"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 1, res.stderr
    assert res.stderr.strip().splitlines() == [
        "error: environment.id plain/noexpert: PlainEnv has no scripted expert (it does not define "
        "expert_action()); the scripted policy cannot play it"]
    assert not (tmp_path / "out").exists()


def _traj(text: str, finish: str = "done") -> Trajectory:
    from agentbridge.trajectory import Turn

    return Trajectory(task_id="t", prompt_ids=[], turns=[Turn(text=text)], finish_reason=finish)


@pytest.mark.parametrize("text, ok", [
    ("<answer>42</answer>", 1.0), ("<answer></answer>", 0.0), ("<answer>  \n </answer>", 0.0),
    ("42", 0.0), ("<answer>1</answer><answer>2</answer>", 0.0),
])
def test_format_needs_a_nonempty_answer(text: str, ok: float) -> None:
    assert answer_format(_traj(text), Task("t", "q")) == ok
    assert answer_format(_traj(text, "length"), Task("t", "q")) == 0.0
