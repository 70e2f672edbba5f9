"""The ``hf`` policy: transformers ``generate`` on CPU or GPU, batching the requests of concurrent episodes.

Needs the ``hf`` extra (torch, transformers).
"""

from __future__ import annotations

import threading
from typing import Any

from agentbridge.rollout.batching import BatchingPolicy, cut_at_eos
from agentbridge.rollout.trajectory import Generation, SamplingParams


class HFPolicy(BatchingPolicy):
    """Sample from a causal LM with ``model.generate``; returns ids and their log-probs under the sampler."""

    def __init__(self, model: Any, tokenizer: Any, *, max_batch: int = 64, seed: int | None = None) -> None:
        super().__init__(max_batch)
        self.model = model
        self.tokenizer = tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_id = tokenizer.eos_token_id
        self._lock = threading.Lock()
        if seed is not None:
            import torch

            torch.manual_seed(seed)

    @classmethod
    def from_pretrained(cls, path: str, tokenizer: Any = None, **kwargs: Any) -> HFPolicy:
        """Load ``path`` (a local dir or ``builtin:*``) with transformers."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from agentbridge.models import resolve_model_path

        local = resolve_model_path(path)
        model = AutoModelForCausalLM.from_pretrained(local)
        model.eval()
        return cls(model, tokenizer or AutoTokenizer.from_pretrained(local), **kwargs)

    def generate_batch(self, prompts: list[list[int]], budgets: list[int], sampling: SamplingParams,
                       images: list[list[Any] | None] | None) -> list[Generation]:
        import torch

        if images:
            raise ValueError("HFPolicy serves text models; images need a VLM policy (model + processor)")
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        greedy = sampling.temperature <= 0
        kwargs: dict[str, Any] = {"do_sample": not greedy}
        if not greedy:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or None)
        device = next(self.model.parameters()).device
        with self._lock, torch.no_grad():
            out = self.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                      max_new_tokens=max(budgets), eos_token_id=self.eos_id, pad_token_id=self.pad_id,
                                      output_logits=True, return_dict_in_generate=True, **kwargs)
        new = out.sequences[:, width:]
        logits = torch.stack(out.logits, dim=1).float()
        if not greedy:
            logits = logits / sampling.temperature
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        return [cut_at_eos(row, lp, budget, self.eos_id)
                for row, lp, budget in zip(new.tolist(), logprobs.tolist(), budgets, strict=True)]
