"""The Gymnasium bridge: codecs, the planning expert (checked with agentbridge's environment checker), bad actions
told to the model, disjoint seeds per split, compile for every backend, and a short training run on CPU."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentbridge.cli import main
from agentbridge.env import Task
from agentbridge.rewards import PROCESS
from agentbridge.testing import check_environment, short_training_run
from agentbridge_gymnasium.env import GymTextEnv, parse_action, solved
from agentbridge_gymnasium.tasks import gym_episodes

SPEC = "examples/gymnasium.yaml"


def test_actions_are_parsed_by_name() -> None:
    moves = ["left", "down", "right", "up"]
    assert parse_action("<action> Down </action>", moves) == 1
    assert parse_action("first <action>up</action> then <action>left</action>", moves) == 0
    assert parse_action("right", moves) == 2 and parse_action("jump", moves) is None


@pytest.mark.parametrize(("env_id", "args"), [("FrozenLake-v1", {"map": {"size": 4}}), ("Taxi-v4", {}),
                                              ("CliffWalking-v1", {})])
def test_the_planning_expert_solves_every_episode(env_id: str, args: dict) -> None:
    tasks = gym_episodes("eval", 5, 0, env_id=env_id)
    check_environment(lambda: GymTextEnv(env_id, **args), tasks, rewards={"gym/solved": solved}, max_turns=40)


def test_a_bad_action_is_told_and_the_episode_goes_on() -> None:
    async def play() -> None:
        env = GymTextEnv("FrozenLake-v1", map={"size": 4})
        first = await env.reset(Task(id="t", prompt="", data={"seed": 3}))
        assert "@" in first[0]["content"] and "<action>left</action>" in first[0]["content"]
        result = await env.step({"role": "assistant", "content": "<action>jump</action>"})
        assert not result.done and result.metrics == {"gym/invalid_actions": 1.0}
        assert "left, down, right, up" in result.observation[0]["content"]
        await env.close()

    asyncio.run(play())


def test_splits_never_share_a_seed_and_maps_differ() -> None:
    train = {t.data["seed"] for t in gym_episodes("train", 500, 0)}
    held_out = {t.data["seed"] for t in gym_episodes("eval", 100, 0)}
    assert len(train) == 500 and not train & held_out
    env = GymTextEnv("FrozenLake-v1", map={"size": 4})
    maps = {asyncio.run(env.reset(t))[0]["content"] for t in gym_episodes("eval", 10, 0)}
    assert len(maps) > 5


def test_an_env_without_a_codec_is_one_line() -> None:
    with pytest.raises(ValueError, match="no text codec for 'MountainCar-v0'"):
        GymTextEnv("MountainCar-v0")


@pytest.mark.parametrize("backend", ["trl", "verl", "openrlhf"])
def test_the_example_compiles_for_every_backend(backend: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["compile", SPEC, "--backend", backend, "-o", str(tmp_path / "job"),
                                       "--set", "data.train.size=16", "--set", "data.eval.size=8"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "job" / "manifest.json").read_text())["backend"] == backend


def test_a_short_training_run_on_cpu(tmp_path: Path) -> None:
    rows = short_training_run(SPEC, tmp_path / "run", ["data.dev.size=8", "algorithm.warm_start.demos=32",
                                                       "algorithm.warm_start.max_steps=4",
                                                       "algorithm.warm_start.dev_every=2",
                                                       "algorithm.warm_start.batch_size=16"])
    assert [r["step"] for r in rows] == [1, 2] and all("reward/gym/solved" in r for r in rows)
    assert all(f"reward/{PROCESS}" in r for r in rows)  # the env's per-step rewards
    assert {"before_training", "before_rl", "after_rl"} <= set(json.loads((tmp_path / "run" / "eval.json").read_text()))
