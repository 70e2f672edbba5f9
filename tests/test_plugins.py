"""Plugin manager: default plugins, attribution, duplicate ids, unknown ids, hooks."""

from __future__ import annotations

import types
from typing import Any

import pytest

from agentbridge.hooks import hookimpl
from agentbridge.plugins import PluginError, Plugins


def plugin(name: str, **hooks: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    for hook_name, fn in hooks.items():
        setattr(module, hook_name, hookimpl(fn))
    return module


def rewards_plugin(name: str, reward_id: str) -> types.ModuleType:
    return plugin(name, register_rewards=lambda register: register(reward_id, lambda t, task: 1.0))


def test_builtins_are_a_default_plugin() -> None:
    pm = Plugins(entry_points=False)
    info, golden = pm.info()
    assert info.name == "agentbridge.builtins" and info.distribution == "agentbridge"
    assert info.registered == {"rewards": ["core/exact_answer", "core/format"], "tool_parsers": ["hermes"]}
    assert golden.name == "agentbridge.conformance" and golden.distribution == "agentbridge"  # the golden episodes
    assert golden.registered == {"datasets": ["conformance/golden"], "environments": ["conformance/golden"],
                                 "tools": ["golden_add", "golden_look"]}


def test_entry_points_are_discovered() -> None:
    pm = Plugins()
    math = next(i for i in pm.info() if i.name == "math")
    assert math.distribution == "agentbridge-math" and math.version == "0.1.0"
    assert math.registered["environments"] == ["math/calculator"]
    assert pm.registries["tools"].entries["calculator"].plugin == "math"


def test_duplicate_id_names_both_plugins() -> None:
    with pytest.raises(PluginError) as info:
        Plugins(entry_points=False, extra=[("first", rewards_plugin("first", "x/r")),
                                           ("second", rewards_plugin("second", "x/r"))])
    assert str(info.value) == "reward id 'x/r' is registered by two plugins: first and second"
    with pytest.raises(PluginError, match="registered by two plugins: agentbridge.builtins and mine"):
        Plugins(entry_points=False, extra=[("mine", rewards_plugin("mine", "core/format"))])


def test_unknown_id_suggests() -> None:
    pm = Plugins(entry_points=False)
    with pytest.raises(PluginError, match="unknown reward 'core/formt'; did you mean 'core/format'"):
        pm.registries["rewards"].get("core/formt")


def test_broken_register_hook_is_reported_not_fatal() -> None:
    def broken(register: Any) -> None:
        raise RuntimeError("oops")

    pm = Plugins(entry_points=False, extra=[("bad", plugin("bad", register_tools=broken))])
    assert pm.errors == ["plugin bad: register_tools failed: RuntimeError: oops"]


def test_on_episode_end_hook_is_called() -> None:
    seen: list[Any] = []
    observer = plugin("obs", on_episode_end=lambda trajectory: seen.append(trajectory))
    pm = Plugins(entry_points=False, extra=[("obs", observer)])
    pm.hook.on_episode_end(trajectory="T")
    assert seen == ["T"]


def test_public_import_face_is_light() -> None:
    import subprocess
    import sys

    code = ("import sys; from agentbridge import hookimpl, tool, Environment, ToolEnvironment, Task, StepResult, "
            "Message, Trajectory; import agentbridge.hooks, agentbridge.tools, agentbridge.env; "
            "assert hookimpl is agentbridge.hooks.hookimpl and tool is agentbridge.tools.tool; "
            "assert Task is agentbridge.env.Task and StepResult is agentbridge.env.StepResult; "
            "heavy = [x for x in ('torch', 'transformers') if x in sys.modules]; assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)
