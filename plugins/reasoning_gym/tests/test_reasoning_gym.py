"""The reasoning-gym bridge: tasks by name and difficulty, splits that never share a question, reasoning-gym's own
verifier as the reward, the scripted expert, compile for every backend, and a short training run on CPU."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentbridge.cli import main
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.spec import SpecError, load_spec
from agentbridge.testing import short_training_run
from agentbridge.trajectory import Trajectory, Turn
from agentbridge_reasoning_gym.env import verified_score
from agentbridge_reasoning_gym.tasks import rg_tasks, split_of

SPEC = "examples/reasoning_gym.yaml"


def answered(text: str) -> Trajectory:
    return Trajectory(task_id="t", prompt_ids=[1], turns=[Turn(text=text)])


def test_tasks_by_name_and_difficulty_are_deterministic_and_splits_disjoint() -> None:
    easy = {"basic_arithmetic": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}}
    train, again = rg_tasks("train", 300, 0, easy), rg_tasks("train", 300, 0, easy)
    assert [t.prompt for t in train] == [t.prompt for t in again]
    dev, held_out = rg_tasks("dev", 50, 0, easy), rg_tasks("eval", 50, 0, easy)
    assert not {t.prompt for t in train} & {t.prompt for t in held_out}
    assert not {t.prompt for t in dev} & ({t.prompt for t in train} | {t.prompt for t in held_out})
    assert all(split_of(t.prompt) == "eval" for t in held_out)
    # the difficulty is the task's own config: two one-digit operands
    assert all(len(re.findall(r"\d+", t.prompt)) == 2 and max(map(len, re.findall(r"\d+", t.prompt))) == 1
               for t in train)
    mixed = rg_tasks("eval", 6, 0, ["basic_arithmetic", "leg_counting"])
    assert [t.data["group"] for t in mixed] == ["basic_arithmetic", "leg_counting"] * 3


def test_an_unknown_task_or_argument_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown reasoning-gym task 'basic_arithmetc'; did you mean 'basic_arith"):
        rg_tasks("train", 2, 0, ["basic_arithmetc"])
    from agentbridge.plugins import get_plugins

    with pytest.raises(SpecError) as info:
        load_spec(SPEC, ["data.train.args.task=[leg_counting]"], registries=get_plugins().registries)
    assert "data.train.args.task: unknown argument; did you mean 'tasks'? (rg/tasks)" in info.value.problems[0]


def test_the_reward_is_reasoning_gyms_verifier() -> None:
    (task,) = rg_tasks("eval", 1, 0, ["basic_arithmetic"])
    assert verified_score(answered(f"<answer>{task.data['answer']}</answer>"), task) == 1.0
    assert verified_score(answered("<answer>not a number</answer>"), task) == 0.0
    assert verified_score(answered(task.data["answer"]), task) == 0.0  # no <answer> tag


def test_the_scripted_expert_solves_every_task_through_the_driver() -> None:
    from agentbridge.models import load_tokenizer

    tokenizer = load_tokenizer("builtin:tiny")
    agent = Agent.from_spec(load_spec(SPEC), tokenizer)
    tasks = agent.tasks("eval", size=20)
    trajs = asyncio.run(agent.run(tasks, lambda env: ScriptedPolicy.for_env(env, tokenizer)))
    assert all(t.finish_reason == "done" and t.reward_components["rg/verified"] == 1.0 for t in trajs)
    assert all(len(t.turns) == 1 for t in trajs)


@pytest.mark.parametrize("backend", ["trl", "verl", "openrlhf"])
def test_the_example_compiles_for_every_backend(backend: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["compile", SPEC, "--backend", backend, "-o", str(tmp_path / "job"),
                                       "--set", "data.train.size=16", "--set", "data.eval.size=8"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "job" / "manifest.json").read_text())
    assert manifest["backend"] == backend and manifest["tasks"]["train"] == 16


def test_a_short_training_run_on_cpu(tmp_path: Path) -> None:
    rows = short_training_run(SPEC, tmp_path / "run", ["data.dev.size=8", "algorithm.warm_start.demos=64",
                                                       "algorithm.warm_start.max_steps=4",
                                                       "algorithm.warm_start.dev_every=2",
                                                       "algorithm.warm_start.batch_size=16"])
    assert [r["step"] for r in rows] == [1, 2] and all("reward/rg/verified" in r for r in rows)
    evals = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert {"before_training", "before_rl", "after_rl", "paired"} <= set(evals)
    assert all(evals[arm]["n"] == 8 for arm in ("before_training", "after_rl"))
