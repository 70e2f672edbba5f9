"""A verifiers taskset's rows as agentbridge tasks: ``verifiers/tasks``.

Splits: with ``select`` (verifiers' own ``SelectConfig``: ``include``/``exclude`` by ``idx``, ``ids``, ``names``;
``shuffle``, ``skip``, ``limit``), the split is exactly that view, and keeping splits apart is the spec's doing.
Without it the rows are held out by position: ``idx % 10 == 9`` is eval, ``== 8`` dev, the rest train. Either way a
split's rows are shuffled with the seed and the first ``size`` are its tasks. An infinite taskset is read up to
``max_rows`` rows.
"""

from __future__ import annotations

from typing import Any

from agentbridge import Task, capacity_line, declares_capacity
from agentbridge_verifiers.client import Connection, server_info, server_url

SPLITS = ("train", "dev", "eval", "test")


def _rows(split: str, size: int | None, seed: int, select: dict[str, Any] | None, holdout: bool, max_rows: int,
          env_args: dict[str, Any]) -> dict[str, Any]:
    if split not in SPLITS:
        raise ValueError(f"split must be train, dev or eval, got {split!r}")
    connection = Connection(server_url(env_args), 600.0)
    try:
        return connection.request("POST", "/tasks", {"split": split, "size": size, "seed": seed, "select": select,
                                                     "holdout": holdout, "max_rows": max_rows})
    finally:
        connection.close()


def verifiers_capacity(split: str = "train", seed: int = 0, select: dict[str, Any] | None = None,
                       holdout: bool = True, max_rows: int = 100_000, **env_args: Any) -> int:
    """How many rows ``split`` has (asked of the verifiers server)."""
    return int(_rows(split, 0, seed, select, holdout, max_rows, env_args)["count"])


@declares_capacity(verifiers_capacity)
def verifiers_tasks(split: str = "train", size: int = 100, seed: int = 0, select: dict[str, Any] | None = None,
                    holdout: bool = True, max_rows: int = 100_000, **env_args: Any) -> list[Task]:
    """``size`` rows of the taskset's ``split`` (the environment's own arguments in ``env_args``: ``taskset``,
    ``env``, ... as ``verifiers/env`` takes them, so both reach the same server). Each task carries the verifiers
    task's data (``data["verifiers"]``), its content key, its task type as the group and the rewards its task
    class declares with their weights (``data["rewards"]``: ``verifiers/rubric`` gives each a component even in an
    episode verifiers did not score)."""
    reply = _rows(split, size, seed, select, holdout, max_rows, env_args)
    declared = server_info(server_url(env_args))["rewards"]
    if size > reply["count"]:
        raise ValueError(capacity_line("verifiers/tasks", reply["count"], split, size, f"seed={seed}"))
    tasks = []
    for row in reply["tasks"]:
        name = row.get("name") or row["data"].get("id") or f"row-{row['idx']}"
        tasks.append(Task(id=f"{name}#{row['idx']}", prompt=str(row.get("prompt") or ""),
                          data={"verifiers": row["data"], "key": row["key"], "group": row["type"],
                                "rewards": declared}))
    return tasks
