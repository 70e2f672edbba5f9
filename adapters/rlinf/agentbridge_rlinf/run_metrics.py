"""RLinf's own step metrics in agentbridge's run format.

    python -m agentbridge_rlinf.run_metrics RUN_DIR [--job JOB]


RLinf 0.3.0's ``MetricLogger`` (``rlinf/utils/metric_logger.py``; ``runner.logger.logger_backends`` holds
``tensorboard`` by default) writes TensorBoard scalars to ``runner.logger.log_path/tensorboard``: the job's
``RUN_DIR/<experiment_name>/tensorboard``. ``AgentRunner.run`` logs each step at ``global_steps - 1`` (0-based): the
agent loop's metrics (agentbridge's episode names: ``episode/*``, ``tools/*``, ``reward/errors``, ``time/generate_s``,
``time/env_s``), its timers under ``time/``, the actor's rollout batch under ``rollout/`` and the update under
``train/``. After the trainer, ``launch.sh`` converts them to ``RUN_DIR/metrics.jsonl`` (step N: the N-th optimizer
step) in the normalized names every backend's run uses; names without a counterpart are kept under ``rlinf/``. Each
row then goes to the plugins' ``on_metrics`` hook and the spec's trackers.

RLinf 0.3.0 logs no row for the last step: ``AgentRunner.run`` returns at ``is_train_end`` before its logging, so a
run of N steps has rows 1 .. N-1 (the last step's model is saved all the same).
"""

from __future__ import annotations

import sys
from pathlib import Path

from agentbridge.adapter.training import tensorboard_rows, trainer_metrics_main

NORMALIZED = {  # RLinf's tag -> agentbridge's name
    "rollout/rewards": "reward/mean",  # the mean reward of the step's episodes (compute_rollout_metrics)
    "time/step": "time/step_s",
    "time/rollout": "time/rollout_s",
    "train/actor/policy_loss": "rlinf/loss",
    "train/actor/kl_loss": "rlinf/kl",  # KL to the reference model in the loss (algorithm.kl_beta)
    "train/actor/clip_fraction": "rlinf/clip_fraction",
    "train/actor/entropy_loss": "rlinf/entropy",
    "train/actor/grad_norm": "rlinf/grad_norm",
    "train/actor/lr": "rlinf/lr",
    # importance sampling (agentbridge.runs.IS_METRIC_NAMES): RLinf 0.3.0's FSDP actor
    # (workers/actor/fsdp_actor_worker.py compute_rollout_train_kl: mean |recomputed - rollout log-prob|)
    "train/actor/rollout_train_kl": "is/logp_abs_diff",
}
# the agent loop's metrics (agentbridge_rlinf.rollout: EPISODE_METRICS): agentbridge's names already
DRIVER = ("episode/", "tools/", "reward/", "time/generate_s", "time/env_s")


def rows(run_dir: Path, problems: list[str]) -> list[dict[str, float]]:
    """One row per step RLinf logged under ``run_dir/<experiment_name>/tensorboard`` (its ``log_path``)."""
    sources = sorted(p for p in Path(run_dir).glob("*/tensorboard") if p.is_dir())
    return tensorboard_rows(sources[-1] if sources else Path(run_dir) / "<experiment_name>" / "tensorboard", problems,
                            NORMALIZED, "rlinf", DRIVER)


def main(argv: list[str] | None = None) -> int:
    return trainer_metrics_main(argv, rows, "RLinf")


if __name__ == "__main__":
    sys.exit(main())
