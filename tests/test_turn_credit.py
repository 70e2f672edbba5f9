"""Per-turn process rewards (``reward[i].per: turn``) and turn-level credit (``algorithm.credit: turn``): each
assistant turn is scored on the episode as it stood after that turn, the scores and the environment's step reward
are kept with the token where the turn ends, and backends without per-token rewards say they sum them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentbridge import reward_model
from agentbridge.backends import compile_job, get_backend
from agentbridge.conformance.golden import GoldenPolicy
from agentbridge.conformance.suite import golden_spec
from agentbridge.rewards import PROCESS
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.rollout.training import token_rewards
from agentbridge.spec import SpecError, load_spec


def golden_episodes(sets: list[str] | None = None) -> tuple[Agent, dict[str, Any]]:
    agent = Agent.from_spec(golden_spec("credit", sets))
    tasks = agent.tasks("train")
    trajs = asyncio.run(agent.run(tasks, GoldenPolicy(agent.tokenizer)))
    return agent, {t.task_id: t for t in trajs}


def test_each_turn_is_scored_on_the_episode_up_to_it_and_credited_at_its_last_token() -> None:
    agent, trajs = golden_episodes()
    tools = trajs["tools"]  # add, add, answer (the answer step pays the environment's 0.25)
    assert [t.scores["conformance/tool_turn"] for t in tools.turns] == [1.0, 1.0, 0.0]
    assert [t.reward for t in tools.turns] == [0.0, 0.0, 0.25]
    assert [t.credit for t in tools.turns] == pytest.approx([0.5, 0.5, 0.25])  # weight 0.5; process weight 1
    assert tools.reward_components["conformance/tool_turn"] == 2.0 and tools.reward_components[PROCESS] == 0.25
    eos = agent.renderer.eos_token_id
    for turn in tools.turns:  # the turn's last generated token: its EOS, trained on
        assert tools.response_ids[turn.end] == eos and tools.response_mask[turn.end] == 1
    assert tools.turns[-1].end == len(tools.response_ids) - 1

    placed = token_rewards(tools, "turn")
    assert {i: v for i, v in enumerate(placed) if v} == pytest.approx(
        {tools.turns[0].end: 0.5, tools.turns[1].end: 0.5, tools.turns[2].end: tools.reward - 1.0})
    assert sum(placed) == pytest.approx(tools.reward) == pytest.approx(1.0 + 0.1 + 0.5 + 1.0 + 0.25)
    episode = token_rewards(tools, "episode")
    assert episode[-1] == pytest.approx(tools.reward) and not any(episode[:-1])

    failed = trajs["early_error"]  # an error episode earns nothing, per turn or at the end
    assert failed.finish_reason == "error" and token_rewards(failed, "turn") == [0.0]
    cut = trajs["truncation"]  # a turn cut by its budget still gets its credit at its own last token
    assert cut.finish_reason == "length" and token_rewards(cut, "turn")[cut.turns[0].end] == pytest.approx(0.5)


def test_a_per_turn_reward_that_raises_costs_that_turn_and_is_counted() -> None:
    broken = json.dumps([{"id": "core/exact_answer"}, {"id": "conformance/fragile", "per": "turn", "weight": 0.5}])
    _, trajs = golden_episodes([f"reward={broken}"])
    ep = trajs["reward_error"]  # fragile raises on this task: every turn scores 0, each counted with its turn
    assert ep.metrics["reward/errors"] == len(ep.turns) == 2
    assert "reward conformance/fragile (turn 1): RuntimeError" in (ep.error or "")
    assert ep.finish_reason == "done" and ep.reward == pytest.approx(1.0 + 0.25)  # answer + its step reward
    ok = trajs["tools"]
    assert [t.scores["conformance/fragile"] for t in ok.turns] == [1.0, 1.0, 1.0]
    assert ok.reward_components["conformance/fragile"] == 3.0


def test_a_process_reward_model_scores_every_turn_of_a_step_in_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """``core/reward_model`` with ``per: turn``: a reward model as PRM, each turn's view through its template, the
    turns of all episodes gathered into batches, the same scores as scored one at a time."""
    monkeypatch.setattr(reward_model, "_MODELS", {})  # this test's model only
    args = {"path": "builtin:tiny-rm", "template": "{prompt} => {response}", "batch_size": 16}
    rewards = json.dumps([{"id": "core/exact_answer"}, {"id": "core/reward_model", "per": "turn", "weight": 0.1,
                                                         "args": args}])
    agent = Agent.from_spec(load_spec("examples/calculator.yaml", [f"reward={rewards}", "model.path=builtin:tiny",
                                                                   "algorithm.credit=turn"]))
    tasks = agent.tasks("eval", size=6)
    trajs = asyncio.run(agent.run(tasks, lambda env: ScriptedPolicy.for_env(env, agent.tokenizer)))
    [model] = reward_model._MODELS.values()
    assert isinstance(model, reward_model.RewardModel)
    turns = sum(len(t.turns) for t in trajs)
    assert turns > len(trajs) and max(model.batches) > 1  # several turns per forward pass
    for traj, task in zip(trajs, tasks, strict=True):
        for i, turn in enumerate(traj.turns):
            text = reward_model.episode_text(traj.through_turn(i), task, args["template"], model.tokenizer)
            assert text.endswith(turn.text)  # the view ends with that turn
            assert turn.scores["core/reward_model"] == pytest.approx(model.score_batch([text])[0], abs=1e-5)
        assert traj.reward == pytest.approx(sum(token_rewards(traj, "turn")))


def test_backends_without_per_token_rewards_say_they_sum_them(tmp_path: Path) -> None:
    spec = load_spec("examples/calculator.yaml", ["algorithm.credit=turn"])
    job = compile_job(spec, get_backend("trl"), tmp_path / "trl")
    [note] = [n for n in job.manifest["notes"] if n.startswith("algorithm.credit")]
    assert "trl trains on one reward per episode" in note and note.endswith("place them on the turns: verl")
    plain = compile_job(load_spec("examples/calculator.yaml"), get_backend("trl"), tmp_path / "plain")
    assert not any(n.startswith("algorithm.credit") for n in plain.manifest.get("notes", []))


def test_verl_refuses_turn_credit_on_its_legacy_trainer(tmp_path: Path) -> None:
    legacy = load_spec("examples/calculator.yaml", ["algorithm.credit=turn", "backend.name=verl",
                                                    "backend.overrides={trainer.use_v1: false}"])
    with pytest.raises(SpecError, match=r"algorithm.credit: turn credit reaches veRL through its V1 trainer"):
        compile_job(legacy, get_backend("verl"), tmp_path / "verl")
    v1 = load_spec("examples/calculator.yaml", ["algorithm.credit=turn", "backend.name=verl"])
    job = compile_job(v1, get_backend("verl"), tmp_path / "verl-v1")
    assert not any(n.startswith("algorithm.credit") for n in job.manifest.get("notes", []))

