"""TextWorld games generated offline, one per (challenge, settings, seed), built once and cached.

A game is TextWorld's own generator (``textworld.challenges``: ``tw-simple``, ``tw-coin_collector``,
``tw-treasure_hunter``, ``tw-cooking``) compiled to a Z-machine file; the cache entry is keyed on the challenge,
its settings, the seed and TextWorld's version, under ``agentbridge.cache.cache_dir()/textworld``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import threading
from importlib import metadata
from pathlib import Path
from typing import Any

from agentbridge import Task, cache_dir, capacity_line, declares_capacity, seed_block_capacity

_GENERATING = threading.Lock()  # TextWorld's generator keeps global state: one game at a time per process
SPLIT_BASE = {"train": 0, "dev": 1_000_000, "eval": 2_000_000, "test": 2_000_000}
SPLIT_SEEDS = 1_000_000  # game seeds each split owns, from its base
DEFAULT_SETTINGS: dict[str, dict[str, Any]] = {
    "tw-simple": {"rewards": "dense", "goal": "detailed", "test": False},
    "tw-coin_collector": {"level": 1},
    "tw-treasure_hunter": {"level": 1},
    "tw-cooking": {"recipe": 1, "take": 1, "go": 1, "open": False, "cook": False, "cut": False, "drop": False,
                   "recipe_seed": 0, "split": "train"},
}


def challenge_settings(challenge: str, settings: dict[str, Any] | None) -> dict[str, Any]:
    """The challenge's default settings updated with ``settings``; a ValueError names the known challenges."""
    if challenge not in DEFAULT_SETTINGS:
        raise ValueError(f"challenge must be one of {', '.join(DEFAULT_SETTINGS)}, got {challenge!r}")
    return {**DEFAULT_SETTINGS[challenge], **(settings or {})}


def game_file(challenge: str, settings: dict[str, Any], seed: int) -> Path:
    """The compiled game of ``challenge`` with ``settings`` and ``seed``, generated on first use (under a lock)."""
    key = hashlib.sha256(json.dumps([challenge, settings, seed, metadata.version("textworld")],
                                    sort_keys=True).encode()).hexdigest()[:16]
    root = cache_dir() / "textworld"
    target = root / f"{challenge}-{seed}-{key}"
    if (target / "game.z8").is_file():
        return target / "game.z8"
    root.mkdir(parents=True, exist_ok=True)
    with _GENERATING, open(root / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "game.z8").is_file():
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
            try:
                _generate(challenge, settings, seed, tmp / "game.z8")
                shutil.rmtree(target, ignore_errors=True)
                os.replace(tmp, target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return target / "game.z8"


def _generate(challenge: str, settings: dict[str, Any], seed: int, path: Path) -> None:
    import textworld.challenges
    from textworld import GameOptions
    from textworld.generator import compile_game

    _, make, _ = textworld.challenges.CHALLENGES[challenge]
    options = GameOptions()
    options.seeds = seed
    options.path = str(path)
    options.force_recompile = True
    compile_game(make(dict(settings), options), options)


def textworld_capacity(split: str = "train", seed: int = 0, challenge: str = "tw-simple",
                       settings: dict[str, Any] | None = None) -> int:
    """Games ``split`` can have with ``seed`` before its game seeds would reach the next split's (distinct seeds;
    a small challenge may make the same game from two of them)."""
    if split not in SPLIT_BASE:
        raise ValueError(f"split must be train, dev or eval, got {split!r}")
    challenge_settings(challenge, settings)
    return seed_block_capacity(seed, SPLIT_SEEDS)


@declares_capacity(textworld_capacity)
def textworld_games(split: str = "train", size: int = 100, seed: int = 0, challenge: str = "tw-simple",
                    settings: dict[str, Any] | None = None) -> list[Task]:
    """``size`` games of ``split``: game seeds ``base + seed * size + i``, so splits never share a game (a ``size``
    above :func:`textworld_capacity` is a ValueError). Games are generated when an episode first plays them (about a
    second each), not here."""
    capacity = textworld_capacity(split, seed, challenge, settings)
    if size > capacity:
        raise ValueError(capacity_line("textworld/games", capacity, split, size, f"challenge={challenge}, seed={seed}"))
    full = challenge_settings(challenge, settings)
    first = SPLIT_BASE[split] + seed * size
    return [Task(id=f"{challenge}-{split}-{first + i}", prompt=f"TextWorld {challenge} game {first + i}",
                 data={"game_seed": first + i, "challenge": challenge, "settings": full, "group": challenge})
            for i in range(size)]
