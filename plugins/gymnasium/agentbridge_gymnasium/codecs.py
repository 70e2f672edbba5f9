"""Text codecs: how one Gymnasium env is shown to a language model and how its answer becomes an action.

A codec names the env's actions, writes an observation as text, says what makes an episode solved, and may give
per-task ``gymnasium.make`` arguments (a FrozenLake map per task). Register your own with :func:`register_codec`
or name one in the spec as ``codec: package.module:object``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Codec:
    """How one env speaks text. ``describe(obs, env)`` → text; ``actions`` are the names, in the env's order."""

    actions: list[str]
    describe: Callable[[Any, Any], str]
    intro: str
    solved: Callable[[float, bool], bool] = lambda last_reward, terminated: terminated and last_reward > 0
    make_kwargs: Callable[[int, dict[str, Any]], dict[str, Any]] = field(default=lambda seed, args: {})


def _grid(env: Any, position: int) -> str:
    """The map with ``@`` at ``position``: the map's text is decoded once per env (it never changes)."""
    base = env.unwrapped
    text = getattr(base, "_agentbridge_map_text", None)
    if text is None:
        text = "\n".join("".join(c.decode() for c in row) for row in base.desc)
        base._agentbridge_map_text = text
    at = position + position // len(base.desc[0])  # one newline per row before it
    return f"{text[:at]}@{text[at + 1:]}"


def _frozen_lake_map(seed: int, args: dict[str, Any]) -> dict[str, Any]:
    from gymnasium.envs.toy_text.frozen_lake import generate_random_map

    size = int(args.get("size", 4))
    return {"desc": generate_random_map(size=size, p=float(args.get("frozen", 0.8)), seed=seed),
            "is_slippery": bool(args.get("is_slippery", False))}


FROZEN_LAKE = Codec(
    actions=["left", "down", "right", "up"],
    describe=lambda obs, env: _grid(env, int(obs)),
    intro=("Walk from S to the goal G on the frozen lake without stepping into a hole H. You are @; F is safe ice. "
           "Each turn answer with one move: <action>left</action>, down, right or up."),
    make_kwargs=_frozen_lake_map,
)


def _taxi(obs: Any, env: Any) -> str:
    row, col, passenger, destination = env.unwrapped.decode(int(obs))
    names = ["R (0,0)", "G (0,4)", "Y (4,0)", "B (4,3)"]
    where = "in the taxi" if passenger == 4 else f"waiting at {names[passenger]}"
    return f"Taxi at row {row}, column {col}. Passenger {where}. Destination {names[destination]}."


TAXI = Codec(
    actions=["south", "north", "east", "west", "pickup", "dropoff"],
    describe=_taxi,
    intro=("Drive the taxi on a 5x5 grid (row 0 is the top; walls block some moves), pick the passenger up and "
           "drop them at the destination. Each turn answer with one of <action>south</action>, north, east, west, "
           "pickup, dropoff."),
    solved=lambda last_reward, terminated: terminated and last_reward == 20,
)


def _blackjack(obs: Any, env: Any) -> str:
    total, dealer, usable_ace = obs
    ace = " (with an ace counted as 11)" if usable_ace else ""
    return f"Your cards sum to {total}{ace}. The dealer shows {dealer}."


BLACKJACK = Codec(
    actions=["stick", "hit"],
    describe=_blackjack,
    intro="Play blackjack against the dealer. Each turn answer <action>hit</action> or <action>stick</action>.",
)


def _cliff(obs: Any, env: Any) -> str:
    row, col = divmod(int(obs), 12)
    return f"You are at row {row}, column {col} of a 4x12 grid. The goal is row 3, column 11."


CLIFF_WALKING = Codec(
    actions=["up", "right", "down", "left"],
    describe=_cliff,
    intro=("Walk from row 3, column 0 to the goal at row 3, column 11. Row 3 between them is a cliff. Each turn "
           "answer with one move: <action>up</action>, right, down or left."),
    solved=lambda last_reward, terminated: terminated,
)

CODECS: dict[str, Codec] = {"FrozenLake-v1": FROZEN_LAKE, "Taxi-v4": TAXI, "Blackjack-v1": BLACKJACK,
                            "CliffWalking-v1": CLIFF_WALKING}


def register_codec(env_id: str, codec: Codec) -> None:
    """Make ``env_id`` usable as ``environment.args.env_id`` with ``codec``."""
    CODECS[env_id] = codec


def codec_for(env_id: str, codec: str | None = None) -> Codec:
    """The codec named ``codec`` (``module:object``), else the one registered for ``env_id``."""
    if codec:
        module, _, name = codec.partition(":")
        found = getattr(importlib.import_module(module), name, None)
        if not isinstance(found, Codec):
            raise ValueError(f"environment.args.codec: {codec} is not a Codec")
        return found
    if env_id not in CODECS:
        raise ValueError(f"environment.args.env_id: no text codec for '{env_id}' (codecs: {', '.join(CODECS)}); "
                         f"declare one and pass it as codec: module:object")
    return CODECS[env_id]
