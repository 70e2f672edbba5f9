"""math/arithmetic's capacity: the exact count of distinct problems per split, reachable, and refused above it."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from agentbridge_math import tasks as math_tasks
from agentbridge_math.calculator import evaluate
from agentbridge_math.tasks import POOL_SIZES, arithmetic_capacity, arithmetic_tasks, pool_sizes


def assert_sound(tasks: list, split: str) -> None:
    band = "eval" if split == "test" else split
    assert len({t.prompt for t in tasks}) == len(tasks)
    assert all(math_tasks._split_of(t.prompt) == band for t in tasks)
    for t in tasks:
        steps = t.data["steps"]
        last = steps[1].format(prev=f"({steps[0]})") if len(steps) == 2 else steps[0]
        assert evaluate(last) == t.data["answer"], t.prompt


@pytest.mark.parametrize("two_step", [True, False])
def test_the_declared_pool_sizes_are_the_count_of_distinct_problems(two_step: bool) -> None:
    prompts = [p for p, _, _ in math_tasks._all_problems(two_step)]
    assert len(set(prompts)) == len(prompts)  # every enumerated problem is distinct
    assert pool_sizes(two_step) == POOL_SIZES[two_step]
    assert arithmetic_tasks.capacity is arithmetic_capacity  # type: ignore[attr-defined]
    assert arithmetic_capacity("test", 5, two_step) == POOL_SIZES[two_step]["eval"]


def test_every_random_draw_is_in_the_enumerated_pool() -> None:
    """The capacity counts the enumeration: it is an upper bound when the draws never leave it."""
    pool = {p for p, _, _ in math_tasks._all_problems(True)}
    for seed in range(4):
        rng = random.Random(seed)
        for _ in range(25_000):
            prompt, first, second = math_tasks._draw(rng)
            assert prompt in pool, prompt


@pytest.mark.parametrize("split", ["train", "dev", "eval"])
def test_the_capacity_is_reached_and_one_more_is_refused(split: str) -> None:
    n = arithmetic_capacity(split, two_step=False)
    tasks = arithmetic_tasks(split, n, seed=3, two_step=False)
    assert len(tasks) == n and all(len(t.data["steps"]) == 1 for t in tasks)
    assert_sound(tasks, split)
    with pytest.raises(ValueError) as info:
        arithmetic_tasks(split, n + 1, seed=3, two_step=False)
    assert str(info.value) == (f"math/arithmetic can produce at most {n} distinct {split} tasks (two_step=False), "
                               f"asked for {n + 1}")


def test_the_enumerated_rest_is_seeded_and_sound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(math_tasks, "RANDOM_SHARE", 0.0)  # every task from the enumerated pool
    tasks = arithmetic_tasks("dev", 300, seed=1)
    assert [t.to_dict() for t in tasks] == [t.to_dict() for t in arithmetic_tasks("dev", 300, seed=1)]
    assert {t.data["group"] for t in tasks} >= {"2-step"}
    assert_sound(tasks, "dev")


def test_a_huge_size_is_refused_at_once() -> None:
    """In a child process with a timeout: a regression to an endless loop fails instead of hanging."""
    code = ("from agentbridge_math.tasks import arithmetic_tasks\n"
            "try:\n    arithmetic_tasks('train', 10**12)\nexcept ValueError as e:\n    print(e)\n")
    try:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("arithmetic_tasks('train', 10**12) did not end within 60 s")
    assert result.stdout.strip() == ("math/arithmetic can produce at most 468980 distinct train tasks "
                                     "(two_step=True), asked for 1000000000000")
