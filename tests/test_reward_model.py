"""The ``core/reward_model`` reward: a sequence-classification model scoring episodes, batched across a step's
episodes off the driver's event loop, the same scores as one episode at a time; a model that cannot load costs
counted reward errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentbridge import reward_model
from agentbridge.backends import compile_job, get_backend, known_capabilities
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.spec import SpecError, load_spec


def agent_with(args: dict[str, Any]) -> Agent:
    reward = json.dumps([{"id": "core/exact_answer", "weight": 1.0},
                         {"id": "core/reward_model", "weight": 0.1, "args": args}])
    return Agent.from_spec(load_spec("examples/calculator.yaml", [f"reward={reward}", "model.path=builtin:tiny"]))


def run(agent: Agent, n: int, concurrency: int = 32) -> list[Any]:
    tasks = agent.tasks("eval", size=n)
    return asyncio.run(agent.run(tasks, lambda env: ScriptedPolicy.for_env(env, agent.tokenizer),
                                 concurrency=concurrency))


@pytest.mark.parametrize("template", ["chat", "Question: {prompt}\nReference: {reference}\nAnswer: {answer}"])
def test_a_steps_episodes_are_scored_in_batches_with_the_scores_of_one_at_a_time(template: str) -> None:
    args = {"path": "builtin:tiny-rm", "template": template, "batch_size": 8}
    agent = agent_with(args)
    trajs = run(agent, 24)
    [model] = [m for m in reward_model._MODELS.values() if m.args.batch_size == 8]
    model.batches.clear()
    trajs = run(agent, 24)
    assert sum(model.batches) == 24 and max(model.batches) == 8 and len(model.batches) <= 4  # batched, <= 8 each
    tasks = agent.tasks("eval", size=24)
    texts = [reward_model.episode_text(t, task, template, model.tokenizer) for t, task in zip(trajs, tasks,
                                                                                          strict=True)]
    alone = [model.score_batch([text])[0] for text in texts]  # unbatched: no padding at all
    scores = [t.reward_components["core/reward_model"] for t in trajs]
    assert scores == pytest.approx(alone, abs=1e-5)
    assert len({round(s, 6) for s in scores}) > 1  # the model reads the episodes: different episodes, scores
    assert all(t.metrics["reward/errors"] == 0 for t in trajs)
    assert all(t.reward == pytest.approx(t.reward_components["core/exact_answer"] + 0.1 * s)
               for t, s in zip(trajs, scores, strict=True))
    if template == "chat":  # the episode's messages through the reward model's own chat template
        assert texts[0].startswith("<|im_start|>system") and "<tool_response>" in texts[0]
    else:
        assert texts[0].startswith(f"Question: {tasks[0].prompt}\nReference: ")


def test_sigmoid_squashes_the_logit_and_a_missing_model_costs_counted_errors(tmp_path: Any) -> None:
    trajs = run(agent_with({"path": "builtin:tiny-rm", "squash": "sigmoid"}), 6)
    assert all(0 < t.reward_components["core/reward_model"] < 1 for t in trajs)
    broken = run(agent_with({"path": str(tmp_path / "no-model")}), 6)
    assert all(t.metrics["reward/errors"] == 1 and t.reward_components["core/reward_model"] == 0.0
               for t in broken)
    assert all("no-model" in (t.error or "") for t in broken) and all(t.finish_reason == "done" for t in broken)


def test_a_backend_whose_job_serves_no_reward_model_refuses_serve_backend(tmp_path: Path) -> None:
    """``core/reward_model`` with ``serve: backend`` needs a job that serves it (OpenRLHF's serve_rm, veRL's vLLM
    reward-model servers); elsewhere every episode would score a reward error, so the compile refuses, naming the
    backends that serve."""
    rm = json.dumps([{"id": "core/reward_model", "args": {"path": "builtin:tiny-rm", "serve": "backend"}}])
    spec = load_spec("examples/calculator.yaml", [f"reward={rm}", "backend.name=trl"])
    serving = [n for n, c in known_capabilities().items() if c.serves_reward_models]  # the installed ones
    assert {"openrlhf", "verl"} <= set(serving)
    with pytest.raises(SpecError, match=r"reward: core/reward_model serve: backend: the trl job serves no "
                       rf"reward model \(jobs that do: {', '.join(serving)}\)"):
        compile_job(spec, get_backend("trl"), tmp_path / "job")
    url = json.dumps([{"id": "core/reward_model", "args": {"path": "builtin:tiny-rm", "url": "http://h:1/get_reward"}}])
    compile_job(load_spec("examples/calculator.yaml", [f"reward={url}"]), get_backend("trl"), tmp_path / "url")


def test_the_servers_protocol_is_told_by_its_path_and_a_backend_that_found_no_server_says_why() -> None:
    """``/classify`` is vLLM's (veRL's reward-model servers), anything else OpenRLHF's ``/get_reward``; a backend
    adapter that found no server for ``serve: backend`` leaves its reason in each episode's reward error."""
    args = reward_model.RewardModelArgs(path="builtin:tiny-rm", label=0, max_length=64)
    vllm = reward_model.ServedRewardModel(args, "http://10.0.0.1:8000/classify", model="/models/rm")
    assert vllm.protocol == "classify" and vllm.request(["a", "b"]) == {
        "model": "/models/rm", "input": ["a", "b"], "use_activation": False, "truncate_prompt_tokens": 64}
    answer = {"data": [{"index": 1, "probs": [0.5]}, {"index": 0, "probs": [-1.5]}]}  # in any order
    assert vllm.scores(answer, 2) == [-1.5, 0.5]
    with pytest.raises(ValueError, match="1 rewards for 2 texts"):
        vllm.scores({"data": [{"index": 0, "probs": [1.0]}]}, 2)
    openrlhf = reward_model.ServedRewardModel(args, "http://h:1/get_reward")
    assert openrlhf.protocol == "get_reward" and openrlhf.request(["a"]) == {"query": ["a"]}
    try:
        reward_model.use_backend_server(None, problem="serve: backend on veRL: no reward-loop worker")
        trajs = run(agent_with({"path": "builtin:tiny-rm", "serve": "backend", "batch_size": 3}), 2)
    finally:
        reward_model.use_backend_server(None)
    assert all(t.metrics["reward/errors"] == 1 and t.finish_reason == "done" for t in trajs)
    assert "serve: backend on veRL: no reward-loop worker" in (trajs[0].error or "")
