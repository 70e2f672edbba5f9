"""Tasks for an OpenEnv server: one reset seed (and reset arguments) per episode, disjoint across splits."""

from __future__ import annotations

from typing import Any

from agentbridge import Task, capacity_line, declares_capacity, seed_block_capacity

SPLIT_BASE = {"train": 0, "dev": 1_000_000, "eval": 2_000_000, "test": 2_000_000}
SPLIT_SEEDS = 1_000_000  # reset seeds each split owns, from its base


def openenv_capacity(split: str = "train", seed: int = 0, **_: Any) -> int:
    """Episodes ``split`` can have with ``seed`` before its reset seeds would reach the next split's."""
    if split not in SPLIT_BASE:
        raise ValueError(f"split must be train, dev or eval, got {split!r}")
    return seed_block_capacity(seed, SPLIT_SEEDS)


@declares_capacity(openenv_capacity)
def openenv_seeds(split: str = "train", size: int = 100, seed: int = 0, reset: dict[str, Any] | None = None,
                  instruction: str | None = None, group: str = "openenv") -> list[Task]:
    """``size`` episodes of ``split``: reset seeds ``base + seed * size + i`` (splits never share one), each reset
    with ``reset`` as keyword arguments; ``instruction`` (optional) opens the first message. A ``size`` above
    :func:`openenv_capacity` is a ValueError."""
    capacity = openenv_capacity(split, seed)
    if size > capacity:
        raise ValueError(capacity_line("openenv/seeds", capacity, split, size, f"seed={seed}"))
    first = SPLIT_BASE[split] + seed * size
    data: dict[str, Any] = {"reset": dict(reset or {}), "group": group}
    if instruction:
        data["instruction"] = instruction
    return [Task(id=f"openenv-{split}-{first + i}", prompt=instruction or f"OpenEnv episode {first + i}",
                 data={**data, "seed": first + i}) for i in range(size)]
