"""Seeded MiniWoB++ task instances (task name + seed) for the ``gui/miniwob`` dataset."""

from __future__ import annotations

import random
from pathlib import Path

from agentbridge.env import Task
from agentbridge_gui.expert import EXPERT_TASKS

DEFAULT_TASKS = ("click-test", "click-test-2", "click-button", "click-link", "enter-text", "focus-text")
# each split draws its page seeds from its own range, so train, dev and eval pages never coincide
SEED_OFFSETS = {"train": 0, "dev": 2_000_000_000, "eval": 1_000_000_000, "test": 1_000_000_000}


def available_tasks() -> list[str]:
    """Every MiniWoB++ task page shipped in the ``miniwob`` wheel (flight tasks excluded)."""
    import miniwob

    return sorted(p.stem for p in (Path(miniwob.__file__).parent / "html" / "miniwob").glob("*.html"))


def miniwob_tasks(split: str = "train", size: int = 100, seed: int = 0,
                  tasks: list[str] | tuple[str, ...] | None = None) -> list[Task]:
    """``size`` episodes over ``tasks`` (round robin), each with its own page seed; train, dev and eval seeds
    never overlap. Each task's ``group`` is its MiniWoB task name (success is reported per task)."""
    if split not in SEED_OFFSETS:
        raise ValueError(f"data.{split}: split must be train, dev or eval, got {split!r}")
    names = list(tasks or DEFAULT_TASKS)
    known = set(available_tasks())
    unknown = [t for t in names if t not in known]
    if unknown:
        raise ValueError(f"data.args.tasks: unknown MiniWoB++ task(s) {', '.join(unknown)}")
    rng = random.Random(f"gui-{seed}-{split}")
    out = []
    for i in range(size):
        name = names[i % len(names)]
        page_seed = SEED_OFFSETS[split] + rng.randrange(1_000_000_000)
        out.append(Task(id=f"gui-{split}-{seed}-{i}", prompt=f"MiniWoB++ task {name}",
                        data={"task": name, "seed": page_seed, "mode": "train" if split == "train" else "test",
                              "expert": name in EXPERT_TASKS, "group": name}))
    return out
