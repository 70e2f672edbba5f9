"""The verifiers bridge against verifiers 0.4.0 itself (its own ``Env.run_episode`` in ``.venv-verifiers``, made by
``server_env.sh`` on first use), on the three offline example environments in ``plugins/verifiers/environments``:
one answer (reverse-text), a calculator toolset (MCP), a multi-turn env that answers each guess. Each plays through
agentbridge's driver with the scripted expert and agentbridge's environment checker; the driver's conversation is
the transcript verifiers recorded; the rubric's rewards arrive by name with their weights; wrong answers, unknown
tools, a rewritten history and cut episodes; a task-scoped toolset from a folder of one's own (``paths``); a class
path and a broken id; the example spec validates and compiles for every backend and trains for two steps on CPU."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agentbridge.cli import main
from agentbridge.env import Task
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.spec import load_spec
from agentbridge.testing import check_environment, short_training_run
from agentbridge.trajectory import Trajectory
from agentbridge_verifiers.client import Connection, VerifiersError, server_url, verifiers_python
from agentbridge_verifiers.data import verifiers_capacity, verifiers_tasks
from agentbridge_verifiers.env import VerifiersEnvironment, hermes, to_message, to_wire
from agentbridge_verifiers.rewards import rubric, total

SPEC = "examples/verifiers.yaml"
EXAMPLES = {
    "reverse": {"taskset": "vf_reverse_text", "expert": "vf_reverse_text:expert", "max_turns": 4},
    "calculator": {"taskset": {"id": "vf_calculator"}, "expert": "vf_calculator:expert", "max_turns": 4},
    "guess": {"taskset": "vf_guess", "expert": "vf_guess:expert", "max_turns": 6},
}
WEIGHTS = {"reverse": {"correct": 1.0, "boxed": 0.2}, "calculator": {"correct": 1.0, "used_tools": 0.25},
           "guess": {"solved": 1.0, "efficiency": 0.5}}


@pytest.fixture(scope="session", autouse=True)
def verifiers_venv() -> Path:
    """The verifiers venv's python (``server_env.sh`` creates ``.venv-verifiers`` the first time)."""
    try:
        return verifiers_python()
    except VerifiersError as e:
        pytest.fail(str(e), pytrace=False)


def agent_for(args: dict[str, Any], *sets: str) -> Agent:
    return Agent.from_spec(load_spec(SPEC, [f"environment.args={json.dumps(args)}", "agent.max_turns=6", *sets]))


def play(agent: Agent, tasks: list[Task], policy: Any = None) -> tuple[list[Trajectory], list[Any]]:
    """The episodes, and each episode's environment (the scripted expert unless ``policy`` is given)."""
    envs: list[Any] = []

    def make(env: Any) -> Any:
        envs.append(env)
        return ScriptedPolicy.for_env(env, agent.tokenizer) if policy is None else policy(env)

    return asyncio.run(agent.run(tasks, make)), envs


def test_messages_cross_in_both_forms() -> None:
    wire = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0_0", "type": "function", "function": {"name": "calculator_add", "arguments": '{"a": 1}'}}]}
    assert to_message(wire) == {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_0_0", "type": "function", "function": {"name": "calculator_add", "arguments": {"a": 1}}}]}
    assert to_message({"role": "tool", "tool_call_id": "c", "name": "calculator_add", "content": "3"}) == {
        "role": "tool", "content": "3", "tool_call_id": "c", "name": "calculator_add"}
    call = {"id": "call_0", "type": "function", "function": {"name": "f", "arguments": {"x": 2}}}
    action = {"role": "assistant", "content": 'ok <tool_call>{"name": "f", "arguments": {"x": 2}}</tool_call>',
              "tool_calls": [call]}
    assert to_wire(action) == {"content": "ok", "tool_calls": [{"id": "call_0", "name": "f", "arguments": {"x": 2}}]}
    broken = {"role": "assistant", "content": "<tool_call>{oops</tool_call>"}  # did not parse: the text goes as is
    assert to_wire(broken) == {"content": "<tool_call>{oops</tool_call>", "tool_calls": []}
    assert hermes({"content": "", "tool_calls": [{"name": "f", "arguments": {"x": 2}}]}) == \
        '<tool_call>{"name": "f", "arguments": {"x": 2}}</tool_call>'


def test_a_call_that_rewrites_the_history_is_flagged_and_only_its_new_messages_are_shown() -> None:
    from types import SimpleNamespace

    from agentbridge_verifiers import server

    episode = object.__new__(server.Episode)  # the request bookkeeping alone, without verifiers
    episode.shown, episode.rewrites, episode.turns, episode.tool_mismatch = [], 0, 0, False
    episode.server = SimpleNamespace(tools=[], expert=None)
    first = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    assert episode._request({"messages": first})["messages"] == first
    episode.shown.append(server.comparable({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}))
    echoed = {"role": "assistant", "content": "", "tool_calls": [  # verifiers' echo: arguments as JSON text
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]}
    tool = {"role": "tool", "tool_call_id": "c", "content": "2"}
    clean = episode._request({"messages": [*first, echoed, tool]})
    assert clean["messages"] == [tool] and not clean["rewritten"] and episode.rewrites == 0
    episode.shown.append(server.comparable({"role": "assistant", "content": "done"}))
    rebuilt = [first[0], {"role": "user", "content": "q (rephrased)"}, echoed, tool,
               {"role": "assistant", "content": "done"}, {"role": "user", "content": "next"}]
    again = episode._request({"messages": rebuilt})
    assert again["rewritten"] and again["diverged_at"] == 1 and episode.rewrites == 1
    assert again["messages"] == [{"role": "user", "content": "next"}]


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_the_expert_passes_agentbridges_environment_checker(example: str) -> None:
    args = EXAMPLES[example]
    tasks = verifiers_tasks("eval", 3, 0, **args)
    check_environment(lambda: VerifiersEnvironment(**args), tasks, rewards={"verifiers/reward": total},
                      max_turns=6, timeout_s=120)


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_the_driver_plays_verifiers_own_episode_and_gets_its_rubric(example: str) -> None:
    args = EXAMPLES[example]
    agent = agent_for(args)
    trajs, envs = play(agent, verifiers_tasks("eval", 4, 0, **args))
    for traj, env in zip(trajs, envs, strict=True):
        assert traj.finish_reason == "done" and traj.error is None, traj.error
        done = env.last
        assert done["done"] and done["ok"] and done["rewrites"] == 0
        # the conversation the driver rendered is the one verifiers recorded on its trace, message for message
        assert [to_message(m) for m in done["transcript"]] == [to_message(to_wire_like(m)) for m in traj.messages]
        # each reward by its verifiers name, weighted as verifiers weighs it; their sum is verifiers' own reward
        parts = {k.removeprefix("verifiers/rubric/"): v for k, v in traj.reward_components.items()
                 if k.startswith("verifiers/rubric/")}
        assert parts == {name: score * weight for name, (score, weight) in done["rewards"].items()}
        assert {name: w for name, (_, w) in done["rewards"].items()} == WEIGHTS[example]
        assert traj.reward == pytest.approx(done["reward"]) and traj.metrics["verifiers/history_rewrites"] == 0.0
    if example == "calculator":
        assert all(t.metrics["tools/calls"] == 2 and t.metrics["tools/failures"] == 0 for t in trajs)
        assert [m["role"] for m in trajs[0].messages] == ["system", "user", "assistant", "tool", "assistant", "tool",
                                                          "assistant"]
    if example == "guess":
        assert max(len(t.turns) for t in trajs) > 1  # the env's own run() answered with user turns
        assert any(m["role"] == "user" and "too" in m["content"] for t in trajs for m in t.messages[2:])


def to_wire_like(message: Any) -> dict[str, Any]:
    """A driver message in the shape verifiers records it: the text without its tool-call blocks when it called."""
    if message["role"] != "assistant":
        return dict(message)
    wire = to_wire(message)
    out: dict[str, Any] = {"role": "assistant", "content": wire["content"]}
    if wire["tool_calls"]:
        out["tool_calls"] = [{"id": c["id"], "type": "function", "function": c["function"]}
                             for c in message["tool_calls"]]
    return out


def test_wrong_answers_score_zero_and_unknown_tools_are_told() -> None:
    args = EXAMPLES["calculator"]
    agent = agent_for(args)
    script = ['<tool_call>{"name": "calculator_divide", "arguments": {"a": 1, "b": 2}}</tool_call>', "\\boxed{-1}"]
    [traj], _ = play(agent, verifiers_tasks("eval", 1, 0, **args), policy=lambda env: ScriptedPolicy(
        agent.tokenizer, list(script)))
    assert traj.finish_reason == "done" and traj.metrics["tools/failures"] == 1.0
    assert traj.messages[3]["role"] == "tool" and "unknown tool 'calculator_divide'" in traj.messages[3]["content"]
    assert rubric(traj, None) == {"correct": 0.0, "used_tools": 0.0} and traj.reward == 0.0
    assert traj.metrics["verifiers/score/correct"] == 0.0  # scored by verifiers, not left out


def test_a_cut_episode_is_closed_in_verifiers_and_not_scored() -> None:
    args = EXAMPLES["calculator"]
    agent = agent_for(args, "agent.max_tokens_per_turn=4")  # the expert's tool call does not fit in a turn
    trajs, envs = play(agent, verifiers_tasks("eval", 2, 0, **args))
    assert all(t.finish_reason == "length" and t.reward == 0.0 and "verifiers/reward" not in t.metrics
               for t in trajs)
    assert all(t.reward_components == {"verifiers/rubric/correct": 0.0, "verifiers/rubric/used_tools": 0.0,
                                       "process": 0.0} for t in trajs)  # the declared rewards, unscored
    assert all(env.episode is None for env in envs)
    connection = Connection(server_url(args))
    try:  # the server holds no episode any more: closing cancelled them
        assert connection.request("GET", "/info")["open_episodes"] == 0
    finally:
        connection.close()


def test_a_class_path_plays_and_a_broken_id_is_one_line() -> None:
    args = {"taskset": "vf_reverse_text:ReverseTaskset", "expert": "vf_reverse_text:expert", "max_turns": 2}
    [traj], _ = play(agent_for(args), verifiers_tasks("train", 1, 3, **args))
    assert traj.finish_reason == "done" and rubric(traj, None) == {"correct": 1.0, "boxed": 0.2}
    with pytest.raises(VerifiersError, match=r"taskset 'vf_no_such_env' not found") as info:
        VerifiersEnvironment(taskset="vf_no_such_env").tool_schemas()
    assert "\n" not in str(info.value)


NOTES = """import verifiers.v1 as vf


class NotesConfig(vf.ToolsetConfig):
    pass


class Notes(vf.Toolset[NotesConfig]):
    @vf.tool
    async def shout(self, text: str) -> str:
        \"\"\"Shout the text.\"\"\"
        return text.upper()


if __name__ == "__main__":
    Notes.run()
"""
SHOUT = """import verifiers.v1 as vf
from vf_test_notes import Notes, NotesConfig


class ShoutData(vf.TaskData):
    word: str


class ShoutTask(vf.Task[ShoutData]):
    @classmethod
    def toolsets(cls, config):
        return [Notes(NotesConfig())]

    @vf.reward(weight=2.0)
    async def shouted(self, task, trace) -> float:
        return float(trace.last_reply == task.word.upper())


class ShoutTaskset(vf.Taskset[ShoutTask, vf.TasksetConfig]):
    def load(self):
        for word in ("abc", "xyz"):
            yield ShoutTask(ShoutData(prompt=f"Shout {word}.", word=word), self.config.task)


def expert(task, messages, tools):
    done = [m["content"] for m in messages if m["role"] == "tool"]
    return done[-1] if done else {"tool_calls": [{"name": "notes_shout", "arguments": {"text": task["word"]}}]}
"""


def test_a_task_scoped_toolset_from_a_folder_of_ones_own(tmp_path: Path) -> None:
    """A toolset per rollout (verifiers starts its MCP server for each episode), in a module found by ``paths``."""
    (tmp_path / "vf_test_notes.py").write_text(NOTES)
    (tmp_path / "vf_test_shout.py").write_text(SHOUT)
    args = {"taskset": "vf_test_shout:ShoutTaskset", "expert": "vf_test_shout:expert", "max_turns": 3,
            "paths": [str(tmp_path)]}
    assert [t["function"]["name"] for t in VerifiersEnvironment(**args).tool_schemas()] == ["notes_shout"]
    [traj], _ = play(agent_for(args), verifiers_tasks("train", 1, 0, holdout=False, **args))
    assert traj.finish_reason == "done" and traj.messages[3]["content"] in ("ABC", "XYZ")
    assert rubric(traj, None) == {"shouted": 2.0}


def test_splits_are_held_out_by_position_or_by_verifiers_select() -> None:
    args = EXAMPLES["reverse"]
    train, held = verifiers_tasks("train", 160, 0, **args), verifiers_tasks("eval", 20, 0, **args)
    assert verifiers_capacity("train", **args) == 160 and verifiers_capacity("eval", **args) == 20
    assert {t.data["verifiers"]["idx"] % 10 for t in held} == {9} and not {t.id for t in train} & {t.id for t in held}
    with pytest.raises(ValueError, match="at most 20 distinct eval tasks"):
        verifiers_tasks("eval", 21, 0, **args)
    chosen = verifiers_tasks("eval", 3, 0, select={"include": {"idx": ["0:3"]}}, **args)
    assert sorted(t.data["verifiers"]["idx"] for t in chosen) == [0, 1, 2]


def test_the_example_validates_and_compiles_for_every_backend(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["validate", SPEC])
    assert result.exit_code == 0, result.output
    for backend in ("trl", "verl", "openrlhf", "rlinf", "slime", "roll"):
        result = CliRunner().invoke(main, ["compile", SPEC, "--backend", backend, "-o", str(tmp_path / backend),
                                           "--set", "data.train.size=8", "--set", "data.eval.size=4"])
        assert result.exit_code == 0, result.output
        manifest = json.loads((tmp_path / backend / "manifest.json").read_text())
        assert manifest["backend"] == backend and manifest["tasks"] == {"train": 8, "eval": 4}


def test_a_short_training_run_on_cpu(tmp_path: Path) -> None:
    rows = short_training_run(SPEC, tmp_path / "run", ["algorithm.warm_start.demos=8",
                                                       "algorithm.warm_start.epochs=1", "data.train.size=8",
                                                       "data.eval.size=4", "backend.options.eval_size=4"])
    assert [r["step"] for r in rows] == [1, 2]
    assert all("reward/verifiers/rubric/correct" in r and "reward/verifiers/rubric/used_tools" in r for r in rows)
    assert json.loads((tmp_path / "run" / "eval.json").read_text())["after_rl"]["n"] == 4
