"""Seeded arithmetic word problems with exact answers, split into disjoint train and eval sets."""

from __future__ import annotations

import hashlib
import random

from agentbridge.env import Task

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


def _problem(rng: random.Random) -> tuple[str, list[str], int]:
    text, expr = rng.choice(_ONE_STEP)
    b = rng.randint(2, 12) if "/" in expr or "*" in expr else rng.randint(2, 99)
    a = b * rng.randint(2, 12) if "/" in expr else rng.randint(10, 99)
    if "-" in expr and a < b:
        a, b = b, a
    first = expr.format(a=a, b=b)
    value = eval_int(first)
    if rng.random() < 0.5:
        return text.format(a=a, b=b), [first], value
    then, expr2 = rng.choice(_SECOND)
    c = rng.randint(2, 9)
    prompt = text.format(a=a, b=b).rstrip(".?") + then.format(c=c)
    return prompt, [first, expr2.replace("{c}", str(c))], eval_int(expr2.format(prev=value, c=c))


def group_of(steps: list[str]) -> str:
    """The problem kind evaluations report apart: ``1-step add/sub``, ``1-step mul/div`` or ``2-step``."""
    if len(steps) > 1:
        return "2-step"
    return "1-step add/sub" if " + " in steps[0] or " - " in steps[0] else "1-step mul/div"


def eval_int(expression: str) -> int:
    from agentbridge_math.calculator import evaluate

    return int(evaluate(expression))


def arithmetic_tasks(split: str = "train", size: int = 100, seed: int = 0, two_step: bool = True) -> list[Task]:
    """``size`` problems of ``split`` (train | dev | eval): same seed, same problems; the splits never overlap."""
    if split not in ("train", "dev", "eval", "test"):
        raise ValueError(f"split must be train, dev or eval, got {split!r}")
    rng = random.Random(f"math-{seed}-{split}")
    band = "eval" if split == "test" else split
    tasks: list[Task] = []
    seen: set[str] = set()
    while len(tasks) < size:
        prompt, steps, answer = _problem(rng)
        if (not two_step and len(steps) > 1) or _split_of(prompt) != band or prompt in seen:
            continue
        seen.add(prompt)
        tasks.append(Task(id=f"math-{split}-{seed}-{len(tasks)}", prompt=prompt,
                          data={"answer": str(answer), "steps": steps, "group": group_of(steps)}))
    return tasks
