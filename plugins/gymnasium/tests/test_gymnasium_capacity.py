"""gym/episodes's capacity: each split owns SPLIT_SEEDS seeds from its base; the capacity is the most
tasks that stay in them, reached exactly, and a size above it (or a negative seed) is one line."""

from __future__ import annotations

import pytest

from agentbridge.datasets import declared_capacity
from agentbridge.spec.schema import DatasetSpec
from agentbridge_gymnasium.tasks import SPLIT_BASE, SPLIT_SEEDS, gym_capacity, gym_episodes


@pytest.mark.parametrize("seed", [0, 1, 7, 99, 999_999, 5_000_000])
def test_the_capacity_is_the_most_tasks_whose_seeds_stay_in_the_split(seed: int) -> None:
    n = gym_capacity("train", seed)
    assert n == SPLIT_SEEDS // (seed + 1)
    for base in set(SPLIT_BASE.values()):
        assert base + seed * n + n <= base + SPLIT_SEEDS  # the last seed of n tasks is the split's own
        assert base + seed * (n + 1) + n + 1 > base + SPLIT_SEEDS  # one more would reach the next split's


def test_the_capacity_is_reached_and_splits_stay_disjoint() -> None:
    seeds = {}
    for split in ("train", "dev", "eval"):
        n = gym_capacity(split, 99)
        tasks = gym_episodes(split, n, 99)
        seeds[split] = {t.data["seed"] for t in tasks}
        assert len(tasks) == n == len(seeds[split]) == 10_000
        assert all(SPLIT_BASE[split] <= s < SPLIT_BASE[split] + SPLIT_SEEDS for s in seeds[split])
    assert not seeds["train"] & seeds["dev"] and not seeds["dev"] & seeds["eval"] and not seeds["train"] & seeds["eval"]


def test_a_size_above_the_capacity_or_a_negative_seed_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"^gym/episodes can produce at most 100000 distinct dev tasks "
                                         r"\(.*seed=9\), asked for 100001$"):
        gym_episodes("dev", 100_001, 9)
    with pytest.raises(ValueError, match="seed must be 0 or more"):
        gym_episodes("train", 1, -1)
    with pytest.raises(ValueError, match="split must be train, dev or eval"):
        gym_capacity("valid", 0)
    assert declared_capacity(gym_episodes, DatasetSpec(id="gym/episodes", split="test", seed=3)) == 250_000
