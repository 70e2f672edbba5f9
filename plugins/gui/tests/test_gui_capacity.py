"""gui/miniwob's capacity: one episode per (task, page seed) of the split's range; distinct episodes up to it, and a
size above it is one line before any page seed is drawn."""

from __future__ import annotations

import pytest

from agentbridge_gui import tasks as gui_tasks
from agentbridge_gui.tasks import PAGE_SEEDS, SEED_OFFSETS, miniwob_capacity, miniwob_tasks


def test_the_capacity_counts_every_page_seed_of_each_task() -> None:
    assert miniwob_capacity("train") == 6 * PAGE_SEEDS
    assert miniwob_capacity("eval", 3, ["click-test", "click-test", "enter-text"]) == 2 * PAGE_SEEDS
    assert miniwob_tasks.capacity is miniwob_capacity  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="split must be train, dev or eval"):
        miniwob_capacity("validation")


def test_a_size_above_the_capacity_is_one_line_at_once() -> None:
    with pytest.raises(ValueError) as info:
        miniwob_tasks("dev", PAGE_SEEDS + 1, tasks=["click-test"])
    assert str(info.value) == (f"gui/miniwob can produce at most {PAGE_SEEDS} distinct dev tasks (tasks=click-test), "
                               f"asked for {PAGE_SEEDS + 1}")


def test_a_small_range_is_filled_with_distinct_episodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gui_tasks, "PAGE_SEEDS", 5)
    names = ["click-test", "enter-text"]
    for split in ("train", "dev", "eval"):
        tasks = miniwob_tasks(split, 10, seed=2, tasks=names)
        pairs = {(t.data["task"], t.data["seed"]) for t in tasks}
        assert len(pairs) == 10 and all(SEED_OFFSETS[split] <= s < SEED_OFFSETS[split] + 5 for _, s in pairs)
        with pytest.raises(ValueError, match="can produce at most 10 distinct"):
            miniwob_tasks(split, 11, seed=2, tasks=names)
