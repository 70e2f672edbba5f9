"""skyrl/arithmetic's and skyrl/sql's capacity: each split owns SPLIT_SEEDS seeds from its base; the capacity is
the most tasks that stay in them, reached exactly, and a size above it (or a negative seed) is one line."""

from __future__ import annotations

from typing import Any

import pytest

from agentbridge.datasets import declares_capacity
from agentbridge.env import Task
from agentbridge.testing import check_seed_block_dataset
from agentbridge_skyrl_gym.tasks import SPLIT_BASE, SPLIT_SEEDS, _seed_capacity, arithmetic_tasks, sql_tasks


@pytest.mark.parametrize("name", ["arithmetic", "sql"])
def test_the_declared_capacity_is_true(name: str) -> None:
    @declares_capacity(_seed_capacity)
    def build(split: str = "train", size: int = 100, seed: int = 0, **args: Any) -> list[Task]:
        if name == "sql":
            return sql_tasks(split, size, seed, **args)
        return arithmetic_tasks(split, size, seed, **args)

    check_seed_block_dataset(build, _seed_capacity, f"skyrl/{name}", split_base=SPLIT_BASE, split_seeds=SPLIT_SEEDS,
                             seed_field="seed")
