"""reasoning-gym tasks as agentbridge ``Task`` lists: chosen by task name, difficulty through each task's own config.

Splits never share a question: every generated question is assigned to train, dev or eval by a hash of its text
(80/10/10), and a split keeps only its own. Same arguments, same tasks.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from typing import Any

from agentbridge import Task

SPLITS = {"train": range(0, 8), "dev": range(8, 9), "eval": range(9, 10), "test": range(9, 10)}
MAX_DRAWS_PER_TASK = 200  # generated questions in a row without a new one of the split: the task is exhausted


def split_of(question: str) -> str:
    """train, dev or eval: where a question belongs, from its text alone."""
    bucket = int.from_bytes(hashlib.sha256(f"rg-split:{question}".encode()).digest()[:4], "big") % 10
    return next(name for name, buckets in SPLITS.items() if bucket in buckets)


def _config_key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


@lru_cache(maxsize=64)
def _dataset(name: str, config_key: str, seed: int, size: int) -> Any:
    import reasoning_gym

    return reasoning_gym.create_dataset(name, size=size, seed=seed, **json.loads(config_key))


def entry(name: str, config: dict[str, Any], seed: int, index: int) -> dict[str, Any]:
    """reasoning-gym's entry (question, answer, metadata) number ``index`` of a task's generator (generated once:
    the verifier scores every answer to it against this entry; treat it as read-only)."""
    return _entry(name, _config_key(config), seed, index)


@lru_cache(maxsize=1 << 16)
def _entry(name: str, config_key: str, seed: int, index: int) -> dict[str, Any]:
    block = 1024 * (index // 1024 + 1)  # entries depend on (seed, index) only; the size just bounds the index
    return _dataset(name, config_key, seed, block)[index]


@lru_cache(maxsize=256)
def score_answer_fn(name: str) -> Any:
    """reasoning-gym's ``score_answer`` of task ``name`` (built once per task)."""
    import reasoning_gym

    return reasoning_gym.get_score_answer_fn(name)


def _tasks_of(names: list[str] | dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    if isinstance(names, dict):
        return {str(k): dict(v or {}) for k, v in names.items()}
    return {str(n): {} for n in names}


def rg_tasks(split: str = "train", size: int = 100, seed: int = 0,
             tasks: list[str] | dict[str, dict[str, Any]] | None = None) -> list[Task]:
    """``size`` distinct problems of ``split`` drawn round robin from reasoning-gym's ``tasks``; a task that stops
    giving new ones (``MAX_DRAWS_PER_TASK`` draws in a row) is a ValueError.

    ``tasks``: task names (``[basic_arithmetic, leg_counting]``) or names with their reasoning-gym config — the
    difficulty (``{basic_arithmetic: {min_digits: 2, max_digits: 3}}``). Default: ``basic_arithmetic``.
    """
    from reasoning_gym.factory import DATASETS

    if split not in SPLITS:
        raise ValueError(f"split must be train, dev or eval, got {split!r}")
    chosen = _tasks_of(tasks or ["basic_arithmetic"])
    unknown = [n for n in chosen if n not in DATASETS]
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], sorted(DATASETS), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else f" ({len(DATASETS)} tasks: reasoning_gym.factory)"
        raise ValueError(f"data.args.tasks: unknown reasoning-gym task '{unknown[0]}'{hint}")
    names = list(chosen)
    cursors = dict.fromkeys(names, 0)
    kept = dict.fromkeys(names, 0)
    seen: set[str] = set()
    out: list[Task] = []
    while len(out) < size:
        name = names[len(out) % len(names)]
        for _ in range(MAX_DRAWS_PER_TASK):
            index = cursors[name]
            cursors[name] += 1
            item = entry(name, chosen[name], seed, index)
            if split_of(item["question"]) == split and item["question"] not in seen:
                break
        else:
            raise ValueError(f"rg/tasks: reasoning-gym task '{name}' yields too few distinct {split} questions at this "
                             f"config: none new in {MAX_DRAWS_PER_TASK} draws after {kept[name]}, asked for {size} "
                             f"tasks; widen its difficulty range or lower the size")
        seen.add(item["question"])
        kept[name] += 1
        out.append(Task(id=f"rg-{name}-{seed}-{index}", prompt=item["question"],
                        data={"group": name, "answer": str(item["answer"]),
                              "rg": {"task": name, "config": chosen[name], "seed": seed, "index": index}}))
    return out
