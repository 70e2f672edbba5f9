"""Tasks as rows of slime's prompt dataset (``--prompt-data``, JSON lines): ``prompt``, ``label`` and ``metadata``.

slime's ``Dataset`` renders ``prompt`` (the chat messages) with the model's chat template (``--apply-chat-template``)
and copies each row's ``metadata`` onto its ``Sample``; the ``agentbridge_task`` key there carries the task as JSON,
from which the generate function rebuilds the task and lets agentbridge's environment render the real prompt.
"""

from __future__ import annotations

from typing import Any

from agentbridge import Task
from agentbridge import adapter as kit
from agentbridge.adapter.rollout import prompt_messages
from agentbridge.spec.schema import Spec


def task_row(task: Task, spec: Spec) -> dict[str, Any]:
    """One dataset row for ``task`` (``label`` is the task id: slime only logs it)."""
    return {"prompt": prompt_messages(spec.agent.system_prompt, task.prompt), "label": task.id,
            "metadata": {kit.TASK_KEY: kit.encode_task(task)}}
