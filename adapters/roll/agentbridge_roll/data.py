"""The job's tasks (JSON lines ``{"id", "prompt", "data"}``, read back by ``read_tasks_jsonl``): each episode's task.

ROLL's agentic pipeline has no dataset: each env manager plays episodes of its own environment, seeded by its group
and episode. agentbridge's env manager reads the job's task file instead and picks each episode's task from its
group and episode ids (:func:`task_index`), so the episodes of one group share their task (ROLL's grouping).
"""

from __future__ import annotations

import random


def task_index(episode_id: int, group_id: int, groups: int, n_tasks: int, seed: int | None) -> int:
    """The task of episode ``episode_id`` of group ``group_id`` (of ``groups``): the groups of one step take
    consecutive tasks, each pass over the tasks in its own order (shuffled with ``seed``; file order when None)."""
    if n_tasks < 1:
        raise ValueError("the job has no tasks")
    k = episode_id * groups + group_id
    epoch, i = divmod(k, n_tasks)
    if seed is None:
        return i
    order = list(range(n_tasks))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order[i]
