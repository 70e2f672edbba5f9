"""The trainer's shared-prefix log-probs equal TRL's own fused-head computation on a left-padded batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from agentbridge.models import resolve_model_path
from agentbridge.rollout.agent import Agent
from agentbridge_trl.config import grpo_config_kwargs
from agentbridge_trl.shared_prefix import MIN_SHARED_PREFIX, common_prefix, prompt_starts
from agentbridge_trl.trainer import build_trainer


def _batch(pad: int, prefix_len: int = 40) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Three rows: left-padded prompts (a shared prefix, then their own tokens) and right-padded completions."""
    g = torch.Generator().manual_seed(0)
    shared = torch.randint(10, 4000, (prefix_len,), generator=g).tolist()
    prompts = [shared + torch.randint(10, 4000, (n,), generator=g).tolist() for n in (3, 9, 6)]
    completions = [torch.randint(10, 4000, (n,), generator=g).tolist() for n in (7, 4, 12)]
    pw, cw = max(map(len, prompts)), max(map(len, completions))
    ids = [[pad] * (pw - len(p)) + p + c + [pad] * (cw - len(c)) for p, c in zip(prompts, completions, strict=True)]
    mask = [[0] * (pw - len(p)) + [1] * (len(p) + len(c)) + [0] * (cw - len(c))
            for p, c in zip(prompts, completions, strict=True)]
    return torch.tensor(ids), torch.tensor(mask), cw


@pytest.fixture(scope="module")
def trainer(small_spec: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoModelForCausalLM

    agent = Agent.from_spec(small_spec)
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path(small_spec.model.path))
    out = Path(tmp_path_factory.mktemp("trainer"))
    trainer, _ = build_trainer(agent, model, grpo_config_kwargs(small_spec, str(out)), agent.tasks("train"))
    return trainer


def test_prefix_detection_leaves_each_row_a_prompt_token() -> None:
    ids, mask, keep = _batch(pad=0)
    starts = prompt_starts(mask, ids.size(1) - keep)
    assert starts.tolist() == [6, 0, 3]
    assert common_prefix(ids, starts, ids.size(1) - keep) == 40 >= MIN_SHARED_PREFIX


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_log_probs_and_entropies_equal_trls(trainer: Any, temperature: float) -> None:
    from trl import GRPOTrainer

    trainer.temperature = temperature
    from trl.trainer.utils import add_fused_lm_head

    add_fused_lm_head(trainer.model, temperature=temperature, outputs=("log_probs", "entropy"))
    ids, mask, keep = _batch(pad=trainer.processing_class.pad_token_id)
    ours, our_ent, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep,
                                                                  compute_entropy=True)
    theirs, their_ent, _ = GRPOTrainer._get_per_token_logps_and_entropies(trainer, trainer.model, ids, mask, keep,
                                                                         compute_entropy=True)
    scored = mask[:, -keep:].bool()
    assert type(trainer).__name__ == "AgentGRPOTrainer"
    assert torch.allclose(ours[scored], theirs[scored], atol=1e-4), (ours - theirs).abs().max()
    assert torch.allclose(our_ent[scored], their_ent[scored], atol=1e-4)
