"""The Policy protocol and the scripted policy (fixed or expert-driven text/token turns)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from agentbridge.rollout.trajectory import Generation, SamplingParams


@runtime_checkable
class Policy(Protocol):
    """Token in, token out. ``token_ids`` end with EOS when the turn ended by itself."""

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams,
                       images: list[Any] | None = None) -> Generation: ...


Script = Sequence[str | list[int]] | Callable[[], str | list[int] | None]


class ScriptedPolicy:
    """Plays a fixed list of turns (texts or token lists), or asks a callable for each next turn.

    Texts are encoded with the tokenizer and followed by EOS, so the trajectory holds exactly these ids.
    Used for tests, conformance and warm-start demonstrations (with an environment's ``expert_action``).
    """

    def __init__(self, tokenizer: Any, script: Script) -> None:
        self.tokenizer = tokenizer
        self.script = script
        self.calls = 0

    @classmethod
    def for_env(cls, env: Any, tokenizer: Any) -> ScriptedPolicy:
        """A policy that plays the environment's expert (``env.expert_action()``)."""
        if not callable(getattr(env, "expert_action", None)):
            raise ValueError(f"environment {type(env).__name__} has no expert_action(); "
                             "the scripted policy cannot play it")
        return cls(tokenizer, env.expert_action)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams,
                       images: list[Any] | None = None) -> Generation:
        if callable(self.script):
            turn = self.script()
        else:
            turn = self.script[self.calls] if self.calls < len(self.script) else None
        self.calls += 1
        if turn is None:
            turn = "<answer></answer>"
        if isinstance(turn, str):
            ids = list(self.tokenizer.encode(turn, add_special_tokens=False)) + [self.tokenizer.eos_token_id]
        else:
            ids = list(turn)
        finish = "stop"
        if len(ids) > sampling.max_tokens:
            ids, finish = ids[: sampling.max_tokens], "length"
        return Generation(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason=finish)
