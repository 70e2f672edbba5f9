"""Stand-in for vLLM: the few names OpenRLHF 0.11.2's rollout path imports, and an engine without a model.

Found as the top-level ``vllm`` once ``agentbridge_openrlhf.standins.use_vllm_standin()`` put its folder on the
path. ``AsyncLLMEngine.from_engine_args`` returns the engine ``$VLLM_STANDIN_ENGINE`` names:

- ``golden`` (:class:`GoldenEngine`): the conformance suite's generator,
  :func:`agentbridge.conformance.golden.golden_turn`: fixed turns and log-probs per golden case, cut at
  ``max_tokens`` (finish reason ``length``) as vLLM cuts;
- ``scripted`` (:class:`ScriptedEngine`, the adapter's tests): plays ``$VLLM_STANDIN_SCRIPT`` (JSON: one list of
  alternative texts per assistant turn), chosen by a seeded RNG, each followed by EOS and cut at ``max_tokens``.

Both take prompts as vLLM takes them (``TokensPrompt(prompt_token_ids=..., multi_modal_data={"image": image |
[images]})``), check them as vLLM checks them (one image placeholder token per image, since vLLM expands each
itself, and at most ``limit_mm_per_prompt`` images), return log-probs only when ``SamplingParams.logprobs`` asks,
and record every request (``requests``) and every image they were given (``images``, by
:func:`agentbridge.conformance.records.image_digest`). Everything else on the rollout path is OpenRLHF's own code.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import types
from collections.abc import AsyncIterator
from typing import Any

__version__ = "0.29.0"  # the version OpenRLHF 0.11.2 pins
AGENTBRIDGE_STANDIN = True


class SamplingParams:
    def __init__(self, temperature: float = 1.0, top_p: float = 1.0, top_k: int = -1, max_tokens: int | None = 16,
                 min_tokens: int = 0, skip_special_tokens: bool = True, logprobs: int | None = None,
                 **kwargs: Any) -> None:
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.max_tokens, self.min_tokens = max_tokens, min_tokens
        self.skip_special_tokens, self.logprobs = skip_special_tokens, logprobs
        self.__dict__.update(kwargs)


class AsyncEngineArgs:
    def __init__(self, model: str = "", seed: int = 0, **kwargs: Any) -> None:
        self.model, self.seed, self.kwargs = model, seed, kwargs


class _Logprob:
    def __init__(self, logprob: float) -> None:
        self.logprob = logprob


def image_digest(image: Any) -> str:
    """Mode, size and exact pixels of a PIL image, as one short string (what a request records)."""
    return hashlib.sha1(f"{image.mode}{image.size}".encode() + image.tobytes()).hexdigest()


class _Engine:
    """What both engines share: vLLM's engine surface OpenRLHF calls, request checks and records."""

    def __init__(self, model: str, seed: int, limit_mm_per_prompt: dict[str, int] | None = None) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model)
        pad = self.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        self.image_token_id = pad if isinstance(pad, int) and pad != self.tokenizer.unk_token_id else None
        self.limit_mm_per_prompt = dict(limit_mm_per_prompt or {})
        self.seed = seed
        self.requests: list[dict[str, Any]] = []
        self.images: dict[str, Any] = {}  # agentbridge image digest -> every image a request carried
        self.output_processor = types.SimpleNamespace(get_num_unfinished_requests=lambda: 0)

    async def is_sleeping(self) -> bool:
        return False

    async def sleep(self, level: int = 1) -> None:  # --vllm.enable_sleep: nothing to free without a GPU
        return None

    async def wake_up(self, tags: list[str] | None = None) -> None:
        return None

    def turn(self, ids: list[int], sampling_params: SamplingParams) -> tuple[list[int], list[float] | None, str]:
        """The generated ids, their log-probs (None when not asked for) and the finish reason."""
        raise NotImplementedError

    async def generate(self, prompt: dict[str, Any], sampling_params: SamplingParams,
                       request_id: str = "") -> AsyncIterator[Any]:
        ids = list(prompt["prompt_token_ids"])
        images = (prompt.get("multi_modal_data") or {}).get("image") or []
        images = images if isinstance(images, list) else [images]
        if images:
            self._check_images(ids, images)
            from agentbridge.adapter.conformance import image_digest as agentbridge_digest

            self.images.update((agentbridge_digest(im), im) for im in images)
        out, logprobs, finish = self.turn(ids, sampling_params)
        self.requests.append({"prompt_len": len(ids), "max_tokens": sampling_params.max_tokens, "prompt_ids": ids,
                              "images": [image_digest(im) for im in images], "out": out})
        steps = None
        if sampling_params.logprobs is not None and logprobs is not None:
            steps = [{t: _Logprob(lp)} for t, lp in zip(out, logprobs, strict=True)]
        yield types.SimpleNamespace(outputs=[types.SimpleNamespace(
            token_ids=out, text=self.tokenizer.decode(out), finish_reason=finish, logprobs=steps)])

    def _check_images(self, ids: list[int], images: list[Any]) -> None:
        """vLLM's own checks on a multimodal prompt (it raises ValueError on either)."""
        limit = self.limit_mm_per_prompt.get("image")
        if limit is not None and len(images) > limit:
            raise ValueError(f"At most {limit} image(s) may be provided in one prompt, got {len(images)}")
        placeholders = ids.count(self.image_token_id) if self.image_token_id is not None else 0
        if placeholders != len(images):
            raise ValueError(f"the prompt has {placeholders} image placeholder tokens for {len(images)} images")


class GoldenEngine(_Engine):
    """The conformance suite's generator as vLLM: ``golden_turn`` decides the tokens and their log-probs."""

    def turn(self, ids: list[int], sampling_params: SamplingParams) -> tuple[list[int], list[float] | None, str]:
        from agentbridge.adapter.conformance import golden_turn

        budget = sampling_params.max_tokens if sampling_params.max_tokens is not None else 1 << 30
        out, logprobs = golden_turn(self.tokenizer, ids, budget)
        stop = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        return out, logprobs, "stop" if out and out[-1] == stop else "length"


class ScriptedEngine(_Engine):
    """Plays ``$VLLM_STANDIN_SCRIPT``; turn k = number of assistant headers in the prompt minus one."""

    def __init__(self, model: str, seed: int, limit_mm_per_prompt: dict[str, int] | None = None) -> None:
        super().__init__(model, seed, limit_mm_per_prompt)
        self.script: list[list[str]] = json.loads(os.environ["VLLM_STANDIN_SCRIPT"])
        self.rng = random.Random(seed)

    def turn(self, ids: list[int], sampling_params: SamplingParams) -> tuple[list[int], list[float] | None, str]:
        text = self.tokenizer.decode(ids)
        turn = max(0, text.count("<|im_start|>assistant") - 1)
        choice = self.rng.choice(self.script[min(turn, len(self.script) - 1)])
        out = list(self.tokenizer.encode(choice, add_special_tokens=False)) + [self.tokenizer.eos_token_id]
        finish = "stop"
        if sampling_params.max_tokens is not None and len(out) > sampling_params.max_tokens:
            out, finish = out[: sampling_params.max_tokens], "length"
        logprobs = None
        if sampling_params.logprobs is not None:
            logprobs = [-round(self.rng.uniform(0.01, 3.0), 4) for _ in out]
        return out, logprobs, finish


ENGINES = {"golden": GoldenEngine, "scripted": ScriptedEngine}


class AsyncLLMEngine:
    @classmethod
    def from_engine_args(cls, engine_args: AsyncEngineArgs) -> _Engine:
        name = os.environ.get("VLLM_STANDIN_ENGINE", "golden")
        if name not in ENGINES:
            raise ValueError(f"$VLLM_STANDIN_ENGINE must be one of {', '.join(ENGINES)}, not {name!r}")
        return ENGINES[name](engine_args.model, engine_args.seed, engine_args.kwargs.get("limit_mm_per_prompt"))
