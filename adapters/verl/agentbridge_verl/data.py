"""Tasks as veRL parquet rows (``prompt``, ``data_source``, ``reward_model``, ``extra_info``, ``agent_name``).

The agent loop rebuilds the task from ``extra_info["agentbridge_task"]`` (a JSON string: task data varies per
environment, and pyarrow cannot store empty structs) and lets agentbridge's environment render the real prompt.
``prompt`` still holds the chat messages, so veRL's dataset, its length checks and its logs see real text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentbridge import Task
from agentbridge import adapter as kit
from agentbridge.adapter.rollout import prompt_messages
from agentbridge.spec.schema import Spec
from agentbridge_verl.config import AGENT_NAME


def task_row(task: Task, index: int, split: str, spec: Spec) -> dict[str, Any]:
    """One parquet row for ``task``."""
    answer = task.data.get("answer", "")
    truth = answer if isinstance(answer, str) else json.dumps(answer)
    return {
        "data_source": f"agentbridge/{spec.environment.id}",
        "prompt": prompt_messages(spec.agent.system_prompt, task.prompt),
        "ability": "agent",
        "reward_model": {"style": "agentbridge", "ground_truth": truth},
        "extra_info": {"index": index, "split": split, kit.TASK_KEY: kit.encode_task(task)},
        "agent_name": AGENT_NAME,
    }


def write_parquet(path: Path, tasks: list[Task], split: str, spec: Spec) -> int:
    """Write ``tasks`` to ``path``; returns the row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [task_row(t, i, split, spec) for i, t in enumerate(tasks)]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return len(rows)
