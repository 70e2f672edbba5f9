"""The TextWorld bridge: games generated offline and cached, the walkthrough expert (checked with agentbridge's
environment checker) winning every game, points as per-step rewards, bad commands told to the model, disjoint
games per split, compile for every backend, and a short training run on CPU."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentbridge.cli import main
from agentbridge.rewards import PROCESS
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.spec import load_spec
from agentbridge.testing import check_environment, short_training_run
from agentbridge_textworld.env import TextWorldEnv, parse_command, won
from agentbridge_textworld.games import challenge_settings, game_file, textworld_games

SPEC = "examples/textworld.yaml"


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTBRIDGE_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_commands_are_parsed_from_the_action_tag() -> None:
    assert parse_command("I will go. <action> go   north </action>") == "go north"
    assert parse_command("<action>open door</action> then <action>take coin</action>") == "take coin"
    assert parse_command("look") == "look" and parse_command("<action> </action>") == ""


def test_games_are_generated_once_per_seed_and_splits_never_share_one() -> None:
    settings = challenge_settings("tw-coin_collector", {"level": 2})
    first = game_file("tw-coin_collector", settings, 5)
    assert first.is_file() and game_file("tw-coin_collector", settings, 5) == first  # cached
    assert game_file("tw-coin_collector", challenge_settings("tw-coin_collector", {"level": 3}), 5) != first
    train = {t.data["game_seed"] for t in textworld_games("train", 50, challenge="tw-coin_collector")}
    held_out = {t.data["game_seed"] for t in textworld_games("eval", 50, challenge="tw-coin_collector")}
    assert len(train) == 50 and not train & held_out
    with pytest.raises(ValueError, match="challenge must be one of tw-simple"):
        textworld_games("train", 1, challenge="zork")


@pytest.mark.parametrize(("challenge", "settings"), [("tw-coin_collector", {"level": 3}), ("tw-simple", {}),
                                                     ("tw-treasure_hunter", {"level": 2})])
def test_the_walkthrough_expert_wins_every_game(challenge: str, settings: dict) -> None:
    tasks = textworld_games("eval", 3, challenge=challenge, settings=settings)
    check_environment(TextWorldEnv, tasks, rewards={"textworld/won": won}, max_turns=30)


def test_points_are_per_step_rewards_and_a_bad_command_is_told() -> None:
    async def play() -> None:
        env = TextWorldEnv()
        [task] = textworld_games("eval", 1, challenge="tw-simple")
        first = await env.reset(task)
        assert "-= " in first[0]["content"] and ">" not in first[0]["content"].splitlines()[-1]
        empty = await env.step({"role": "assistant", "content": "<action></action>"})
        assert not empty.done and empty.metrics == {"textworld/invalid_actions": 1.0}
        nonsense = await env.step({"role": "assistant", "content": "<action>fly to the moon</action>"})
        assert not nonsense.done and nonsense.reward == 0.0 and nonsense.observation[0]["content"]
        rewards = []
        while True:
            result = await env.step({"role": "assistant", "content": env.expert_action()})
            rewards.append(result.reward)
            if result.done:
                break
        assert result.metrics["textworld/won"] == 1.0 and sum(rewards) == env.state.max_score
        assert sum(r > 0 for r in rewards) == env.state.max_score  # dense: one point per quest step
        await env.close()

    asyncio.run(play())


def test_the_example_plays_through_the_driver() -> None:
    agent = Agent.from_spec(load_spec(SPEC, ["data.eval.size=6"]))
    trajs = asyncio.run(agent.run(agent.tasks("eval", 6), lambda env: ScriptedPolicy.for_env(env, agent.tokenizer)))
    assert all(t.finish_reason == "done" and t.reward_components["textworld/won"] == 1.0 for t in trajs)
    assert all(t.reward_components[PROCESS] == sum(turn.reward for turn in t.turns) > 0 for t in trajs)


def test_the_example_compiles_for_every_backend(tmp_path: Path) -> None:
    for backend in ("trl", "verl", "openrlhf"):
        result = CliRunner().invoke(main, ["compile", SPEC, "--backend", backend, "-o", str(tmp_path / backend),
                                           "--set", "data.train.size=8", "--set", "data.eval.size=4"])
        assert result.exit_code == 0, result.output
        manifest = json.loads((tmp_path / backend / "manifest.json").read_text())
        assert manifest["tasks"] == {"train": 8, "eval": 4}


def test_a_short_training_run_on_cpu(tmp_path: Path) -> None:
    rows = short_training_run(SPEC, tmp_path / "run", ["algorithm.warm_start.demos=16",
                                                       "algorithm.warm_start.epochs=1", "data.train.size=8",
                                                       "data.eval.size=4", "backend.options.eval_size=4"])
    assert [r["step"] for r in rows] == [1, 2] and all("reward/textworld/won" in r for r in rows)
    assert json.loads((tmp_path / "run" / "eval.json").read_text())["after_rl"]["n"] == 4
