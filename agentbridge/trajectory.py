"""Data the driver produces and consumes: SamplingParams, Generation, Limits, Turn, Trajectory."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from agentbridge.env import Message

FINISH_REASONS = ("done", "max_turns", "length", "error")


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 256
    seed: int | None = None


@dataclass
class Generation:
    """One policy call's output: the generated ids (ending in EOS when it stopped by itself)."""

    token_ids: list[int]
    logprobs: list[float] | None = None
    finish_reason: str = "stop"  # stop | length


@dataclass
class Limits:
    """Episode budgets, enforced by the driver so every backend receives sequences that already fit."""

    max_turns: int = 6
    max_prompt_tokens: int = 1024
    max_response_tokens: int = 2048
    max_tokens_per_turn: int = 256


@dataclass
class Turn:
    """One assistant turn. ``reward`` is the environment's step reward; ``scores`` the per-turn rewards
    (``per: turn``, unweighted); ``credit`` the turn's weighted process reward (both together), which a backend
    with per-token rewards places on ``end``, the response position of the turn's last generated token."""

    text: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    observations: list[Message] = field(default_factory=list)
    reward: float = 0.0
    scores: dict[str, float] = field(default_factory=dict)
    credit: float = 0.0
    end: int = -1
    message_index: int = -1
    generated_tokens: int = 0
    observation_tokens: int = 0
    generate_s: float = 0.0
    env_s: float = 0.0


@dataclass
class Trajectory:
    """One episode, token-level. ``response_mask`` is 1 for policy tokens, 0 for env/template tokens."""

    task_id: str
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    images: list[Any] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0
    reward_components: dict[str, float] = field(default_factory=dict)
    finish_reason: str = "done"
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    messages: list[Message] = field(default_factory=list)

    @property
    def final_text(self) -> str:
        """Text of the last policy turn (where answers live)."""
        return self.turns[-1].text if self.turns else ""

    def through_turn(self, index: int) -> Trajectory:
        """The episode as it stood after turn ``index`` and the environment's answer to it (what a per-turn
        reward scores): its turns, messages and tokens up to there."""
        turn = self.turns[index]
        end = turn.end + 1 if turn.end >= 0 else 0
        messages = self.messages[: turn.message_index + 1] + list(turn.observations) if turn.message_index >= 0 \
            else list(self.messages)
        return replace(self, turns=self.turns[: index + 1], messages=messages, response_ids=self.response_ids[:end],
                       response_mask=self.response_mask[:end], logprobs=self.logprobs[:end],
                       metrics=dict(self.metrics), reward_components={})

    def to_dict(self, *, tokens: bool = True) -> dict[str, Any]:
        """JSON-friendly form. Images become a count; messages are dropped (turns keep the text)."""
        d = asdict(self)
        d["images"] = len(self.images)
        d.pop("messages")
        for turn in d["turns"]:
            turn["observations"] = [_jsonable_message(m) for m in turn["observations"]]
        if not tokens:
            for key in ("prompt_ids", "response_ids", "response_mask", "logprobs"):
                d.pop(key)
        return d


def _jsonable_message(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        content = [b if b.get("type") != "image" else {"type": "image"} for b in content]
    return {**message, "content": content}
