"""Where the agent meets a backend: the decisions every adapter makes, made here once.

* :func:`fit_limits`: the episode budgets a backend's sequence lengths allow.
* :func:`prompt_messages`: the messages that open a task's episode (the spec's system prompt, then the user).
* :func:`reward_components` / :func:`component_values`: the reward components a job's samples carry, and their
  values for one episode.
* :class:`ErrorRateGuard`: stops a run whose episodes keep ending in error (``agent.max_error_rate``).

The empty-episode fallback is :func:`agentbridge.rollout.training.episode_sample`; whether a model is a
vision-language model is :func:`agentbridge.models.is_vlm`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from agentbridge.env import Message
from agentbridge.rewards import PROCESS
from agentbridge.spec.recipe import OVERLONG
from agentbridge.trajectory import Limits, Trajectory

if TYPE_CHECKING:
    from agentbridge.spec.schema import Spec


def fit_limits(limits: Limits, *, max_prompt: int | None = None, max_response: int | None = None,
               max_total: int | None = None) -> Limits:
    """``limits`` cut to what a backend keeps of a sequence, so it never cuts an episode the driver let through.

    The one rule: each budget is the smaller of the spec's and the backend's. The prompt budget is at most
    ``max_prompt``; the response budget at most ``max_response`` and at most what ``max_total`` (prompt plus
    response) leaves after the prompt budget; the per-turn budget at most the response budget. ``None`` means the
    backend sets no such length. A ``max_total`` that leaves no room for a response raises ``ValueError``.
    """
    prompt = min(limits.max_prompt_tokens, max_prompt) if max_prompt is not None else limits.max_prompt_tokens
    response = min(limits.max_response_tokens, max_response) if max_response is not None \
        else limits.max_response_tokens
    if max_total is not None:
        if max_total <= prompt:
            raise ValueError(f"a backend length of {max_total} tokens (prompt + response) leaves no room for a "
                             f"response after max_prompt_tokens {prompt}")
        response = min(response, max_total - prompt)
    return replace(limits, max_prompt_tokens=prompt, max_response_tokens=response,
                   max_tokens_per_turn=min(limits.max_tokens_per_turn, response))


def prompt_messages(system_prompt: str | None, user: str | None = None) -> list[Message]:
    """The messages that open an episode: the spec's system prompt (none when empty), then ``user`` when given
    (a task's prompt, as a backend's dataset row shows it; the driver appends the environment's first messages)."""
    messages: list[Message] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    if user is not None:
        messages.append({"role": "user", "content": user})
    return messages


def reward_components(spec: Spec) -> list[str]:
    """The reward components every sample of a job carries, in order: each of the spec's reward ids, then
    ``process`` (the environment's per-step rewards). Backends that batch per-sample values need the same keys on
    every sample, whatever its episode scored; ``overlong`` last where ``algorithm.overlong`` sets a soft penalty."""
    overlong = spec.algorithm.overlong
    return [r.id for r in spec.reward] + [PROCESS] + ([OVERLONG] if overlong and overlong.buffer else [])


def component_values(traj: Trajectory, components: list[str]) -> dict[str, float]:
    """``traj``'s unweighted value of each component (0 where it has none); a dict-valued reward's keys
    (``id/key``) are summed under its id, as its weight applies to each of them."""
    values = dict.fromkeys(components, 0.0)
    for name, value in traj.reward_components.items():
        base = name if name in values else name.rsplit("/", 1)[0]
        if base in values:
            values[base] += float(value)
    return values


class TooManyErrors(ValueError):
    """More episodes ended in error than ``agent.max_error_rate`` allows (one line: the rate and the first error)."""


class ErrorRateGuard:
    """Stops a run whose episodes keep failing: over the last ``window`` episodes (once that many were seen), a
    share ending in ``error`` above ``max_rate`` raises :class:`TooManyErrors`. Every backend's rollout records
    each episode here, so a dead environment or tool server ends the run with one line, not with a model trained
    on reward-0 episodes."""

    def __init__(self, max_rate: float, window: int = 32) -> None:
        self.max_rate = max_rate
        self.window = window
        self.recent: list[str | None] = []  # the error of each recent episode, None when it did not fail

    def record(self, traj: Trajectory) -> None:
        failed = traj.finish_reason == "error"
        self.recent = [*self.recent, (traj.error or "error") if failed else None][-self.window:]
        errors = [e for e in self.recent if e is not None]
        if self.max_rate < 1 and len(self.recent) >= self.window and len(errors) / self.window > self.max_rate:
            first = errors[0].splitlines()[0] if errors[0] else "error"
            raise TooManyErrors(f"{len(errors)} of the last {self.window} episodes ended in error, more than "
                                f"agent.max_error_rate {self.max_rate:g}; the first: {first}")
