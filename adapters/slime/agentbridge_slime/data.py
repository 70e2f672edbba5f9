"""Tasks as rows of slime's prompt dataset (``--prompt-data``, JSON lines): ``prompt``, ``label`` and ``metadata``.

slime's ``Dataset`` renders ``prompt`` (the chat messages) with the model's chat template (``--apply-chat-template``)
and copies each row's ``metadata`` onto its ``Sample``; the ``agentbridge_task`` key there carries the task as JSON,
from which the generate function rebuilds the task and lets agentbridge's environment render the real prompt.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentbridge.env import Task
from agentbridge.rollout.agent_edge import prompt_messages
from agentbridge.spec.schema import Spec
from agentbridge_slime.config import TASK_KEY


def task_row(task: Task, spec: Spec) -> dict[str, Any]:
    """One dataset row for ``task`` (``label`` is the task id: slime only logs it)."""
    return {"prompt": prompt_messages(spec.agent.system_prompt, task.prompt), "label": task.id,
            "metadata": {TASK_KEY: json.dumps(task.to_dict())}}


def task_from_metadata(metadata: Mapping[str, Any] | None) -> Task:
    """The task a sample's metadata carries; one clear line otherwise."""
    raw = (metadata or {}).get(TASK_KEY)
    try:
        data = json.loads(raw) if isinstance(raw, str) else None
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or "id" not in data:
        raise ValueError(f"a slime sample's metadata carries no agentbridge task ({TASK_KEY}); compile the data with "
                         "`agentbridge compile --backend slime`")
    return Task.from_dict(data)


def write_jsonl(path: Path, tasks: Sequence[Task], spec: Spec) -> int:
    """Write ``tasks`` to ``path``; returns the row count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for task in tasks:
            f.write(json.dumps(task_row(task, spec)) + "\n")
    return len(tasks)
