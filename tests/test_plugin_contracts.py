"""Registration checks each reward, tool, environment and dataset against the way the driver calls it: a bad one
is one line (the plugin, the id, what is wrong) in ``plugins.errors``, stays out of its registry, and fails the
validation of a spec that uses it with that line. The other ids of the same plugin are registered as usual."""

from __future__ import annotations

import datetime
import types
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import agentbridge.plugins
from agentbridge.env import StepResult
from agentbridge.hooks import hookimpl
from agentbridge.plugins import PluginError, Plugins, dataset_problem, environment_problem
from agentbridge.rewards import reward_problem
from agentbridge.tools import ToolEnvironment, tool, tool_problem

CALC = "examples/calculator.yaml"


def plugin(name: str, **hooks: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    for hook_name, fn in hooks.items():
        setattr(module, hook_name, hookimpl(fn))
    return module


def wrong_reward(completion: str) -> float:  # the shape other frameworks use: not what the driver passes
    return 1.0


def good_reward(trajectory: Any, task: Any) -> float:
    return 1.0


def untyped_search(query, k: int = 3) -> str:  # type: ignore[no-untyped-def]
    """Search the corpus.

    Args:
        query: what to look for
        k: how many passages
    """
    return str(query)


def broken_plugin() -> types.ModuleType:
    def rewards(register: Any) -> None:
        register("mine/answer", wrong_reward)
        register("mine/good", good_reward)

    def tools(register: Any) -> None:
        register(untyped_search)

    return plugin("mine", register_rewards=rewards, register_tools=tools)


def test_a_reward_with_the_wrong_signature_is_one_line_and_left_out() -> None:
    pm = Plugins(entry_points=False, extra=[("mine", broken_plugin())])
    line = ("plugin mine: reward 'mine/answer' was not registered: wrong_reward(completion) cannot be called as "
            "fn(trajectory, task, **args): a reward receives the episode's Trajectory and its Task as its first two "
            "arguments")
    assert line in pm.errors
    assert "mine/answer" not in pm.rewards and "mine/good" in pm.rewards  # the hook went on after the bad one
    with pytest.raises(PluginError) as info:
        pm.rewards.get("mine/answer")
    assert str(info.value) == line
    assert pm.rewards.unknown("mine/answr").startswith("unknown reward 'mine/answr'")  # a typo is still a typo


def test_a_tool_without_type_hints_is_one_line_and_left_out() -> None:
    pm = Plugins(entry_points=False, extra=[("mine", broken_plugin())])
    (line,) = [e for e in pm.errors if "tool" in e]
    assert line.startswith("plugin mine: tool 'untyped_search' was not registered: parameter 'query' has no type "
                           "hint")
    assert "untyped_search" not in pm.tools
    assert len(pm.errors) == 2  # the reward's line and the tool's line, nothing else


def test_a_rejected_id_is_still_claimed_by_its_plugin() -> None:
    other = plugin("other", register_rewards=lambda register: register("mine/answer", good_reward))
    with pytest.raises(PluginError, match="reward id 'mine/answer' is registered by two plugins: mine and other"):
        Plugins(entry_points=False, extra=[("mine", broken_plugin()), ("other", other)])


def test_unregister_forgets_the_rejected_ids() -> None:
    pm = Plugins(entry_points=False)
    pm.register("mine", broken_plugin())
    assert "mine/answer" in pm.rewards.rejected
    pm.unregister("mine")
    assert "mine/answer" not in pm.rewards.rejected
    assert pm.rewards.unknown("mine/answer").startswith("unknown reward 'mine/answer'")


def test_register_called_with_the_wrong_arguments_is_one_line() -> None:
    def rewards(register: Any) -> None:
        register(good_reward)  # the id is missing
        register("mine/good", good_reward)

    pm = Plugins(entry_points=False, extra=[("mine", plugin("mine", register_rewards=rewards))])
    assert pm.errors == ["plugin mine: register_rewards called register(id, reward) with 1 argument(s)"]
    assert "mine/good" in pm.rewards


def test_a_tool_that_tool_cannot_read_is_one_line() -> None:
    def lookup(key: NoSuchType) -> str:  # type: ignore[name-defined] # noqa: F821 - the hint cannot be resolved
        """Look a key up."""
        return str(key)

    def tools(register: Any) -> None:
        register(lookup)
        register(tool(lambda city: city, name="weather"))

    pm = Plugins(entry_points=False, extra=[("mine", plugin("mine", register_tools=tools))])
    assert pm.errors == ["plugin mine: tool 'lookup' was not registered: NameError: name 'NoSuchType' is not defined",
                         "plugin mine: tool 'weather' was not registered: parameter 'city' has no type hint (the "
                         "JSON schema needs one; without it the model is told the argument is a string)"]


def test_every_installed_plugin_fits_its_contracts() -> None:
    pm = Plugins()
    assert pm.errors == []
    assert all(not registry.rejected for registry in pm.registries.values())


@pytest.mark.parametrize("fn", [
    good_reward,
    lambda t, task, **args: 1.0,
    lambda t, task, scale=1.0: scale,
    lambda *args, **kwargs: 0.0,
])
def test_rewards_the_driver_can_call(fn: Any) -> None:
    assert reward_problem(fn) is None


async def async_reward(trajectory: Any, task: Any, *, threshold: float) -> float:
    return threshold


class CallableReward:
    def __call__(self, trajectory: Any, task: Any) -> float:
        return 1.0


def test_async_and_object_rewards_fit() -> None:
    assert reward_problem(async_reward) is None
    assert reward_problem(CallableReward()) is None


@pytest.mark.parametrize(("fn", "expected"), [
    (lambda: 1.0, "<lambda>() cannot be called as fn(trajectory, task, **args)"),
    (lambda *, trajectory, task: 1.0, "<lambda>(trajectory, task) cannot be called as fn(trajectory, task"),
    (lambda t, task, k, /: 1.0, "positional-only parameter(s) k cannot be given"),
    (0.5, "expected a function (trajectory, task, **args)"),
])
def test_rewards_the_driver_cannot_call(fn: Any, expected: str) -> None:
    problem = reward_problem(fn)
    assert problem is not None and expected in problem


def test_tool_hints() -> None:
    @tool
    def typed(query: str, k: int = 3, anything: Any = None) -> str:
        """Search."""
        return query

    @tool
    def dated(day: datetime.date) -> str:
        """Say the day."""
        return str(day)

    assert tool_problem(typed) is None
    problem = tool_problem(dated)
    assert problem is not None and "parameter 'day' has a type without a JSON schema (date;" in problem


class SoundEnv(ToolEnvironment):
    pass


class NoClose:
    async def reset(self, task: Any) -> list[Any]:
        return []

    async def step(self, action: Any) -> StepResult:
        return StepResult(observation=[], done=True)


class SyncStep(NoClose):
    def step(self, action: Any) -> StepResult:  # type: ignore[override]
        return StepResult(observation=[], done=True)

    async def close(self) -> None:
        return None


class StepWithoutAction(NoClose):
    async def step(self) -> StepResult:  # type: ignore[override]
        return StepResult(observation=[], done=True)

    async def close(self) -> None:
        return None


def test_environments() -> None:
    assert environment_problem(SoundEnv) is None
    assert environment_problem(lambda **args: SoundEnv()) is None
    assert "NoClose has no close() method" in (environment_problem(NoClose) or "")
    assert "SyncStep.step() must be async" in (environment_problem(SyncStep) or "")
    assert "StepWithoutAction.step(self) cannot be called as step(self, action)" in (
        environment_problem(StepWithoutAction) or "")
    assert "expected a class or factory" in (environment_problem("search/multihop") or "")


def test_datasets() -> None:
    def tasks(split: str, size: int, seed: int, level: int = 1) -> list[Any]:
        return []

    def only_size(n: int) -> list[Any]:
        return []

    assert dataset_problem(tasks) is None
    assert dataset_problem(lambda **kwargs: []) is None
    assert dataset_problem(only_size) == ("test_datasets.<locals>.only_size(n) does not take split, size, seed; "
                                          "datasets are called as fn(split=..., size=..., seed=..., **args)")


@pytest.fixture
def with_broken_plugin(monkeypatch: pytest.MonkeyPatch) -> Plugins:
    """The installed plugins plus ``mine`` as the process-wide manager."""
    pm = Plugins(extra=[("mine", broken_plugin())])
    monkeypatch.setattr(agentbridge.plugins, "get_plugins", lambda: pm)
    return pm


def test_validate_of_a_spec_using_a_rejected_id_fails_with_its_line(with_broken_plugin: Plugins,
                                                                      tmp_path: Path) -> None:
    from agentbridge.cli import main

    spec = tmp_path / "spec.yaml"
    spec.write_text(Path(CALC).read_text().replace("{id: math/exact_answer, weight: 1.0}",
                                                   "{id: mine/answer, weight: 1.0}"))
    result = CliRunner().invoke(main, ["validate", str(spec)])
    assert result.exit_code == 1
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert error.endswith("reward[0].id: plugin mine: reward 'mine/answer' was not registered: "
                          "wrong_reward(completion) cannot be called as fn(trajectory, task, **args): a reward "
                          "receives the episode's Trajectory and its Task as its first two arguments")


def test_validate_of_a_spec_not_using_it_warns(with_broken_plugin: Plugins) -> None:
    from agentbridge.cli import main

    result = CliRunner().invoke(main, ["validate", CALC])
    assert result.exit_code == 0, result.output
    assert "warning: plugin mine: reward 'mine/answer' was not registered" in result.stderr
    assert "warning: plugin mine: tool 'untyped_search' was not registered" in result.stderr
    assert "reward[0].id" not in result.stderr


def test_check_environment_names_a_tool_without_type_hints() -> None:
    from agentbridge.env import Task
    from agentbridge.testing import environment_problems

    problems = environment_problems(lambda: ToolEnvironment([untyped_search]), [Task(id="1", prompt="find it")])
    assert ("tools: tool untyped_search: parameter 'query' has no type hint (the JSON schema needs one; without it "
            "the model is told the argument is a string)") in problems
    assert not any("untyped_search" in p for p in environment_problems(lambda: ToolEnvironment([typed_search]),
                                                                       [Task(id="1", prompt="find it")]))


def typed_search(query: str, k: int = 3) -> str:
    """Search the corpus.

    Args:
        query: what to look for
        k: how many passages
    """
    return query
