"""agentbridge.testing.check_environment: a sound environment passes; each kind of mistake is one clear line."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentbridge.env import Message, StepResult, Task, text_of
from agentbridge.rewards import extract_answer
from agentbridge.testing import EnvironmentCheckError, check_environment, environment_problems
from agentbridge.tools import ToolEnvironment, tool
from agentbridge.trajectory import Trajectory


@tool
def shout(text: str) -> str:
    """Upper-case a text.

    Args:
        text: The text to shout.
    """
    return text.upper()


@tool
def whisper(text: str) -> str:
    """Lower-case a text."""
    return text.lower()


class ShoutEnv(ToolEnvironment):
    """Shout the task's word with the tool, then answer with the result."""

    def __init__(self) -> None:
        super().__init__([shout])

    def expert_action(self) -> str:
        assert self.task is not None
        results = [text_of(m) for m in self.history if m.get("role") == "tool"]
        if not results:
            return f"<tool_call>{json.dumps({'name': 'shout', 'arguments': {'text': self.task.data['word']}})}" \
                   "</tool_call>"
        return f"<answer>{results[-1]}</answer>"


def exact(trajectory: Trajectory, task: Task) -> float:
    return float(extract_answer(trajectory.final_text) == task.data["word"].upper())


TASKS = [Task(id=f"t{i}", prompt=f"Shout '{w}'.", data={"word": w}) for i, w in enumerate(["abc", "hey"])]


def test_a_sound_environment_passes() -> None:
    assert environment_problems(ShoutEnv, TASKS, rewards={"exact": exact}) == []
    check_environment(ShoutEnv(), TASKS, rewards={"exact": exact})  # an instance is reused across episodes


class WrongExpert(ShoutEnv):
    def expert_action(self) -> str:
        return "<answer>nope</answer>"


class EndlessExpert(ShoutEnv):
    def expert_action(self) -> str:
        return '<tool_call>{"name": "shout", "arguments": {"text": "again"}}</tool_call>'


class FailingToolExpert(ShoutEnv):
    def expert_action(self) -> str:
        if not any(m.get("role") == "tool" for m in self.history):
            return '<tool_call>{"name": "shout", "arguments": {"words": "x"}}</tool_call>'
        return "<answer>ABC</answer>"


class NoExpertText(ShoutEnv):
    def expert_action(self) -> Any:
        return None


class BadReset(ShoutEnv):
    async def reset(self, task: Task) -> Any:
        await super().reset(task)
        return task.prompt


class BadMessage(ShoutEnv):
    async def reset(self, task: Task) -> list[Message]:
        return [{"role": "human", "content": task.prompt}]


class DictStep(ShoutEnv):
    async def step(self, action: Message) -> Any:
        return {"observation": [], "done": True}


class BadTypes(ShoutEnv):
    async def step(self, action: Message) -> StepResult:
        result = await super().step(action)
        return StepResult(observation=result.observation, reward=float("nan"), done=1,  # type: ignore[arg-type]
                          metrics={"ok": 1.0, "bad": "x"})  # type: ignore[dict-item]


class Fragile(ShoutEnv):
    """Looks tools up without a guard: an unknown tool name raises."""

    async def step(self, action: Message) -> StepResult:
        for call in action.get("tool_calls") or []:
            self.tools[call["function"]["name"]]  # noqa: B018 - the lookup is the bug
        return await super().step(action)


class Silent(ShoutEnv):
    """Swallows a malformed tool call: no observation, and the episode goes on."""

    async def step(self, action: Message) -> StepResult:
        if action.get("tool_call_errors"):
            return StepResult(observation=[])
        return await super().step(action)


class UndocumentedTool(ShoutEnv):
    def __init__(self) -> None:
        ToolEnvironment.__init__(self, [shout, whisper])


class SyncReset:
    def reset(self, task: Task) -> list[Message]:
        return [{"role": "user", "content": task.prompt}]

    async def step(self, action: Message) -> StepResult:
        return StepResult(observation=[], done=True)

    async def close(self) -> None:
        return None


class NeedsArgs(ShoutEnv):
    def __init__(self, level: int) -> None:
        super().__init__()


@pytest.mark.parametrize(("env", "expected"), [
    (WrongExpert, "task t0: expert: reward exact is 0 for the expert's episode, expected at least 1"),
    (EndlessExpert, "task t0: expert: did not end the episode within 10 turns"),
    (FailingToolExpert, "task t0: expert turn 1: a tool call failed: Error: bad arguments for shout: missing "
                        "required argument(s): text."),
    (NoExpertText, "task t0: expert turn 1: expert_action() returned None, expected the assistant's text"),
    (BadReset, "task t0: reset: must return a non-empty list of messages, got Shout 'abc'."),
    (BadMessage, "task t0: reset: message role 'human' is not one of system, user, assistant, tool"),
    (DictStep, "task t0: expert turn 1: step: returned dict, expected agentbridge.env.StepResult"),
    (BadTypes, "task t0: expert turn 1: step: StepResult.reward must be a finite number, got nan"),
    (BadTypes, "task t0: expert turn 1: step: StepResult.done must be a bool, got int"),
    (BadTypes, "task t0: expert turn 1: step: StepResult.metrics must map names to finite numbers; not so for bad"),
    (Fragile, "task t0: step(a call to an unknown tool): raised KeyError: 'agentbridge_check_no_such_tool'"),
    (Silent, "task t0: step(a malformed tool call): returned no observation and did not end the episode"),
    (UndocumentedTool, "tool_schemas(): tool whisper: argument 'text' has no description (document it under Args:"),
    (SyncReset, "SyncReset: reset() must be async"),
    (NeedsArgs, "NeedsArgs(): raised TypeError"),
])
def test_each_mistake_is_one_line(env: Any, expected: str) -> None:
    problems = environment_problems(env, TASKS, rewards={"exact": exact})
    assert [p for p in problems if p.startswith(expected)], problems


def test_a_problem_seen_again_is_counted_not_repeated() -> None:
    problems = environment_problems(WrongExpert, TASKS, rewards={"exact": exact})
    assert problems == ["task t0: expert: reward exact is 0 for the expert's episode, expected at least 1 "
                        "(and 1 more time(s), e.g. task t1: expert)"]


def test_check_environment_raises_with_every_problem() -> None:
    with pytest.raises(EnvironmentCheckError) as info:
        check_environment(BadTypes, TASKS)
    assert len(info.value.problems) == 3 and "3 problem(s)" in str(info.value)
    with pytest.raises(EnvironmentCheckError, match="give at least one task"):
        check_environment(ShoutEnv, [])


EXIT_CONFTEST = '''
import atexit, pathlib
from agentbridge.testing import ExitAfterReport

atexit.register(lambda: pathlib.Path("finalized").write_text("the interpreter shut down"))


def pytest_configure(config):
    config.pluginmanager.register(ExitAfterReport(), "exit-after-report")
'''


@pytest.mark.parametrize(("body", "status", "summary"), [
    ("def test_ok():\n    assert 1 + 1 == 2\n", 0, "1 passed"),
    ("def test_bad():\n    assert 1 + 1 == 3\n", 1, "1 failed"),
])
def test_exit_after_report_keeps_pytests_status_and_report(tmp_path: Any, body: str, status: int,
                                                           summary: str) -> None:
    import subprocess
    import sys

    (tmp_path / "conftest.py").write_text(EXIT_CONFTEST)
    (tmp_path / "test_one.py").write_text(body)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_one.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == status, done.stdout + done.stderr
    assert summary in done.stdout
    assert not (tmp_path / "finalized").exists()  # ended before the interpreter's own shutdown
