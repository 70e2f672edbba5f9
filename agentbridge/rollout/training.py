"""What a backend trains on for one episode: the driver's tokens, or the one empty-episode fallback every adapter uses.

An episode that failed before its first token (an environment that could not reset, an engine that failed on the
first turn) still becomes a valid training sample on every backend, so one broken episode never fails a batch:
its prompt is the task's prompt as the renderer writes it (when the episode never rendered one) and its response
is one EOS token with loss mask 0 and log-prob 0 — nothing the policy did not generate is ever trained on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentbridge.rollout.agent_edge import prompt_messages
from agentbridge.spec.recipe import OVERLONG, overlong_penalty
from agentbridge.trajectory import Trajectory

# the per-episode metrics every backend logs, the same keys on every sample (0 where an episode has none: an
# episode that failed before its first step has no tool metrics, one that errored is not scored)
EPISODE_METRICS = ("episode/turns", "episode/response_tokens", "episode/generated_tokens", "tools/calls",
                   "tools/failures", "tools/parse_errors", "tools/truncated", "reward/errors", "time/generate_s",
                   "time/env_s")


def episode_metrics(traj: Trajectory) -> dict[str, float]:
    """:data:`EPISODE_METRICS` of ``traj`` (missing ones 0): backends that concatenate per-sample metrics across a
    batch need the same keys on every sample."""
    return {key: float(traj.metrics.get(key, 0.0)) for key in EPISODE_METRICS}


@dataclass
class TrainingSequence:
    """The token-level sample a backend receives for one episode (no padding)."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    logprobs: list[float]


def task_prompt_ids(renderer: Any, task: Any, system_prompt: str | None = None) -> list[int]:
    """The prompt of ``task`` as the driver would render it before the environment speaks (text only): the
    fallback prompt of an episode that failed before rendering its own."""
    return list(renderer.render_prompt(prompt_messages(system_prompt, str(task.prompt))))


def training_sequence(traj: Trajectory, eos_token_id: int,
                      fallback_prompt_ids: Sequence[int] = ()) -> TrainingSequence:
    """The sample for ``traj``: its own tokens, or for an episode with no response token one EOS with loss mask 0
    and log-prob 0 (after ``fallback_prompt_ids``, or one EOS, when it has no prompt either)."""
    prompt = list(traj.prompt_ids) or list(fallback_prompt_ids) or [int(eos_token_id)]
    if not traj.response_ids:
        return TrainingSequence(prompt, [int(eos_token_id)], [0], [0.0])
    return TrainingSequence(prompt, list(traj.response_ids), list(traj.response_mask),
                            [float(x) for x in traj.logprobs])


def episode_sample(traj: Trajectory, task: Any, renderer: Any, system_prompt: str | None = None,
                   overlong: Any = None) -> TrainingSequence:
    """What a backend trains on for ``traj``, the episode of ``task``: :func:`training_sequence` with the fallback
    prompt (:func:`task_prompt_ids`) rendered only for an episode that rendered none. Every adapter calls this.
    With ``overlong.mask_truncated`` (the spec's ``algorithm.overlong``), an episode cut by a token budget trains
    on none of its tokens (its loss mask is all 0; its reward still counts in its group)."""
    fallback = task_prompt_ids(renderer, task, system_prompt) if not traj.prompt_ids and task is not None else ()
    sample = training_sequence(traj, renderer.eos_token_id, fallback)
    if overlong is not None and overlong.mask_truncated and traj.finish_reason == "length":
        sample.response_mask = [0] * len(sample.response_mask)
    return sample


def shape_reward(traj: Trajectory, spec: Any) -> None:
    """Add the soft overlong penalty of ``spec.algorithm.overlong`` (when it has a ``buffer``) to an episode RL
    trains on, as the reward component ``overlong`` (weight 1) and in its reward; an errored episode is left as it
    is (it scores 0). Evaluation episodes are not shaped."""
    overlong = spec.algorithm.overlong
    if overlong is None or overlong.buffer is None or traj.finish_reason == "error":
        return
    penalty = overlong_penalty(len(traj.response_ids), spec.agent.max_response_tokens, overlong.buffer,
                               overlong.penalty)
    traj.reward_components[OVERLONG] = penalty
    traj.reward += penalty


def token_rewards(traj: Trajectory, credit: str = "episode") -> list[float]:
    """The reward on each token of ``traj``'s training response (:func:`training_sequence`), summing to
    ``traj.reward``.

    ``episode`` credit: all of it on the last token. ``turn`` credit (``algorithm.credit``): each turn's process
    reward (``Turn.credit``) on the turn's last generated token, the rest (the outcome) on the last token — what a
    backend that trains on per-token rewards receives, so returns and advantages see where the credit was earned.
    """
    out = [0.0] * max(len(traj.response_ids), 1)
    rest = float(traj.reward)
    if credit == "turn" and traj.response_ids:
        for turn in traj.turns:
            if turn.credit and 0 <= turn.end < len(out):
                out[turn.end] += turn.credit
                rest -= turn.credit
    out[-1] += rest
    return out
