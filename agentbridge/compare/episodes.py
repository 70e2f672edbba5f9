"""Did compared runs see the same environment? For every task and action history two runs' episodes share, the
environment's outputs after it (the observations and step reward of the turn that ends it) must agree; a replayed or
deterministic environment always does, a live one that changed (a tool server's new data, a stochastic environment)
does not.

Episodes are read from a run's ``episodes.jsonl`` (what every backend's workers append, :func:`agentbridge.runs.
record_episode`) and ``trajectories.jsonl`` (``agentbridge rollout -o DIR``). Images in observations are recorded as
a count only, so a difference in image content alone is not seen.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentbridge.runs import read_jsonl

EPISODE_FILES = ("episodes.jsonl", "trajectories.jsonl")
MAX_LINES_PER_PAIR = 10

History = tuple[str, int, str]  # task id, actions taken, their canonical JSON


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _stepped(episode: dict[str, Any], index: int, turn: dict[str, Any]) -> bool:
    """Whether the environment answered this turn: the last turn of an episode cut by a budget or an error, with no
    observations, may never have reached the environment."""
    last = index == len(episode["turns"]) - 1
    return not (last and episode.get("finish_reason") in ("length", "error") and not turn.get("observations"))


def environment_outputs(run_dir: Path, problems: list[str]) -> dict[History, str]:
    """``(task id, n, actions 1..n)`` → the environment's output after them (its first in this run), for every
    episode of the run (``problems`` gets a line for each row that is not JSON)."""
    outputs: dict[History, str] = {}
    for name in EPISODE_FILES:
        path = run_dir / name
        if not path.is_file():
            continue
        for _, episode in read_jsonl(path, problems):
            task, turns = episode.get("task_id"), episode.get("turns")
            if not isinstance(task, str) or not isinstance(turns, list):
                continue
            actions: list[Any] = []
            for i, turn in enumerate(turns):
                if not isinstance(turn, dict):
                    break
                actions.append({"content": turn.get("text"), "tool_calls": turn.get("tool_calls") or []})
                if not _stepped(episode, i, turn):
                    break
                output = _canonical({"observations": turn.get("observations") or [], "reward": turn.get("reward")})
                outputs.setdefault((task, len(actions), _canonical(actions)), output)
    return outputs


def _actions(n: int) -> str:
    return f"{n} action" if n == 1 else f"{n} actions"


def environment_differences(runs: list[tuple[str, Path]], problems: list[str] | None = None) -> list[str]:
    """One line per pair of runs and task where both ran the same action history and the environment answered it
    differently (at the shortest such history), at most :data:`MAX_LINES_PER_PAIR` per pair; none when they agree
    (or share no history)."""
    problems = problems if problems is not None else []
    seen = [(label, environment_outputs(path, problems)) for label, path in runs]
    lines: list[str] = []
    for i, (a, outputs_a) in enumerate(seen):
        for b, outputs_b in seen[i + 1:]:
            first: dict[str, int] = {}
            for history, output in outputs_a.items():
                other = outputs_b.get(history)
                task, n, _ = history
                if other is not None and other != output and n < first.get(task, n + 1):
                    first[task] = n
            found = [f"runs {a} and {b} saw different environment outputs for task {task} after {_actions(n)}"
                     for task, n in first.items()]
            lines += found[:MAX_LINES_PER_PAIR]
            if len(found) > MAX_LINES_PER_PAIR:
                lines.append(f"runs {a} and {b} saw different environment outputs for "
                             f"{len(found) - MAX_LINES_PER_PAIR} more tasks")
    return lines
