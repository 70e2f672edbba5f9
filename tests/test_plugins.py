"""Plugin manager: default plugins, attribution, duplicate ids, unknown ids, hooks."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from functools import cache
from typing import Any

import pytest

import agentbridge.plugins
from agentbridge.hooks import hookimpl
from agentbridge.plugins import PLUGINS_ENV, PluginError, Plugins, enable_plugin

GOLDEN = "agentbridge.conformance.golden"


def plugin(name: str, **hooks: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    for hook_name, fn in hooks.items():
        setattr(module, hook_name, hookimpl(fn))
    return module


def rewards_plugin(name: str, reward_id: str) -> types.ModuleType:
    return plugin(name, register_rewards=lambda register: register(reward_id, lambda t, task: 1.0))


GOLDEN_IDS = {"datasets": ["conformance/golden"], "environments": ["conformance/golden"],
              "rewards": ["conformance/fragile", "conformance/tool_turn"], "tools": ["golden_add", "golden_look"]}


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A process that has opted in to nothing: no AGENTBRIDGE_PLUGINS, a process-wide manager of its own."""
    monkeypatch.setenv(PLUGINS_ENV, "")  # so that the variable is restored afterwards, whatever sets it
    monkeypatch.delenv(PLUGINS_ENV)
    get_plugins = cache(Plugins)
    monkeypatch.setattr(agentbridge.plugins, "get_plugins", get_plugins)
    return get_plugins


def test_builtins_are_the_only_default_plugin(fresh_process: Any) -> None:
    (info,) = Plugins(entry_points=False).info()
    assert info.name == "agentbridge.builtins" and info.distribution == "agentbridge"
    assert info.registered == {"rewards": ["core/exact_answer", "core/format", "core/judge", "core/reward_model"],
                               "tool_parsers": ["hermes"]}
    names = [i.name for i in Plugins().info()]
    assert "agentbridge.builtins" in names and GOLDEN not in names
    assert "conformance/golden" not in fresh_process().environments


def test_golden_fixtures_are_registered_by_the_conformance_suite(fresh_process: Any) -> None:
    from agentbridge.conformance import golden_spec

    before = fresh_process()
    assert "conformance/fragile" not in before.rewards
    spec = golden_spec("text")
    assert spec.environment.id == "conformance/golden"
    assert os.environ[PLUGINS_ENV] == GOLDEN  # processes started from here see them too
    assert fresh_process() is before  # registered in the manager already built
    golden = next(i for i in before.info() if i.name == GOLDEN)
    assert (golden.distribution, golden.registered) == ("agentbridge", GOLDEN_IDS)
    assert next(i for i in Plugins().info() if i.name == GOLDEN).registered == GOLDEN_IDS
    assert GOLDEN not in [i.name for i in Plugins(entry_points=False).info()]
    golden_spec("vlm")  # enabling twice changes nothing
    assert os.environ[PLUGINS_ENV] == GOLDEN and [i.name for i in before.info()].count(GOLDEN) == 1


def test_plugins_command_shows_golden_only_when_enabled() -> None:
    def listed(**extra: str) -> str:
        env = {k: v for k, v in os.environ.items() if k != PLUGINS_ENV} | {"COLUMNS": "200", **extra}
        res = subprocess.run([sys.executable, "-m", "agentbridge.cli", "plugins"], capture_output=True, text=True,
                             timeout=300, env=env)
        assert res.returncode == 0, res.stderr
        return res.stdout

    assert "agentbridge.builtins" in (plain := listed()) and "conformance" not in plain
    assert "conformance/golden" in listed(**{PLUGINS_ENV: GOLDEN})


def test_enabled_module_that_fails_to_import_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PLUGINS_ENV, "no_such_module_xyz")
    pm = Plugins()
    assert pm.errors[-1] == (f"plugin no_such_module_xyz ({PLUGINS_ENV}) failed to load: "
                             "ModuleNotFoundError: No module named 'no_such_module_xyz'")


def test_register_and_unregister_after_construction(fresh_process: Any) -> None:
    pm = Plugins(entry_points=False)
    pm.register("late", rewards_plugin("late", "late/r"))
    assert pm.rewards.entries["late/r"].plugin == "late" and "late" in [i.name for i in pm.info()]
    with pytest.raises(PluginError, match="two plugins are named 'late'"):
        pm.register("late", rewards_plugin("late", "late/other"))
    pm.unregister("late")
    assert "late/r" not in pm.rewards and "late" not in [i.name for i in pm.info()]
    assert pm.pm.get_plugin("late") is None


def test_enable_plugin_reaches_the_built_manager(fresh_process: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    module = rewards_plugin("mod_for_enable", "enabled/r")
    monkeypatch.setitem(sys.modules, "mod_for_enable", module)
    built = fresh_process()
    enable_plugin("mod_for_enable")
    assert built.rewards.entries["enabled/r"].plugin == "mod_for_enable"
    assert built.dists["mod_for_enable"] == ("(in-process)", "")
    assert "enabled/r" in Plugins().rewards


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


def test_a_broken_backend_package_is_one_row_and_leaves_the_others_alone(fresh_process: Any,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend whose object cannot say its capabilities: `agentbridge backends` lists it as broken, in one row,
    and compiling for another backend still works (its capability notes skip it)."""
    from click.testing import CliRunner

    from agentbridge.backends import known_capabilities
    from agentbridge.cli import main

    class Broken:
        name = "broken"

    module = plugin("mod_broken_backend", register_backends=lambda register: register(Broken()))
    monkeypatch.setitem(sys.modules, "mod_broken_backend", module)
    fresh_process()
    enable_plugin("mod_broken_backend")
    result = CliRunner().invoke(main, ["backends"], terminal_width=400)
    assert result.exit_code == 0, result.output
    cells = " ".join(line.split("│")[2].strip() for line in result.output.splitlines() if line.count("│") > 3)
    assert "broken: AttributeError: 'Broken' object has no attribute 'capabilities'" in " ".join(cells.split())
    assert "broken" not in known_capabilities() and "trl" in known_capabilities()
