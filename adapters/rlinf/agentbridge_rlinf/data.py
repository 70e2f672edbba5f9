"""Tasks as rows of RLinf's reasoning dataset (``data.type: math``): JSON lines with ``prompt`` and the task.

RLinf's ``ReasoningDataset`` renders ``prompt`` (the chat messages) with the model's chat template
(``data.apply_chat_template``) and hands each row's ``data.answer_key`` column to the agent loop as the request's
answer: that column carries the task as a JSON string, from which the agent loop rebuilds the task and lets
agentbridge's environment render the real prompt.
"""

from __future__ import annotations

from typing import Any

from agentbridge import Task
from agentbridge import adapter as kit
from agentbridge.adapter.rollout import prompt_messages
from agentbridge.spec.schema import Spec


def task_row(task: Task, spec: Spec) -> dict[str, Any]:
    """One dataset row for ``task``."""
    return {"prompt": prompt_messages(spec.agent.system_prompt, task.prompt), kit.TASK_KEY: kit.encode_task(task)}
