"""ROLL's own step metrics in agentbridge's run format.

    python -m agentbridge_roll.run_metrics RUN_DIR [--job JOB]


The job tracks with ROLL's ``TensorBoardTracker`` (``roll/utils/tracking.py``; ``track_with: tensorboard``,
``tracker_kwargs.log_dir``: ``RUN_DIR/tensorboard/roll``). ``AgenticPipeline.run`` logs each step's metrics there at
its ``global_step`` (0-based), the reducer tags (``@sum``, ``@mean``) stripped: the batch's ``critic/score/*`` (the
driver's episode rewards), ``tokens/*``, the actor's ``actor/*``, its timers under ``time/`` and ``system/tps``. A
resumed pipeline logs its saved history again (``BasePipeline.__init__``: ``resume_metrics``), the same values at
the same steps. After the trainer, ``launch.sh`` converts them to ``RUN_DIR/metrics.jsonl`` (step N: the N-th
optimizer step) in the normalized names every backend's run uses; the others are kept under ``roll/``. Each row then
goes to the plugins' ``on_metrics`` hook and the spec's trackers.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agentbridge.adapter.training import tensorboard_metrics

SOURCE = Path("tensorboard") / "roll"
NORMALIZED = {  # ROLL's tag -> agentbridge's name
    "critic/score/mean": "reward/mean",  # the episodes' rewards (the layout's scores), before normalisation
    "critic/score/max": "reward/max",
    "critic/score/min": "reward/min",
    "tokens/response_length/mean": "episode/response_tokens",
    "time/step_total": "time/step_s",
    "time/step_rollout": "time/rollout_s",
    "system/tps": "throughput/tokens_per_s",
    "actor/pg_loss": "roll/loss",
    "actor/kl_loss": "roll/kl",  # KL to the reference model in the loss (use_kl_loss)
    "actor/clipfrac": "roll/clip_fraction",
    "actor/lr": "roll/lr",
    # importance sampling (agentbridge.runs.IS_METRIC_NAMES): ROLL's roll/utils/train_infer_corrections.py
    # (compute_train_infer_correction; its @sum reducer tag stripped by the tracker)
    "actor/train_infer_ratio_token_mean": "is/ratio_mean",  # exp(old - infer log-prob) per token, before the cap
    "actor/is_weight_clipfrac": "is/capped_fraction",  # weights above is_weight.upper_bound (truncation)
}


# rows(run_dir, problems): one row per step ROLL's tracker logged under ``run_dir/tensorboard/roll``; main: the
# command line
rows, main = tensorboard_metrics(SOURCE, NORMALIZED, "roll", "ROLL")


if __name__ == "__main__":
    sys.exit(main())
