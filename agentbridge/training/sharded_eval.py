"""Held-out evaluation on every device of the trainer's node: the tasks split into one shard per device.

The experiment's phases around a backend's trainer (:mod:`agentbridge.training.phases`) evaluate a model the
trainer's GPUs hold next (or just held). On one device that is :func:`~agentbridge.training.evaluate.evaluate`;
on several, shard ``i`` of ``n`` takes tasks ``i, i + n, i + 2n, ...``: shard 0 runs in this process on its
model, every other shard in a process of its own (``spawn``) that loads the same model onto its device. The
shards' results are merged back into task order, so ``eval.json`` and the per-task scores read as one evaluation.

The devices: ``AGENTBRIDGE_EVAL_DEVICES`` (comma-separated torch devices, e.g. ``cuda:0,cuda:1`` or ``cpu,cpu``)
when set, else the visible GPUs up to the spec's ``resources.gpus_per_node``, else the CPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from agentbridge.env import Task
from agentbridge.rollout.agent import Agent
from agentbridge.training.evaluate import EvalResult, evaluate

DEVICES_ENV = "AGENTBRIDGE_EVAL_DEVICES"
T = TypeVar("T")


def eval_devices(gpus_per_node: int) -> list[str]:
    """The devices held-out evaluation runs on: ``$AGENTBRIDGE_EVAL_DEVICES``, else ``cuda:0 .. cuda:k-1`` for the
    ``k = min(visible GPUs, gpus_per_node)`` GPUs of this node (at least one when any is visible), else ``cpu``."""
    named = [d.strip() for d in os.environ.get(DEVICES_ENV, "").split(",") if d.strip()]
    if named:
        return named
    import torch

    if not torch.cuda.is_available():
        return ["cpu"]
    return [f"cuda:{i}" for i in range(max(1, min(torch.cuda.device_count(), gpus_per_node)))]


def shard(items: Sequence[T], index: int, count: int) -> list[T]:
    """Shard ``index`` of ``count``: items ``index, index + count, ...``."""
    return list(items[index::count])


def merge(parts: Sequence[EvalResult]) -> EvalResult:
    """The shards' results (shard ``i`` holding tasks ``i, i + n, ...``) as one result in task order."""
    count, total = len(parts), sum(p.n for p in parts)

    def interleave(lists: Sequence[Sequence[Any]]) -> list[Any]:
        return [lists[j % count][j // count] for j in range(total)]

    first = parts[0]
    return EvalResult(
        metric=first.metric, task_ids=interleave([p.task_ids for p in parts]),
        scores=interleave([p.scores for p in parts]),
        finish={r: sum(p.finish.get(r, 0) for p in parts) for r in first.finish},
        seconds=max(p.seconds for p in parts), groups=interleave([p.groups for p in parts]),
        components={c: interleave([p.components[c] for p in parts]) for c in first.components})


@dataclass
class ShardedEval:
    """Evaluates the job's held-out tasks on ``devices``: shard 0 in this process on the model it holds, the
    others in processes of their own, each loading ``source`` (a model path or directory, as
    :func:`agentbridge.models.load_model` takes it, with ``seed``) and the job's spec (``spec_path``)."""

    devices: list[str]
    spec_path: Path

    @property
    def label(self) -> str:
        """How the evaluation is spread, for the console ("" on one device)."""
        return f"{len(self.devices)} shards: {', '.join(self.devices)}" if len(self.devices) > 1 else ""

    def __call__(self, agent: Agent, model: Any, tasks: list[Task], source: str | None, seed: int = 0) -> EvalResult:
        """``tasks``: the job's ``agent.tasks("eval")``, which each shard's process loads again."""
        count = min(len(self.devices), max(1, len(tasks)))
        if count == 1:
            return evaluate(agent, model, tasks)
        if source is None:
            raise ValueError("a held-out evaluation on several devices needs the directory its weights load from")
        import multiprocessing

        context = multiprocessing.get_context("spawn")  # CUDA cannot be used in a forked process
        ids = [t.id for t in tasks]
        with ProcessPoolExecutor(max_workers=count - 1, mp_context=context) as pool:
            others = [pool.submit(evaluate_shard, str(self.spec_path), source, seed, self.devices[i],
                                  shard(ids, i, count), i, count) for i in range(1, count)]
            mine = evaluate(agent, model, shard(tasks, 0, count))
            return merge([mine, *(f.result() for f in others)])


@dataclass
class GatheredEval:
    """Evaluates over the processes of a distributed trainer that each hold the same weights: process ``index`` of
    ``count`` takes its shard of the tasks, ``gather`` (called by every process, returning every process's part in
    process order) brings the parts together, and every process gets the merged result."""

    index: int
    count: int
    gather: Callable[[EvalResult], list[EvalResult]]

    @property
    def label(self) -> str:
        return f"{self.count} shards: one per process" if self.count > 1 else ""

    def __call__(self, agent: Agent, model: Any, tasks: list[Task], source: str | None = None,
                 seed: int = 0) -> EvalResult:
        if self.count == 1:
            return evaluate(agent, model, tasks)
        return merge(self.gather(evaluate(agent, model, shard(tasks, self.index, self.count))))


def evaluate_shard(spec_path: str, source: str, seed: int, device: str, ids: list[str], index: int,
                   count: int) -> EvalResult:
    """Shard ``index`` of ``count`` in a process of its own: the job's agent and held-out tasks, ``source`` loaded
    onto ``device``, greedy episodes of the shard's tasks (``ids``: what the parent holds there, checked)."""
    from agentbridge.models import load_model
    from agentbridge.spec import load_spec
    from agentbridge.training.console import quiet_libraries

    quiet_libraries()
    agent = Agent.from_spec(load_spec(spec_path))
    tasks = shard(agent.tasks("eval"), index, count)
    if [t.id for t in tasks] != ids:
        raise ValueError(f"{spec_path}: the held-out tasks loaded in shard {index} differ from the parent's")
    model = load_model(source, seed=seed).to(device)
    return evaluate(agent, model, tasks)
