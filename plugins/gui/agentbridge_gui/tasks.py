"""Seeded MiniWoB++ task instances (task name + seed) for the ``gui/miniwob`` dataset."""

from __future__ import annotations

import random
from pathlib import Path

from agentbridge import Task, capacity_line, declares_capacity
from agentbridge_gui.expert import EXPERT_TASKS

DEFAULT_TASKS = ("click-test", "click-test-2", "click-button", "click-link", "enter-text", "focus-text")
# each split draws its page seeds from its own range, so train, dev and eval pages never coincide
SEED_OFFSETS = {"train": 0, "dev": 2_000_000_000, "eval": 1_000_000_000, "test": 1_000_000_000}
PAGE_SEEDS = 1_000_000_000  # page seeds each split draws from
MAX_REDRAWS = 1_000  # draws of one episode's page seed before the split counts as exhausted


def available_tasks() -> list[str]:
    """Every MiniWoB++ task page shipped in the ``miniwob`` wheel (flight tasks excluded)."""
    import miniwob

    return sorted(p.stem for p in (Path(miniwob.__file__).parent / "html" / "miniwob").glob("*.html"))


def miniwob_capacity(split: str = "train", seed: int = 0, tasks: list[str] | tuple[str, ...] | None = None) -> int:
    """Distinct episodes (task, page seed) ``split`` can have: every page seed of its range for each task."""
    if split not in SEED_OFFSETS:
        raise ValueError(f"split must be train, dev or eval, got {split!r}")
    return len(set(tasks or DEFAULT_TASKS)) * PAGE_SEEDS


@declares_capacity(miniwob_capacity)
def miniwob_tasks(split: str = "train", size: int = 100, seed: int = 0,
                  tasks: list[str] | tuple[str, ...] | None = None) -> list[Task]:
    """``size`` distinct episodes over ``tasks`` (round robin), each with its own page seed; train, dev and eval
    seeds never overlap. Each task's ``group`` is its MiniWoB task name (success is reported per task)."""
    capacity = miniwob_capacity(split, seed, tasks)
    names = list(tasks or DEFAULT_TASKS)
    known = set(available_tasks())
    unknown = [t for t in names if t not in known]
    if unknown:
        raise ValueError(f"args.tasks: unknown MiniWoB++ task(s) {', '.join(unknown)}")
    if size > capacity:
        raise ValueError(capacity_line("gui/miniwob", capacity, split, size, f"tasks={','.join(names)}"))
    rng = random.Random(f"gui-{seed}-{split}")
    out = []
    seen: set[tuple[str, int]] = set()
    for i in range(size):
        name = names[i % len(names)]
        for _ in range(MAX_REDRAWS):
            page_seed = SEED_OFFSETS[split] + rng.randrange(PAGE_SEEDS)
            if (name, page_seed) not in seen:
                break
        else:
            raise ValueError(f"gui/miniwob: no new {split} page seed for {name} in {MAX_REDRAWS} draws, asked for "
                             f"{size} tasks")
        seen.add((name, page_seed))
        out.append(Task(id=f"gui-{split}-{seed}-{i}", prompt=f"MiniWoB++ task {name}",
                        data={"task": name, "seed": page_seed, "mode": "train" if split == "train" else "test",
                              "expert": name in EXPERT_TASKS, "group": name}))
    return out
