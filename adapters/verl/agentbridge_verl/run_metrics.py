"""veRL's own step metrics in agentbridge's run format: ``python -m agentbridge_verl.run_metrics RUN_DIR``.

The job turns on veRL's file logger (``trainer.logger`` includes ``file``; ``VERL_FILE_LOGGER_PATH`` is
``RUN_DIR/verl_metrics.jsonl``); after the trainer, ``launch.sh`` converts its rows to ``RUN_DIR/metrics.jsonl`` in the
normalized names every backend's run uses, so ``agentbridge report`` draws veRL runs beside TRL's. Names without a
normalized counterpart are kept under ``verl/``. Each row then goes to the plugins' ``on_metrics`` hook (the spec's
trackers only with ``--job``, which ``launch.sh`` does not pass: veRL's own ``trainer.logger`` writes to them). Every
metric here comes from a real (GPU) training step: veRL's trainer does not run on CPU.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from agentbridge.adapter import read_jsonl, write_jsonl
from agentbridge.adapter.training import feed_metrics, trainer_metrics_main

SOURCE = "verl_metrics.jsonl"
NORMALIZED = {
    "critic/score/mean": "reward/mean",  # the episode's reward, before any KL penalty
    "critic/score/max": "reward/max",
    "critic/score/min": "reward/min",
    "response_length/mean": "episode/response_tokens",
    "response_length/clip_ratio": "finish/length",
    "tool_call_counts/mean": "tools/calls",
    "timing_s/step": "time/step_s",
    "timing_s/gen": "time/rollout_s",
    "perf/throughput": "verl/throughput_per_gpu",  # veRL divides by the GPUs; the job's rate is computed below
    "perf/max_memory_allocated_gb": "memory/peak_gb",
    "actor/pg_loss": "verl/loss",
    "actor/pg_clipfrac": "verl/clip_fraction",
    "actor/kl_loss": "verl/kl",  # KL to the reference policy (use_kl_loss), as TRL's and OpenRLHF's kl
    "actor/ppo_kl": "verl/ppo_kl",  # between the rollout's (old) policy and the updated one: another quantity
    "actor/entropy": "verl/entropy",
    "actor/grad_norm": "verl/grad_norm",
    "actor/lr": "verl/lr",
    # importance sampling (agentbridge.runs.IS_METRIC_NAMES), with algorithm.rollout_correction: veRL 0.9.1's
    # trainer/ppo/rollout_corr_helper.py (compute_is_metrics, compute_offpolicy_metrics; prefix rollout_corr/)
    "rollout_corr/rollout_is_mean": "is/weight_mean",  # the applied (truncated or masked) weights' mean
    "rollout_corr/rollout_is_ratio_fraction_high": "is/capped_fraction",  # raw weight above the upper threshold
    "rollout_corr/kl": "is/mismatch_kl",  # mean of rollout - old log-prob
}


def normalize(step: int, data: dict[str, Any]) -> dict[str, float]:
    """One step's row: ``step``, the normalized names, then every other number under ``verl/``."""
    row: dict[str, float] = {"step": step}
    for name, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        row[NORMALIZED.get(name, f"verl/{name}")] = float(value)
    tokens, seconds = data.get("perf/total_num_tokens"), data.get("timing_s/step")
    if isinstance(tokens, int | float) and isinstance(seconds, int | float) and seconds > 0:
        row["throughput/tokens_per_s"] = float(tokens) / float(seconds)  # the whole job's, as other backends log
    return row


def rows(run_dir: Path, problems: list[str]) -> list[dict[str, float]]:
    """One row per step of veRL's file logger (``RUN_DIR/verl_metrics.jsonl``); one line per bad input line."""
    source = Path(run_dir) / SOURCE
    if not source.is_file():
        problems.append(f"{source}: missing (veRL's file logger did not run)")
        return []
    found = []
    for n, item in read_jsonl(source, problems):
        step, data = item.get("step"), item.get("data")
        if not isinstance(step, int) or not isinstance(data, dict):
            problems.append(f"{source}:{n}: not a veRL file-logger row ({{'step': int, 'data': {{...}}}})")
            continue
        found.append(normalize(step, data))
    return found


def convert(run_dir: Path, plugins: Any = None) -> tuple[int, list[str]]:
    """Write ``metrics.jsonl`` from veRL's file logger, then hand each row to ``plugins`` (when given); returns the
    rows written and one line per bad input line."""
    problems: list[str] = []
    found = rows(run_dir, problems)
    if (run_dir / SOURCE).is_file():
        write_jsonl(run_dir / "metrics.jsonl", found)
        if plugins is not None:
            feed_metrics(found, run_dir, plugins, None, problems)
    return len(found), problems


def main(argv: list[str] | None = None) -> int:
    return trainer_metrics_main(argv, rows, "veRL")


if __name__ == "__main__":
    sys.exit(main())
