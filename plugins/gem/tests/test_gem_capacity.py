"""gem/episodes's capacity: each split owns SPLIT_SEEDS seeds from its base; the capacity is the
most tasks that stay in them, reached exactly, and a size above it (or a negative seed) is one line."""

from __future__ import annotations

from agentbridge.testing import check_seed_block_dataset
from agentbridge_gem.tasks import SPLIT_BASE, SPLIT_SEEDS, gem_capacity, gem_episodes


def test_the_declared_capacity_is_true() -> None:
    check_seed_block_dataset(gem_episodes, gem_capacity, "gem/episodes",
                             split_base=SPLIT_BASE, split_seeds=SPLIT_SEEDS, seed_field="seed")
