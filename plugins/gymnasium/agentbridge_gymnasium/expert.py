"""Experts from a solver: value iteration on the env's own model (``env.unwrapped.P``) where it publishes one, and
the textbook rule for blackjack."""

from __future__ import annotations

from functools import partial
from typing import Any


def plan(env: Any, gamma: float = 0.99, sweeps: int = 500) -> list[int]:
    """The greedy action of every state after value iteration on ``env.unwrapped.P`` (``P[s][a] = [(p, s', r,
    done), ...]``)."""
    model = env.unwrapped.P
    values = [0.0] * len(model)

    def q(s: int, a: int) -> float:
        return sum(p * (r + (0.0 if done else gamma * values[nxt])) for p, nxt, r, done in model[s][a])

    for _ in range(sweeps):
        delta = 0.0
        for s in model:
            best = max(q(s, a) for a in model[s])
            delta = max(delta, abs(best - values[s]))
            values[s] = best
        if delta < 1e-9:
            break
    return [max(model[s], key=partial(q, s)) for s in sorted(model)]


def blackjack_rule(obs: Any) -> int:
    """Hit below 17 (below 18 with a usable ace); 1 is hit, 0 is stick."""
    total, _, usable_ace = obs
    return int(total < (18 if usable_ace else 17))
