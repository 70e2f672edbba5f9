"""The Policy protocol and the scripted policy (fixed or expert-driven text/token turns)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from agentbridge.tools import ToolEnvironment
from agentbridge.trajectory import Generation, SamplingParams


@runtime_checkable
class Policy(Protocol):
    """Token in, token out. ``token_ids`` end with EOS when the turn ended by itself."""

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams,
                       images: list[Any] | None = None) -> Generation: ...


Script = Sequence[str | list[int]] | Callable[[], str | list[int] | None]


def has_expert(env: Any) -> bool:
    """Whether ``env`` has a scripted expert: an ``expert_action()`` of its own, not ToolEnvironment's default
    (which knows no next action)."""
    method = getattr(env, "expert_action", None)
    return callable(method) and getattr(method, "__func__", None) is not ToolEnvironment.expert_action


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
        """A policy that plays the environment's expert (``env.expert_action()``); ValueError when it has none.

        An expert that returns None (no next action) fails its episode instead of playing an empty answer.
        """
        if not has_expert(env):
            raise ValueError(f"{type(env).__name__} has no scripted expert (it does not define expert_action()); "
                             "the scripted policy cannot play it")
        name = f"{type(env).__name__}.expert_action()"

        def next_turn() -> str | list[int]:
            turn = env.expert_action()
            if turn is None:
                raise ValueError(f"{name} returned None: the expert has no next action")
            return turn

        return cls(tokenizer, next_turn)

    @classmethod
    def expert_factory(cls, agent: Any) -> Callable[[Any], ScriptedPolicy]:
        """Expert policies for ``agent``'s episodes (one per environment), refused at once, before any episode,
        with one line naming ``environment.id`` when the agent's environment has no scripted expert."""
        env = agent.make_env()
        if not has_expert(env):
            raise ValueError(f"environment.id {agent.spec.environment.id}: {type(env).__name__} has no scripted "
                             "expert (it does not define expert_action()); the scripted policy cannot play it")
        tokenizer = agent.tokenizer
        return lambda e: cls.for_env(e, tokenizer)

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
