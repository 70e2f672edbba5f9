"""The task codec every adapter writes its job's data with and its policy adapter reads tasks back with: the task
as one JSON string under :data:`TASK_KEY`, wherever the backend's dataset row keeps it (rows are written with
``agentbridge.runs.write_jsonl``)."""

from __future__ import annotations

import json
from typing import Any

from agentbridge.env import Task

TASK_KEY = "agentbridge_task"  # the key (column, metadata key, answer field) carrying each task as a JSON string


def encode_task(task: Task) -> str:
    """The task as the JSON string a dataset row carries."""
    return json.dumps(task.to_dict())


def decode_task(raw: Any, backend: str) -> Task:
    """The task a dataset row carried (a JSON string, or a one-element list of one, as some backends wrap a string
    field); one line naming how to compile the data otherwise."""
    if isinstance(raw, (list, tuple)) and len(raw) == 1:
        raw = raw[0]
    try:
        data = json.loads(raw) if isinstance(raw, str) else None
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or "id" not in data:
        raise ValueError(f"a {backend} dataset row carries no agentbridge task ({TASK_KEY}); compile the data with "
                         f"`agentbridge compile --backend {backend}`")
    return Task.from_dict(data)

