"""Stops for runs that would train nothing: an RL phase of zero steps, and a reward that fails on every episode.

Both end the run with one line (a ``ValueError``: a job's entry point prints it and exits non-zero) instead of a
run that exits 0 and reports what RL did not do.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentbridge.rewards import PROCESS, reward_errors
from agentbridge.trajectory import Trajectory


class NoTrainingSteps(ValueError):
    """The RL phase would make (or made) zero steps (one line)."""


class RewardAlwaysFails(ValueError):
    """A reward component raised on every scored episode of a training step (one line)."""


def zero_steps_problem(train_tasks: int, prompts_per_step: int, steps: int) -> str | None:
    """Why an RL phase of ``steps`` steps over ``train_tasks`` tasks, ``prompts_per_step`` of them a step, makes no
    step, in one line; None when it makes at least one.

    A step takes a whole batch of distinct tasks (the backends' samplers drop an incomplete one), so a train set
    smaller than one batch gives none, whatever ``steps`` says.
    """
    if train_tasks < prompts_per_step:
        return (f"data.train has {train_tasks} task(s), fewer than one RL step's batch of {prompts_per_step} prompts "
                f"(algorithm.batch_size): the RL phase would make 0 steps; give data.train at least "
                f"{prompts_per_step} tasks (data.train.size) or lower algorithm.batch_size")
    if steps <= 0:
        return f"the RL phase resolves to {steps} steps: it would train nothing; set algorithm.steps to at least 1"
    return None


def check_rl_steps(train_tasks: int, prompts_per_step: int, steps: int) -> None:
    """Raise :class:`NoTrainingSteps` with :func:`zero_steps_problem`'s line when the RL phase would make no step."""
    if problem := zero_steps_problem(train_tasks, prompts_per_step, steps):
        raise NoTrainingSteps(problem)


def reward_ids(trajs: Sequence[Trajectory]) -> list[str]:
    """The components the episodes carry (those of a failed reward are its id), the process reward left out."""
    return list(dict.fromkeys(name for t in trajs for name in t.reward_components if name != PROCESS))


def always_failing_reward(trajs: Sequence[Trajectory], ids: Sequence[str] | None = None) -> str | None:
    """One line naming the first reward (of ``ids``, default :func:`reward_ids`) that raised on every scored episode
    of ``trajs`` and its first error; None when every reward scored at least one. Episodes that ended in ``error``
    were not scored and do not count."""
    scored = [t for t in trajs if t.finish_reason != "error"]
    if not scored:
        return None
    ids = list(ids) if ids is not None else reward_ids(scored)
    failures = [reward_errors(t.error, ids) for t in scored]
    for id in ids:
        if all(id in f for f in failures):
            first = (failures[0][id].strip().splitlines() or ["(no message)"])[0]
            return (f"reward {id} raised on every episode of a training step ({len(scored)} of {len(scored)}), so "
                    f"its component would train as 0; the first error: {first[:300]}")
    return None


class RewardFailureGuard:
    """Checks each training step's episodes: a reward that raised on all of them stops the run
    (:class:`RewardAlwaysFails`). ``ids``: the rewards to watch (default: every component the episodes carry)."""

    def __init__(self, ids: Sequence[str] | None = None) -> None:
        self.ids = list(ids) if ids is not None else None

    def check(self, trajs: Sequence[Trajectory]) -> None:
        if line := always_failing_reward(trajs, self.ids):
            raise RewardAlwaysFails(line)
