"""The hf policy: batched generation across episodes in flight, log-probs, budgets."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentbridge.rollout.hf_policy import HFPolicy
from agentbridge.trajectory import SamplingParams


@pytest.fixture(scope="module")
def policy() -> HFPolicy:
    return HFPolicy.from_pretrained("builtin:tiny", seed=0)


def test_concurrent_requests_share_one_generate_call(policy: HFPolicy, tiny_tokenizer: Any) -> None:
    prompts = [tiny_tokenizer.encode(f"Add {i} and 7.", add_special_tokens=False) for i in range(6)]

    async def main() -> list[Any]:
        sampling = SamplingParams(temperature=1.0, max_tokens=12)
        return list(await asyncio.gather(*(policy.generate(p, sampling) for p in prompts)))

    before = len(policy.batches)
    outs = asyncio.run(main())
    assert policy.batches[before:] == [6]
    for out in outs:
        assert 0 < len(out.token_ids) <= 12 and len(out.logprobs) == len(out.token_ids)
        assert all(lp <= 0 for lp in out.logprobs)
        assert (out.finish_reason == "stop") == (out.token_ids[-1] == tiny_tokenizer.eos_token_id)


def test_greedy_logprobs_match_a_forward_pass(policy: HFPolicy, tiny_tokenizer: Any) -> None:
    import torch

    prompt = tiny_tokenizer.encode("Subtract 19 from 83.", add_special_tokens=False)
    out = asyncio.run(policy.generate(prompt, SamplingParams(temperature=0.0, max_tokens=8)))
    ids = torch.tensor([prompt + out.token_ids])
    with torch.no_grad():
        logits = policy.model(ids).logits[0, len(prompt) - 1: -1]
    ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out.token_ids)[:, None]).squeeze(-1)
    assert torch.allclose(ref, torch.tensor(out.logprobs), atol=1e-4)
    assert out.token_ids == logits.argmax(-1).tolist()


def test_budgets_differ_within_one_batch(policy: HFPolicy, tiny_tokenizer: Any) -> None:
    prompt = tiny_tokenizer.encode("Multiply 3 by 4.", add_special_tokens=False)

    async def main() -> list[Any]:
        return list(await asyncio.gather(policy.generate(prompt, SamplingParams(temperature=0.0, max_tokens=3)),
                                         policy.generate(prompt, SamplingParams(temperature=0.0, max_tokens=9))))

    short, long = asyncio.run(main())
    assert len(short.token_ids) <= 3 and short.token_ids == long.token_ids[: len(short.token_ids)]


def test_shared_prompt_prefix_runs_once_with_the_same_result(policy: HFPolicy, tiny_tokenizer: Any) -> None:
    """A batch whose prompts share a long prefix (system prompt, tools) generates what each prompt alone does."""
    from agentbridge.rollout.hf_policy import MIN_SHARED_PREFIX, shared_prefix_length

    system = tiny_tokenizer.encode("<|im_start|>system\nSolve the arithmetic problem with the calculator. " * 3,
                                   add_special_tokens=False)
    questions = ["Add 15 and 27.", "Divide 108 by 9, then add 4.", "What is 7 plus 8?"]
    prompts = [system + tiny_tokenizer.encode(q, add_special_tokens=False) for q in questions]
    assert shared_prefix_length(prompts) >= MIN_SHARED_PREFIX
    greedy = SamplingParams(temperature=0.0, max_tokens=10)
    together = policy.generate_batch(prompts, [10] * 3, greedy, None)
    for prompt, out in zip(prompts, together, strict=True):
        alone = policy.generate_batch([prompt], [10], greedy, None)[0]
        assert out.token_ids == alone.token_ids
        assert out.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2  # each row keeps a token of its own
