"""The ``wordplay/words`` dataset: seeded made-up words; train and eval never share a word."""

from __future__ import annotations

import hashlib
import random

from agentbridge import Task

SYLLABLES = ["ba", "ko", "mi", "ru", "te", "lan", "dor", "fen", "gil", "pas", "vo", "zu", "shi", "tra"]


def _is_eval(word: str) -> bool:
    """A fixed ~10% of all words is held out for evaluation, whatever the seed."""
    return hashlib.sha256(word.encode()).digest()[0] < 26


def word_tasks(split: str = "train", size: int = 100, seed: int = 0, min_syllables: int = 2,
               max_syllables: int = 4) -> list[Task]:
    """``size`` distinct words of ``split`` (train | eval); the same seed always gives the same tasks."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be train or eval, got {split!r}")
    rng = random.Random(f"wordplay-{seed}-{split}")
    tasks: list[Task] = []
    seen: set[str] = set()
    attempts = 0
    while len(tasks) < size:
        attempts += 1
        if attempts > 100 * size + 1000:
            raise ValueError(f"could not make {size} distinct {split} words; raise max_syllables")
        word = "".join(rng.choices(SYLLABLES, k=rng.randint(min_syllables, max_syllables)))
        if word in seen or _is_eval(word) != (split == "eval"):
            continue
        seen.add(word)
        tasks.append(Task(id=f"wordplay-{split}-{seed}-{len(tasks)}", prompt=f"Reverse the word '{word}'.",
                          data={"word": word, "answer": word[::-1]}))
    return tasks
