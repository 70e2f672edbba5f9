"""TRL's side of the conformance suite: the golden episodes through a real ``GRPOTrainer``'s rollout path.

Real: ``build_trainer`` (the trainer a job runs), TRL's ``_generate_and_score_completions`` (rollout_func call,
padding, masks, reward functions, log-prob tensors, the VLM forward-pass inputs) and agentbridge's
``VLLMPolicy``. Stand-in: ``GoldenVLLMGenerationStandIn`` for TRL's ``VLLMGeneration`` (vLLM needs a GPU); it
answers with :func:`agentbridge.conformance.golden.golden_turn`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any
from unittest.mock import patch

from agentbridge.adapter.conformance import EpisodeRecord, episode_record, golden_sets, image_digest


class GoldenVLLMGenerationStandIn:
    """Stand-in for ``trl.generation.vllm_generation.VLLMGeneration``: same ``generate`` contract, golden turns."""

    def __init__(self, *, processing_class: Any, max_completion_length: int, **_: Any) -> None:
        self.tokenizer = getattr(processing_class, "tokenizer", processing_class)
        self.max_completion_length = max_completion_length
        self.calls = 0

    def sync_weights(self) -> None:
        """Nothing to sync: the golden turns do not depend on the weights."""

    def generate(self, prompts: list[list[int]], images: list[Any] | None, num_generations: int,
                 profiler: Any = None) -> tuple[list[list[int]], list[list[int]], list[list[list[float]]], None]:
        from agentbridge.adapter.conformance import golden_turn

        self.calls += 1
        completions, logprobs = [], []
        for prompt in prompts:
            for _ in range(num_generations):
                ids, lps = golden_turn(self.tokenizer, prompt, self.max_completion_length)
                completions.append(ids)
                logprobs.append([[lp] for lp in lps])
        return [list(p) for p in prompts for _ in range(num_generations)], completions, logprobs, None


def golden_records(kind: str, workdir: Path) -> list[EpisodeRecord]:
    """Run the golden ``kind`` episodes through TRL and read each one back from TRL's own batch."""
    import torch

    from agentbridge.adapter.conformance import golden_spec
    from agentbridge.adapter.models import load_model
    from agentbridge.adapter.rollout import Agent
    from agentbridge_trl.config import grpo_config_kwargs
    from agentbridge_trl.rollout import task_of
    from agentbridge_trl.trainer import build_trainer

    # TRL's one length: the completion (prompt budgets are the driver's)
    spec = golden_spec(kind, golden_sets("trl", kind, "max_completion_length: {max_response}",
                                         ["backend.options={use_vllm: true, vllm_mode: colocate}"]))
    agent = Agent.from_spec(spec)
    with patch("trl.trainer.grpo_trainer.VLLMGeneration", GoldenVLLMGenerationStandIn):  # TRL's vLLM path
        trainer, _ = build_trainer(agent, load_model(spec.model.path),
                                   grpo_config_kwargs(spec, str(workdir / "trl")), agent.tasks("train"))
    seen: dict[str, Any] = {}
    generate, calculate_rewards = trainer._generate, trainer._calculate_rewards

    def keep_generate(prompts: list[Any]) -> tuple[Any, ...]:
        out = generate(prompts)
        seen["images"] = out[6]  # the images TRL puts in the forward pass, per sample
        return out

    def keep_rewards(*args: Any, **kwargs: Any) -> Any:
        seen["rewards"] = calculate_rewards(*args, **kwargs)
        return seen["rewards"]

    trainer._generate, trainer._calculate_rewards = keep_generate, keep_rewards
    group = spec.algorithm.group_size
    inputs = [dict(row) for row in trainer.train_dataset for _ in range(group)]  # as TRL's RepeatSampler does
    trainer.model.train()
    out = trainer._generate_and_score_completions(inputs)
    weights = trainer.reward_weights.to(seen["rewards"].device)
    records = []
    for i, row in enumerate(inputs):
        n = int(out["completion_mask"][i].sum())
        # the loss mask _compute_loss applies: completion_mask x tool_mask
        loss_mask = out["completion_mask"][i] * out["tool_mask"][i] if "tool_mask" in out else out["completion_mask"][i]
        reward = float(torch.nansum(seen["rewards"][i] * weights))
        images = (seen.get("images") or [None] * len(inputs))[i] or []
        records.append(episode_record(
            task_of(row["prompt"]).id, out["prompt_ids"][i][out["prompt_mask"][i].bool()],
            out["completion_ids"][i][:n], loss_mask[:n], out["sampling_per_token_logps"][i][:n],
            0.0 if math.isnan(reward) else reward, images=[image_digest(im) for im in images]))
    return records
