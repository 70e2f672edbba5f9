"""The ``hf`` policy: transformers ``generate`` on CPU or GPU, batching the requests of concurrent episodes.

Needs the ``hf`` extra (torch, transformers).
"""

from __future__ import annotations

import threading
from typing import Any

from agentbridge.rollout.batching import BatchingPolicy, cut_at_eos
from agentbridge.trajectory import Generation, SamplingParams


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
        device = next(self.model.parameters()).device
        shared = shared_prefix_length(prompts)
        greedy = sampling.temperature <= 0
        kwargs: dict[str, Any] = {"do_sample": not greedy}
        if not greedy:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or None)
        with self._lock, torch.no_grad():
            if shared >= MIN_SHARED_PREFIX and len(prompts) > 1:
                # The prompts' common prefix (system prompt, tool schemas) is run once and its cache repeated over
                # the batch; each row's own tokens follow it after left padding inside the row, and generate's
                # position ids (the attention mask's running count) continue the prefix's, as without padding.
                prefix = self.model(input_ids=torch.tensor([prompts[0][:shared]], device=device), use_cache=True)
                cache = output_cache(prefix)
                cache.batch_repeat_interleave(len(prompts))
                kwargs[cache_kwarg(self.model)] = cache
            else:
                shared = 0
            rests = [p[shared:] for p in prompts]
            width = max(len(r) for r in rests)
            head = prompts[0][:shared]
            ids = torch.tensor([head + [self.pad_id] * (width - len(r)) + r for r in rests])
            mask = torch.tensor([[1] * shared + [0] * (width - len(r)) + [1] * len(r) for r in rests])
            out = self.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                      max_new_tokens=max(budgets), eos_token_id=self.eos_id, pad_token_id=self.pad_id,
                                      output_logits=True, return_dict_in_generate=True, **kwargs)
        new = out.sequences[:, shared + width:]
        logits = torch.stack(out.logits, dim=1).float()
        if not greedy:
            logits = logits / sampling.temperature
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        return [cut_at_eos(row, lp, budget, self.eos_id)
                for row, lp, budget in zip(new.tolist(), logprobs.tolist(), budgets, strict=True)]


MIN_SHARED_PREFIX = 32  # shorter common prefixes are not worth a separate forward


def cache_kwarg(model: Any) -> str:
    """The name a model's forward (and ``generate``) takes its key/value cache under: ``cache`` from transformers
    5.2x on, ``past_key_values`` before (the veRL and OpenRLHF environments pin older releases)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def output_cache(output: Any) -> Any:
    """The key/value cache a forward with ``use_cache=True`` returned, under either name."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def shared_prefix_length(prompts: list[list[int]]) -> int:
    """Length of the prefix every prompt shares, leaving each prompt at least one token of its own."""
    shortest = min(len(p) for p in prompts)
    first = prompts[0]
    n = 0
    while n < shortest - 1 and all(p[n] == first[n] for p in prompts):
        n += 1
    return n
