"""Tasks as rows of RLinf's reasoning dataset (``data.type: math``): JSON lines with ``prompt`` and the task.

RLinf's ``ReasoningDataset`` renders ``prompt`` (the chat messages) with the model's chat template
(``data.apply_chat_template``) and hands each row's ``data.answer_key`` column to the agent loop as the request's
answer: that column carries the task as a JSON string, from which the agent loop rebuilds the task and lets
agentbridge's environment render the real prompt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentbridge.env import Task
from agentbridge.rollout.agent_edge import prompt_messages
from agentbridge.spec.schema import Spec
from agentbridge_rlinf.config import TASK_KEY


def task_row(task: Task, spec: Spec) -> dict[str, Any]:
    """One dataset row for ``task``."""
    return {"prompt": prompt_messages(spec.agent.system_prompt, task.prompt),
            TASK_KEY: json.dumps(task.to_dict())}


def task_from_answer(answer: Any) -> Task:
    """The task a request's answer carries (RLinf wraps a string answer in a list); one clear line otherwise."""
    raw = answer[0] if isinstance(answer, (list, tuple)) and answer else answer
    try:
        data = json.loads(raw) if isinstance(raw, str) else None
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or "id" not in data:
        raise ValueError(f"an RLinf request's answer carries no agentbridge task (data.answer_key {TASK_KEY}); "
                         "compile the data with `agentbridge compile --backend rlinf`")
    return Task.from_dict(data)


def write_jsonl(path: Path, tasks: Sequence[Task], spec: Spec) -> int:
    """Write ``tasks`` to ``path``; returns the row count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for task in tasks:
            f.write(json.dumps(task_row(task, spec)) + "\n")
    return len(tasks)
