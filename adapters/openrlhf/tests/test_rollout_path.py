"""OpenRLHF 0.11.2's own rollout path on a local Ray cluster runs agentbridge's executor (text: calculator).

The path (``rollout_harness.run_rollout``): OpenRLHF's parser on the compiled launch.sh, ``get_tokenizer``,
``blending_datasets``, ``PromptDataset``, ``create_vllm_engines`` and the ``RolloutRayActor`` (agent loading,
``generate``, ``generate_responses``), ``SamplesGenerator`` and ``RemoteExperienceMaker``. Stand-ins: vLLM (a
scripted engine) and DeepSpeed only.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from conftest import SMALL
from rollout_harness import match_episodes, run_rollout

from agentbridge.runs import RUN_DIR_ENV
from agentbridge.spec import load_spec
from agentbridge_openrlhf.backend import OpenRLHFBackend

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "%s"}}\n</tool_call>'
SCRIPT = [[CALL % "2 + 3", CALL % "7 * 6", "I do not know."],      # turn 1: a tool call, or a direct non-answer
          ["<answer>5</answer>", "<answer>42</answer>", "The result is in."]]  # turn 2: answers or not


@pytest.fixture(scope="module")
def rollout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from agentbridge.models import resolve_model_path

    spec = load_spec("examples/calculator.yaml", [*SMALL, "algorithm.name=grpo", "backend.name=openrlhf",
                                                  "backend.options={is_correction: token}"])
    job = OpenRLHFBackend().compile(spec, tmp_path_factory.mktemp("rollout") / "job").path
    run_dir = tmp_path_factory.mktemp("run")
    os.environ[RUN_DIR_ENV] = str(run_dir)  # as launch.sh exports it: the Ray workers inherit it
    try:
        r = run_rollout(job, str(resolve_model_path(spec.model.path)), SCRIPT)
    finally:
        os.environ.pop(RUN_DIR_ENV)
    return {"args": r.args, "experiences": r.experiences, "episodes": r.episodes, "consumed": r.consumed,
            "advantaged": r.advantaged, "requests": r.requests, "tokenizer": r.tokenizer, "pairs": match_episodes(r),
            "run_dir": run_dir}


def test_the_executor_records_every_episode_in_the_run_directory(rollout: dict[str, Any]) -> None:
    records = [json.loads(x) for x in (rollout["run_dir"] / "episodes.jsonl").read_text().splitlines()]
    assert len(records) == len(rollout["episodes"]) and all(r["backend"] == "openrlhf" for r in records)
    assert sorted(r["reward"] for r in records) == sorted(t.reward for t in rollout["episodes"])


def test_every_sample_ran_through_the_driver(rollout: dict[str, Any]) -> None:
    args, exps, episodes = rollout["args"], rollout["experiences"], rollout["episodes"]
    assert rollout["consumed"] == args.rollout.batch_size == 2
    assert len(exps) == len(episodes) == args.rollout.batch_size * args.rollout.n_samples_per_prompt == 8
    assert all(n > 0 for n in map(len, rollout["requests"]))  # both engines got work
    assert {t.finish_reason for t in episodes} <= {"done", "max_turns"}
    assert any(len(t.turns) == 2 for t in episodes)  # tool call, tool result, answer


def test_ids_masks_rewards_and_logprobs_equal_the_drivers(rollout: dict[str, Any]) -> None:
    for exp, traj in rollout["pairs"]:  # a bijection, matched on task, ids and rollout log-probs
        assert exp.sequences[0].tolist() == traj.prompt_ids + traj.response_ids
        logprobs = [0.0] * len(traj.prompt_ids) + traj.logprobs
        assert exp.rollout_log_probs[0].tolist() == pytest.approx(logprobs[1:], abs=1e-6)
        mask = [0] * len(traj.prompt_ids) + traj.response_mask
        assert exp.action_mask[0].tolist() == mask[1:]  # OpenRLHF's action mask is shifted by one
        assert exp.rewards.tolist() == [pytest.approx(traj.reward)]
        assert exp.scores.tolist() == [pytest.approx(traj.reward)]
        assert exp.truncated.tolist() == [traj.finish_reason == "length"]
        assert exp.info["episode/turns"].tolist() == [len(traj.turns)]
        assert exp.info["reward/math/exact_answer"].tolist() == [traj.reward_components["math/exact_answer"]]
    assert len(rollout["pairs"]) == len(rollout["episodes"])
    rewards = {round(t.reward, 3) for t in rollout["episodes"]}
    assert len(rewards) > 1, rewards  # the script yields different rewards, so advantages are not all zero


def test_tool_results_are_context_not_trained(rollout: dict[str, Any]) -> None:
    tok = rollout["tokenizer"]
    traj = next(t for t in rollout["episodes"] if len(t.turns) == 2)
    context = [i for i, m in zip(traj.response_ids, traj.response_mask, strict=True) if m == 0]
    trained = [i for i, m in zip(traj.response_ids, traj.response_mask, strict=True) if m == 1]
    assert "<tool_response>" in tok.decode(context) and "<tool_response>" not in tok.decode(trained)
    assert tok.decode(trained).count("<|im_end|>") == 2


def test_group_norm_advantages_from_the_drivers_rewards(rollout: dict[str, Any]) -> None:
    import torch

    n = rollout["args"].rollout.n_samples_per_prompt
    rows = sorted(((b.index[j], float(b.rewards[j]), b.advantages[j], b.action_mask[j])
                   for b in rollout["advantaged"] for j in range(len(b.index))), key=lambda r: r[0])
    assert [r[0] for r in rows] == list(range(len(rollout["episodes"])))
    rewards = torch.tensor([r[1] for r in rows]).reshape(-1, n)
    expected = ((rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, keepdim=True) + 1e-9)).reshape(-1)
    assert expected.abs().sum() > 0
    for (_, _, advantages, mask), want in zip(rows, expected.tolist(), strict=True):
        adv = advantages[mask.bool()]
        assert adv.numel() == int(mask.sum()) > 0
        assert adv.tolist() == pytest.approx([want] * adv.numel(), abs=1e-5)


def test_engine_budgets_come_from_the_driver(rollout: dict[str, Any]) -> None:
    """Each vLLM call gets the driver's per-turn budget, never OpenRLHF's max_len - context."""
    per_turn = 48
    calls = [r for engine in rollout["requests"] for r in engine]
    assert calls and all(r["max_tokens"] <= per_turn for r in calls)
    assert max(r["max_tokens"] for r in calls) == per_turn
