"""GEM episodes as tasks: one reset seed each, from disjoint ranges per split (GEM's envs draw their game or
question from the seed at reset)."""

from __future__ import annotations

from typing import Any

from agentbridge import Task, capacity_line, declares_capacity, seed_block_capacity

SPLIT_BASE = {"train": 0, "dev": 1_000_000, "eval": 2_000_000, "test": 2_000_000}
SPLIT_SEEDS = 1_000_000  # reset seeds each split owns, from its base


def gem_capacity(split: str = "train", seed: int = 0, **_: Any) -> int:
    """Episodes ``split`` can have with ``seed`` before its reset seeds would reach the next split's."""
    if split not in SPLIT_BASE:
        raise ValueError(f"split must be train, dev or eval, got {split!r}")
    return seed_block_capacity(seed, SPLIT_SEEDS)


@declares_capacity(gem_capacity)
def gem_episodes(split: str = "train", size: int = 100, seed: int = 0,
                 env_id: str = "game:GuessTheNumber-v0-easy") -> list[Task]:
    """``size`` episodes of ``split``: reset seeds ``base + seed * size + i``, so splits never share a seed. (A
    small game has few distinct instances — GuessTheNumber-v0-easy has ten numbers — and GEM's ``rg:*`` envs draw
    from a fixed set of 500 questions, so distinct seeds can still meet the same instance.)"""
    capacity = gem_capacity(split, seed)
    if size > capacity:
        raise ValueError(capacity_line("gem/episodes", capacity, split, size, f"env_id={env_id}, seed={seed}"))
    first = SPLIT_BASE[split] + seed * size
    return [Task(id=f"{env_id}-{split}-{first + i}", prompt=f"{env_id} episode {first + i}",
                 data={"seed": first + i, "group": env_id}) for i in range(size)]
