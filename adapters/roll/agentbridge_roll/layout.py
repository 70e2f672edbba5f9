"""The trajectory layout ROLL's agentic pipeline trains on, written and read back without ROLL (plain lists).

ROLL's own env manager (``TrajEnvManager.formulate_rollouts``, GitHub alibaba/ROLL @ 8eb27cc) writes each
trajectory as one row padded to ``sequence_length``: ``input_ids`` (prompt then response, padded with the pad id),
``attention_mask`` (1 on the tokens), ``position_ids`` (0, 1, ...; 0 on padding), ``prompt_mask`` (1 on the
prompt), ``response_mask`` (1 on generated tokens only), ``scores`` (the episode's reward on its last token) and
``infer_logprobs`` (the rollout log-probs, 0 on the prompt and environment tokens, shifted by one: entry ``j`` is
the log-prob of token ``j + 1``, width ``sequence_length - 1``). ROLL's pipeline sums ``scores`` into the episode's
reward (``compute_response_level_rewards``), masks its loss with ``response_mask[:, 1:]`` and reads
``infer_logprobs`` as the rollout policy's. agentbridge's env manager writes the driver's episodes in exactly this
layout (:func:`rows`); the conformance suite reads them back from ROLL's batch (:func:`record`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentbridge.adapter.conformance import EpisodeRecord
from agentbridge.adapter.rollout import TrainingSequence

FIELDS = ("input_ids", "attention_mask", "position_ids", "response_mask", "prompt_mask", "scores", "infer_logprobs")


class LayoutError(ValueError):
    """A trajectory does not fit ROLL's row, or a row is not one prompt followed by one response (one line)."""


def rows(seq: TrainingSequence, rewards: Sequence[float], length: int, pad_id: int) -> dict[str, list[Any]]:
    """One trajectory's row: ``seq`` (the driver's training sequence) with ``rewards`` on its response tokens, padded
    to ``length`` (ROLL's ``sequence_length``). A sequence longer than ``length`` raises: ROLL would cut it."""
    n_prompt, n_response = len(seq.prompt_ids), len(seq.response_ids)
    n = n_prompt + n_response
    if n > length:
        raise LayoutError(f"a trajectory of {n} tokens does not fit sequence_length {length}")
    if len(rewards) != n_response:
        raise LayoutError(f"{len(rewards)} rewards for {n_response} response tokens")
    pad = length - n
    logprobs = [0.0] * n_prompt + [float(x) for x in seq.logprobs] + [0.0] * pad
    return {
        "input_ids": [*seq.prompt_ids, *seq.response_ids] + [int(pad_id)] * pad,
        "attention_mask": [1] * n + [0] * pad,
        "position_ids": list(range(n)) + [0] * pad,
        "response_mask": [0] * n_prompt + [int(m) for m in seq.response_mask] + [0] * pad,
        "prompt_mask": [1] * n_prompt + [0] * (n_response + pad),
        "scores": [0.0] * n_prompt + [float(r) for r in rewards] + [0.0] * pad,
        "infer_logprobs": logprobs[1:],
    }


def record(row: Mapping[str, Sequence[Any]], case: str) -> EpisodeRecord:
    """The episode a row holds, without its padding: the prompt is ``prompt_mask``, the response runs to the end of
    ``attention_mask``, the log-probs are ``infer_logprobs`` shifted back, the reward is ``scores`` summed (as ROLL
    sums them) and ``token_rewards`` the response's ``scores``."""
    attention, prompt_mask, scores = list(row["attention_mask"]), list(row["prompt_mask"]), list(row["scores"])
    n, p = int(sum(attention)), int(sum(prompt_mask))
    if not (0 < p < n and all(attention[:n]) and all(prompt_mask[:p])):
        raise LayoutError(f"case {case}: the attention and prompt masks are not one prompt followed by one response")
    if any(float(x) for x in scores[:p]) or any(float(x) for x in scores[n:]):
        raise LayoutError(f"case {case}: scores outside the response")
    ids, logprobs = list(row["input_ids"]), list(row["infer_logprobs"])
    return EpisodeRecord(
        case=case, prompt_ids=[int(x) for x in ids[:p]], response_ids=[int(x) for x in ids[p:n]],
        response_mask=[int(x) for x in list(row["response_mask"])[p:n]],
        logprobs=[float(x) for x in logprobs[p - 1:n - 1]], reward=float(sum(float(x) for x in scores)),
        token_rewards=[float(x) for x in scores[p:n]])


class EqualScoresFilter:
    """DAPO's dynamic sampling as a ROLL group filter (``train_env_manager.group_filter_cls``, the interface of
    ROLL's ``agentic_pipeline.GroupFilter``): a group whose episodes all scored the same carries no GRPO advantage, so
    ROLL's queue drops it and plays another group in its place."""

    def __init__(self, config: Any, env_manager_config: Any, mode: str) -> None:
        self.mode = mode

    def filter(self, group_id: int, episode_id: int, group: list[Any]) -> bool:
        """True (drop) when every trajectory of a training group has the same episode score."""
        scores = [float(r.non_tensor_batch["episode_scores"][0]) for r in group if r is not None]
        return self.mode == "train" and len(scores) > 1 and max(scores) - min(scores) < 1e-9
