"""The per-run metrics logger: one ``metrics.jsonl`` row per training step in the normalized names,
``episodes.jsonl`` summaries, and every row handed to the ``on_metrics`` hook."""

from __future__ import annotations

import dataclasses
import resource
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentbridge.rollout.agent_edge import ErrorRateGuard
from agentbridge.runs import append_jsonl, batch_metrics
from agentbridge.training.guards import RewardFailureGuard
from agentbridge.trajectory import Trajectory

EPISODES_WITH_TOKENS_PER_STEP = 2  # full token-level trajectories kept per step in episodes.jsonl


def peak_memory_gb() -> float:
    """Peak accelerator memory when CUDA is in use, else the process's peak resident memory."""
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.max_memory_allocated() / 1e9
    except ImportError:
        pass
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / (1e9 if sys.platform == "darwin" else 1e6)


class RunLogger:
    """Collects each step's trajectories; ``log(step, backend_logs)`` writes the step's rows.

    Backend metrics (loss, KL, grad norm, ...) are kept under ``<prefix>/<name>``; ``on_row`` sees each row (a
    progress display), and the plugins' ``on_metrics`` hook receives it.

    With several processes, every rank logs each step and ``gather(obj)`` (a collective returning every rank's
    ``obj``) brings all ranks' episodes to each; only the ``main`` one writes rows and calls ``on_row`` and the hook.

    Each batch of episodes is checked as it comes: past ``max_error_rate`` of failed episodes, or a reward (of
    ``rewards``, default every component the episodes carry) that raised on all of them, stops the run.
    """

    def __init__(self, run_dir: Path, *, prefix: str, on_row: Callable[[dict[str, float]], None] | None = None,
                 plugins: Any = None, max_error_rate: float = 1.0,
                 gather: Callable[[Any], list[Any]] | None = None, main: bool = True,
                 rewards: Sequence[str] | None = None) -> None:
        self.run_dir = run_dir
        self.prefix = prefix
        self.pending: list[Trajectory] = []
        self.rollout_s = 0.0
        self.step_started = time.perf_counter()
        self.on_row = on_row
        self.plugins = plugins
        self.rows: list[dict[str, float]] = []
        self.errors = ErrorRateGuard(max_error_rate)
        self.reward_failures = RewardFailureGuard(rewards)
        self.gather = gather
        self.main = main

    def add_batch(self, trajs: list[Trajectory], rollout_s: float) -> None:
        """Keep a batch's episodes for the step's row; raises ``TooManyErrors`` past ``max_error_rate``, and
        ``RewardAlwaysFails`` when a reward raised on every scored episode of the batch."""
        for t in trajs:
            self.errors.record(t)
        self.reward_failures.check(trajs)
        self.pending += trajs
        self.rollout_s += rollout_s

    def log(self, step: int, backend_logs: dict[str, Any],
            names: Mapping[str, str] | None = None) -> dict[str, float] | None:
        """Write the row of ``step`` from the episodes collected since the last row (of every rank); None when there
        were none, and on every rank but the main one. A backend metric in ``names`` (the backend's name ->
        agentbridge's, e.g. ``agentbridge.runs.IS_METRIC_NAMES``) is written under agentbridge's name instead of
        ``<prefix>/<name>``."""
        if self.gather is None and not self.pending:
            return None
        trajs, self.pending = self.pending, []
        rollout_s, self.rollout_s = self.rollout_s, 0.0
        memory = peak_memory_gb()
        if self.gather is not None:  # every rank logs every step: all of them reach this collective
            parts = self.gather(([_shareable(t) for t in trajs], rollout_s, memory))
            trajs = [t for part, _, _ in parts for t in part]
            rollout_s, memory = max(p[1] for p in parts), max(p[2] for p in parts)
        if not self.main or not trajs:
            return None
        step_s = time.perf_counter() - self.step_started
        self.step_started = time.perf_counter()
        tokens = sum(len(t.response_ids) + len(t.prompt_ids) for t in trajs)
        row: dict[str, float] = {"step": step, **batch_metrics(trajs)}
        row.update({
            "time/step_s": step_s,
            "time/rollout_s": rollout_s,
            "time/generate_s": sum(t.metrics.get("time/generate_s", 0.0) for t in trajs) / len(trajs),
            "time/env_s": sum(t.metrics.get("time/env_s", 0.0) for t in trajs) / len(trajs),
            "throughput/tokens_per_s": tokens / step_s if step_s > 0 else 0.0,
            "memory/peak_gb": memory,
        })
        row.update({(names or {}).get(k) or f"{self.prefix}/{k}": float(v) for k, v in backend_logs.items()
                    if isinstance(v, int | float) and not isinstance(v, bool)})
        append_jsonl(self.run_dir / "metrics.jsonl", row)
        for i, t in enumerate(trajs):
            append_jsonl(self.run_dir / "episodes.jsonl",
                         {"step": step, **t.to_dict(tokens=i < EPISODES_WITH_TOKENS_PER_STEP)})
        self.rows.append(row)
        if self.plugins is not None:
            self.plugins.hook.on_metrics(step=step, metrics=row, run=self.run_dir)
        if self.on_row is not None:
            self.on_row(row)
        return row


def _shareable(traj: Trajectory) -> Trajectory:
    """``traj`` as sent to the main process: images become placeholders (their count is what a row keeps) and the
    messages, which the records drop, are left out."""
    return dataclasses.replace(traj, images=[None] * len(traj.images), messages=[])
