"""Episodes as tasks: one reset seed each, from disjoint ranges per split."""

from __future__ import annotations

from agentbridge.env import Task

SPLIT_BASE = {"train": 0, "dev": 1_000_000, "eval": 2_000_000, "test": 2_000_000}


def gym_episodes(split: str = "train", size: int = 100, seed: int = 0, env_id: str = "FrozenLake-v1") -> list[Task]:
    """``size`` episodes of ``split``: reset seeds ``base + seed * size + i``, so splits never share one."""
    if split not in SPLIT_BASE:
        raise ValueError(f"split must be train, dev or eval, got {split!r}")
    first = SPLIT_BASE[split] + seed * size
    return [Task(id=f"{env_id}-{split}-{first + i}", prompt=f"{env_id} episode {first + i}",
                 data={"seed": first + i, "group": env_id}) for i in range(size)]
