"""Seeded arithmetic word problems with exact answers, split into disjoint train and eval sets."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator

from agentbridge import Task, capacity_line, declares_capacity

# distinct problems per split, with and without two-step ones: pool_sizes(two_step), fixed here so that no call
# pays for the count (a test recounts them)
POOL_SIZES = {True: {"train": 468_980, "dev": 60_264, "eval": 59_906},
              False: {"train": 18_763, "dev": 2_409, "eval": 2_394}}
# Random draws give at most this share of a split's problems (beyond it new ones get rare) and stop after
# MAX_MISSES draws in a row add none, or MAX_DRAWS_PER_TASK per task asked (the rarest split keeps about 1 draw
# in 20); the rest comes from the split's remaining problems in a seeded order.
RANDOM_SHARE = 0.75
MAX_MISSES = 10_000
MAX_DRAWS_PER_TASK = 50
SPLITS = ("train", "dev", "eval", "test")

_ONE_STEP = [
    ("Add {a} and {b}.", "{a} + {b}"),
    ("What is {a} plus {b}?", "{a} + {b}"),
    ("Subtract {b} from {a}.", "{a} - {b}"),
    ("Multiply {a} by {b}.", "{a} * {b}"),
    ("Divide {a} by {b}.", "{a} / {b}"),
]
_SECOND = [
    (", then add {c}.", "{prev} + {c}"),
    (", then subtract {c}.", "{prev} - {c}"),
    (", then multiply by {c}.", "{prev} * {c}"),
]


def _split_of(prompt: str) -> str:
    """Each possible prompt belongs to one split, whatever the seed: 10% eval, 10% dev, the rest train."""
    band = hashlib.sha256(prompt.encode()).digest()[0]
    return "eval" if band < 26 else "dev" if band < 52 else "train"


def _operands(expr: str) -> Iterator[tuple[int, int]]:
    """Every ``(a, b)`` :func:`_draw` can draw for a one-step expression."""
    if "/" in expr:
        yield from ((b * k, b) for b in range(2, 13) for k in range(2, 13))
    elif "*" in expr:
        yield from ((a, b) for b in range(2, 13) for a in range(10, 100))
    elif "-" in expr:  # drawn a in 10..99, b in 2..99, then swapped so that a >= b
        yield from ((a, b) for a in range(10, 100) for b in range(2, a + 1))
    else:
        yield from ((a, b) for a in range(10, 100) for b in range(2, 100))


def _all_problems(two_step: bool) -> Iterator[tuple[str, str, tuple[str, int] | None]]:
    """Every problem :func:`_draw` can draw, each prompt once, in a fixed order: ``(prompt, first step, second
    step's template and operand or None)``; :func:`_solved` adds the steps and the answer."""
    for text, expr in _ONE_STEP:
        for a, b in _operands(expr):
            first, one = expr.format(a=a, b=b), text.format(a=a, b=b)
            yield one, first, None
            if two_step:
                for then, expr2 in _SECOND:
                    for c in range(2, 10):
                        yield one.rstrip(".?") + then.format(c=c), first, (expr2, c)


def _solved(first: str, second: tuple[str, int] | None) -> tuple[list[str], int]:
    value = eval_int(first)
    if second is None:
        return [first], value
    expr2, c = second
    return [first, expr2.replace("{c}", str(c))], eval_int(expr2.format(prev=value, c=c))


def _band(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be train, dev or eval, got {split!r}")
    return "eval" if split == "test" else split


def pool_sizes(two_step: bool) -> dict[str, int]:
    """Distinct problems per split, counted over every problem the generator can draw (about a second)."""
    counts = dict.fromkeys(("train", "dev", "eval"), 0)
    for prompt, _, _ in _all_problems(two_step):
        counts[_split_of(prompt)] += 1
    return counts


def arithmetic_capacity(split: str = "train", seed: int = 0, two_step: bool = True) -> int:
    """How many distinct problems ``split`` has, whatever the seed (:data:`POOL_SIZES`)."""
    return POOL_SIZES[bool(two_step)][_band(split)]


def _draw(rng: random.Random) -> tuple[str, str, tuple[str, int] | None]:
    """One random problem as :func:`_all_problems` lists it (unsolved: a rejected draw costs no evaluation)."""
    text, expr = rng.choice(_ONE_STEP)
    b = rng.randint(2, 12) if "/" in expr or "*" in expr else rng.randint(2, 99)
    a = b * rng.randint(2, 12) if "/" in expr else rng.randint(10, 99)
    if "-" in expr and a < b:
        a, b = b, a
    first = expr.format(a=a, b=b)
    if rng.random() < 0.5:
        return text.format(a=a, b=b), first, None
    then, expr2 = rng.choice(_SECOND)
    c = rng.randint(2, 9)
    return text.format(a=a, b=b).rstrip(".?") + then.format(c=c), first, (expr2, c)


def group_of(steps: list[str]) -> str:
    """The problem kind evaluations report apart: ``1-step add/sub``, ``1-step mul/div`` or ``2-step``."""
    if len(steps) > 1:
        return "2-step"
    return "1-step add/sub" if " + " in steps[0] or " - " in steps[0] else "1-step mul/div"


def eval_int(expression: str) -> int:
    from agentbridge_math.calculator import evaluate

    return int(evaluate(expression))


@declares_capacity(arithmetic_capacity)
def arithmetic_tasks(split: str = "train", size: int = 100, seed: int = 0, two_step: bool = True) -> list[Task]:
    """``size`` problems of ``split`` (train | dev | eval): same seed, same problems; the splits never overlap.

    A ``size`` above the split's distinct problems (:func:`arithmetic_capacity`) is a ValueError. Problems are
    drawn at random up to three quarters of the split (or until draws stop finding new ones); any rest comes from
    the split's remaining problems in a seeded order, so generation always ends.
    """
    band = _band(split)
    two_step = bool(two_step)
    capacity = arithmetic_capacity(split, seed, two_step)
    if size > capacity:
        raise ValueError(capacity_line("math/arithmetic", capacity, split, size, f"two_step={two_step}"))
    rng = random.Random(f"math-{seed}-{split}")
    drawn: list[tuple[str, str, tuple[str, int] | None]] = []
    seen: set[str] = set()
    draws = misses = 0
    random_part = min(size, int(RANDOM_SHARE * capacity))
    while len(drawn) < random_part and misses < MAX_MISSES and draws < MAX_DRAWS_PER_TASK * size + MAX_MISSES:
        draws += 1
        problem = _draw(rng)
        if (not two_step and problem[2] is not None) or _split_of(problem[0]) != band or problem[0] in seen:
            misses += 1
            continue
        misses = 0
        seen.add(problem[0])
        drawn.append(problem)
    if len(drawn) < size:  # near the split's capacity: the rest in a seeded order
        rest = [p for p in _all_problems(two_step) if _split_of(p[0]) == band and p[0] not in seen]
        rng.shuffle(rest)
        drawn += rest[:size - len(drawn)]
    tasks = []
    for i, (prompt, first, second) in enumerate(drawn):
        steps, answer = _solved(first, second)
        tasks.append(Task(id=f"math-{split}-{seed}-{i}", prompt=prompt,
                          data={"answer": str(answer), "steps": steps, "group": group_of(steps)}))
    return tasks
