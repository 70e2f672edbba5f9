"""The backend's own data formats, and the adapter's conversions to and from agentbridge's.

A real backend has its own dataset rows and its own padded training batch; an adapter is the code between those
and agentbridge's ``Task`` and ``Trajectory``. Here the rows are JSON lines and the batch is a list of
right-padded rows: ``input_ids`` (prompt + response), ``loss_mask``, ``logprobs`` (per input token),
``prompt_len``, ``length``, ``reward`` and a GRPO ``advantage``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from agentbridge import Task
from agentbridge.adapter.conformance import EpisodeRecord
from agentbridge.adapter.rollout import Trajectory, task_prompt_ids, training_sequence


def encode_task(task: Task) -> dict[str, Any]:
    """A task as one dataset row of this backend."""
    return {"uid": task.id, **task.to_dict()}


def decode_task(row: dict[str, Any]) -> Task:
    """The task of a dataset row (what the rollout worker hands the driver)."""
    return Task.from_dict(row)


def group_advantages(rewards: Sequence[float], group_size: int) -> list[float]:
    """GRPO: each reward minus its group's mean, over the group's standard deviation (0 for a constant group)."""
    out: list[float] = []
    for start in range(0, len(rewards), group_size):
        group = list(rewards[start:start + group_size])
        mean, std = statistics.fmean(group), statistics.pstdev(group)
        out += [(r - mean) / std if std > 0 else 0.0 for r in group]
    return out


def to_batch(trajectories: Sequence[Trajectory], tasks: Sequence[Task], *, renderer: Any, pad_id: int,
             system_prompt: str | None, group_size: int) -> list[dict[str, Any]]:
    """The training batch of ``trajectories`` (``group_size`` consecutive episodes per task), right-padded.

    An episode without response tokens becomes agentbridge's one empty-episode fallback
    (:func:`agentbridge.rollout.training.training_sequence`), as on every backend.
    """
    seqs = [training_sequence(t, renderer.eos_token_id, task_prompt_ids(renderer, task, system_prompt))
            for t, task in zip(trajectories, tasks, strict=True)]
    width = max(len(s.prompt_ids) + len(s.response_ids) for s in seqs)
    advantages = group_advantages([t.reward for t in trajectories], group_size)
    rows = []
    for traj, seq, adv in zip(trajectories, seqs, advantages, strict=True):
        ids = seq.prompt_ids + seq.response_ids
        pad = width - len(ids)
        rows.append({"task_id": traj.task_id, "input_ids": ids + [pad_id] * pad,
                     "loss_mask": [0] * len(seq.prompt_ids) + seq.response_mask + [0] * pad,
                     "logprobs": [0.0] * len(seq.prompt_ids) + seq.logprobs + [0.0] * pad,
                     "prompt_len": len(seq.prompt_ids), "length": len(ids), "reward": traj.reward,
                     "advantage": adv, "images": len(traj.images)})
    return rows


def records_of(batch: Sequence[dict[str, Any]]) -> list[EpisodeRecord]:
    """Each batch row read back as the conformance suite's record (padding dropped)."""
    out = []
    for row in batch:
        p, n = row["prompt_len"], row["length"]
        out.append(EpisodeRecord(case=row["task_id"], prompt_ids=row["input_ids"][:p],
                                 response_ids=row["input_ids"][p:n], response_mask=row["loss_mask"][p:n],
                                 logprobs=row["logprobs"][p:n], reward=float(row["reward"])))
    return out
