"""The ``hf`` policy: transformers ``generate`` on CPU or GPU, batching the requests of concurrent episodes.

Needs the ``hf`` extra (torch, transformers). Requests that arrive while a batch runs are gathered into the
next one, so many episodes in flight share one left-padded ``generate`` call.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any

from agentbridge.rollout.trajectory import Generation, SamplingParams


@dataclass(eq=False)
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: asyncio.Future[Generation]


class HFPolicy:
    """Sample from a causal LM with ``model.generate``; returns ids and their log-probs under the sampler."""

    def __init__(self, model: Any, tokenizer: Any, *, max_batch: int = 64, seed: int | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_id = tokenizer.eos_token_id
        self._pending: list[_Request] = []
        self._flusher: asyncio.Task[None] | None = None
        self._lock = threading.Lock()
        self.batches: list[int] = []  # size of each generate call, for inspection
        if seed is not None:
            import torch

            self._generator = torch.Generator().manual_seed(seed)
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

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams,
                       images: list[Any] | None = None) -> Generation:
        if images:
            raise ValueError("HFPolicy serves text models; images need a VLM policy (model + processor)")
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        self._pending.append(_Request(list(prompt_ids), sampling, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        while self._pending:
            for _ in range(3):  # let the other in-flight episodes submit their requests first
                await asyncio.sleep(0)
            key = self._key(self._pending[0].sampling)
            batch = [r for r in self._pending if self._key(r.sampling) == key][: self.max_batch]
            self._pending = [r for r in self._pending if r not in batch]
            try:
                outs = await asyncio.to_thread(self._generate_batch, [r.prompt_ids for r in batch],
                                               [r.sampling.max_tokens for r in batch], batch[0].sampling)
            except Exception as e:  # noqa: BLE001 - deliver the failure to each waiting episode
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(e)
                continue
            for r, out in zip(batch, outs, strict=True):
                if not r.future.done():
                    r.future.set_result(out)

    @staticmethod
    def _key(s: SamplingParams) -> tuple[float, float, int]:
        return (s.temperature, s.top_p, s.top_k)

    def _generate_batch(self, prompts: list[list[int]], budgets: list[int],
                        sampling: SamplingParams) -> list[Generation]:
        import torch

        width = max(len(p) for p in prompts)
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        greedy = sampling.temperature <= 0
        kwargs: dict[str, Any] = {"do_sample": not greedy}
        if not greedy:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or None)
        with self._lock, torch.no_grad():
            self.batches.append(len(prompts))
            out = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max(budgets),
                                      eos_token_id=self.eos_id, pad_token_id=self.pad_id, output_logits=True,
                                      return_dict_in_generate=True, **kwargs)
        new = out.sequences[:, width:]
        logits = torch.stack(out.logits, dim=1).float()
        if not greedy:
            logits = logits / sampling.temperature
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        results = []
        for row, lp, budget in zip(new.tolist(), logprobs.tolist(), budgets, strict=True):
            cut = row.index(self.eos_id) + 1 if self.eos_id in row else len(row)
            cut = min(cut, budget)
            stopped = cut > 0 and row[cut - 1] == self.eos_id
            results.append(Generation(token_ids=row[:cut], logprobs=lp[:cut],
                                      finish_reason="stop" if stopped else "length"))
        return results
