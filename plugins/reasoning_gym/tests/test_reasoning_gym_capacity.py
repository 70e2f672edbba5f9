"""rg/tasks declares no capacity (reasoning-gym's generators do not say how many questions they have); its draws are
bounded instead: the questions of a split are distinct, and a config that runs out is one line, soon."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentbridge_reasoning_gym.tasks import rg_tasks

EASY = {"basic_arithmetic": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}}


def test_questions_are_distinct() -> None:
    tasks = rg_tasks("train", 300, 0, EASY)
    assert len({t.prompt for t in tasks}) == 300
    assert getattr(rg_tasks, "capacity", None) is None


def test_a_config_that_runs_out_is_one_line_instead_of_a_hang() -> None:
    code = ("from agentbridge_reasoning_gym.tasks import rg_tasks\n"
            f"try:\n    rg_tasks('dev', 10**9, 0, {EASY!r})\nexcept ValueError as e:\n    print(e)\n")
    try:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("rg_tasks with a tiny config and a huge size did not end within 60 s")
    line = result.stdout.strip()
    assert "\n" not in line and line.startswith("rg/tasks: reasoning-gym task 'basic_arithmetic' yields too few "
                                                "distinct dev questions at this config: none new in 200 draws after")
    assert line.endswith("asked for 1000000000 tasks; widen its difficulty range or lower the size")
