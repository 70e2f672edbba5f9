"""A real TRL GRPOTrainer driven by agentbridge's rollout: masks, rewards, weights, data order."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from expert_mix import mix_in_expert

from agentbridge.models import resolve_model_path
from agentbridge.rollout.agent import Agent
from agentbridge_trl.config import grpo_config_kwargs, reward_components
from agentbridge_trl.trainer import build_trainer


def trained(spec: Any, tmp_path: Any, scripted_share: bool = True) -> dict[str, Any]:
    """Run a 2-step GRPO job; half the episodes play the scripted expert so rewards and tool turns vary."""
    from transformers import AutoModelForCausalLM

    agent = Agent.from_spec(spec)
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path(spec.model.path))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer, rollout = build_trainer(agent, model, grpo_config_kwargs(spec, str(tmp_path / "out")),
                                     agent.tasks("train"))
    seen: dict[str, list[Any]] = {"masks": [], "trajs": [], "logs": []}

    if scripted_share:  # every other episode is the expert: real tool calls, tool tokens, nonzero rewards
        mix_in_expert(rollout, agent.tokenizer)

    original_loss = trainer._compute_loss

    def spy_loss(model: Any, inputs: dict[str, Any]) -> Any:
        mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
        seen["masks"].append((inputs["completion_ids"].detach().clone(), mask.detach().clone()))
        seen["trajs"].append(list(rollout.last))
        return original_loss(model, inputs)

    trainer._compute_loss = spy_loss  # type: ignore[method-assign]
    from transformers import TrainerCallback

    class Logs(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            seen["logs"].append(dict(logs or {}))

    trainer.add_callback(Logs())
    trainer.train()
    changed = any(not torch.equal(before[n], p.detach()) for n, p in model.named_parameters())
    return {"seen": seen, "changed": changed, "task_ids": list(rollout.seen_task_ids),
            "masks_truncated": trainer.mask_truncated_completions,
            "stop_ids": [*trainer.eos_token_ids, agent.tokenizer.pad_token_id]}


@pytest.fixture(scope="module")
def run(small_spec: Any, tmp_path_factory: Any) -> dict[str, Any]:
    return trained(small_spec, tmp_path_factory.mktemp("a"))


def test_weights_change(run: dict[str, Any]) -> None:
    assert run["changed"]


def test_loss_mask_equals_driver_response_mask(run: dict[str, Any]) -> None:
    assert run["seen"]["masks"]
    tool_tokens = 0
    for (ids, mask), trajs in zip(run["seen"]["masks"], run["seen"]["trajs"], strict=True):
        assert mask.shape[0] == len(trajs)
        for row_ids, row in zip(ids.tolist(), mask.tolist(), strict=True):  # TRL shuffles rows after generation
            traj = next(t for t in trajs if row_ids[: len(t.response_ids)] == t.response_ids)
            want = traj.response_mask
            if run["masks_truncated"] and traj.response_ids[-1] not in run["stop_ids"]:
                want = [0] * len(want)  # DAPO's overlong filtering: a cut-off episode is left out of the loss
            assert row[: len(want)] == want
            assert not any(row[len(want):])
            tool_tokens += want.count(0) if want == traj.response_mask else 0
    assert tool_tokens > 0  # the expert's tool responses were there, and were masked out
    assert run["masks_truncated"]  # the example runs DAPO, so the overlong rule above was exercised


def test_logged_rewards_equal_driver_components(run: dict[str, Any], small_spec: Any) -> None:
    train_logs = [log for log in run["seen"]["logs"] if "loss" in log]
    assert len(train_logs) == len(run["seen"]["trajs"]) == 2
    for log, trajs in zip(train_logs, run["seen"]["trajs"], strict=True):
        for name, _ in reward_components(small_spec):
            key = "ab_" + name.replace("/", "_")
            want = sum(t.reward_components[name] for t in trajs) / len(trajs)
            assert log[f"rewards/{key}/mean"] == pytest.approx(want, abs=1e-6)
        assert log["reward"] == pytest.approx(sum(t.reward for t in trajs) / len(trajs), abs=1e-6)
    assert any(t.reward_components["math/exact_answer"] == 1.0 for trajs in run["seen"]["trajs"] for t in trajs)


def test_same_seed_same_data_order(run: dict[str, Any], small_spec: Any, tmp_path: Any) -> None:
    again = trained(small_spec, tmp_path, scripted_share=False)
    assert again["task_ids"] == run["task_ids"] and len(set(run["task_ids"])) == 4  # 2 steps x 2 prompts
    groups = [run["task_ids"][i: i + 4] for i in range(0, len(run["task_ids"]), 4)]
    assert all(len(set(g)) == 1 for g in groups)  # each prompt sampled group_size times
