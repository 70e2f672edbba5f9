"""openenv/seeds's capacity: each split owns SPLIT_SEEDS seeds from its base; the capacity is the
most tasks that stay in them, reached exactly, and a size above it (or a negative seed) is one line."""

from __future__ import annotations

from agentbridge.testing import check_seed_block_dataset
from agentbridge_openenv.data import SPLIT_BASE, SPLIT_SEEDS, openenv_capacity, openenv_seeds


def test_the_declared_capacity_is_true() -> None:
    check_seed_block_dataset(openenv_seeds, openenv_capacity, "openenv/seeds",
                             split_base=SPLIT_BASE, split_seeds=SPLIT_SEEDS, seed_field="seed")
