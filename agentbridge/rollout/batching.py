"""A policy base that gathers the requests of concurrent episodes into batched generator calls."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from agentbridge.trajectory import Generation, SamplingParams


@dataclass(eq=False)
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    images: list[Any] | None
    future: asyncio.Future[Generation]


class BatchingPolicy(ABC):
    """Requests that arrive while a batch runs are gathered into the next one (same sampling settings).

    Subclasses implement ``generate_batch(prompts, budgets, sampling, images)`` (blocking; runs in a thread).
    """

    def __init__(self, max_batch: int = 64) -> None:
        self.max_batch = max_batch
        self._pending: list[_Request] = []
        self._flusher: asyncio.Task[None] | None = None
        self.batches: list[int] = []  # size of each generator call, for inspection

    @abstractmethod
    def generate_batch(self, prompts: list[list[int]], budgets: list[int], sampling: SamplingParams,
                       images: list[list[Any] | None] | None) -> list[Generation]:
        """Generate one completion per prompt, each within its token budget."""

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams,
                       images: list[Any] | None = None) -> Generation:
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        self._pending.append(_Request(list(prompt_ids), sampling, images, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        while self._pending:
            for _ in range(3):  # let the other in-flight episodes submit their requests first
                await asyncio.sleep(0)
            key = _key(self._pending[0].sampling)
            batch = [r for r in self._pending if _key(r.sampling) == key][: self.max_batch]
            taken = {id(r) for r in batch}
            self._pending = [r for r in self._pending if id(r) not in taken]
            images = [r.images for r in batch] if any(r.images for r in batch) else None
            self.batches.append(len(batch))
            try:
                outs = await asyncio.to_thread(self.generate_batch, [r.prompt_ids for r in batch],
                                               [r.sampling.max_tokens for r in batch], batch[0].sampling, images)
            except Exception as e:  # noqa: BLE001 - deliver the failure to each waiting episode
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(e)
                continue
            for r, out in zip(batch, outs, strict=True):
                if not r.future.done():
                    r.future.set_result(out)


def _key(s: SamplingParams) -> tuple[float, float, int]:
    return (s.temperature, s.top_p, s.top_k)


def cut_at_eos(ids: list[int], logprobs: list[float], budget: int, eos_id: int) -> Generation:
    """Trim one generated row at its first EOS and at its token budget."""
    cut = ids.index(eos_id) + 1 if eos_id in ids else len(ids)
    cut = min(cut, budget)
    stopped = cut > 0 and ids[cut - 1] == eos_id
    return Generation(token_ids=ids[:cut], logprobs=logprobs[:cut], finish_reason="stop" if stopped else "length")
