"""slime's own step metrics in agentbridge's run format.

    python -m agentbridge_slime.run_metrics RUN_DIR [--job JOB]


The job passes ``--use-tensorboard`` and ``launch.sh`` exports ``TENSORBOARD_DIR=RUN_DIR/tensorboard/slime``: slime's
``logging_utils.log`` writes every tracked dict there (``tensorboard_utils._TensorboardAdapter``, one writer per
process: the rollout manager's and the training actors'). Per rollout (``compute_rollout_step``: the rollout id,
0-based): the rollout manager's ``rollout/*`` and ``perf/*`` (``rollout_metrics.log_rollout_data``), the actor's
``rollout/*`` of the training batch (``train_metric_utils.log_rollout_data``: ``rollout/raw_reward`` is the mean of the
driver's rewards) and ``perf/*`` timers; per optimizer step ``train/*`` at ``train/step`` (the rollout id too: the job
makes one optimizer step per rollout). After the trainer, ``launch.sh`` converts them to ``RUN_DIR/metrics.jsonl``
(step N: the N-th rollout) in the normalized names every backend's run uses; the others are kept under ``slime/``.
Each row then goes to the plugins' ``on_metrics`` hook and the spec's trackers.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agentbridge.adapter.training import tensorboard_metrics

SOURCE = Path("tensorboard") / "slime"
NORMALIZED = {  # slime's tag -> agentbridge's name
    "rollout/raw_reward": "reward/mean",  # the samples' rewards before slime's group normalisation
    "rollout/response_lengths": "episode/response_tokens",
    "rollout/truncated_ratio": "finish/length",
    "perf/rollout_time": "time/rollout_s",
    "perf/step_time": "time/step_s",  # the actor's wait for the rollout plus its training
    "train/pg_loss": "slime/loss",
    "train/kl_loss": "slime/kl",  # KL to the reference model in the loss (--use-kl-loss)
    "train/pg_clipfrac": "slime/clip_fraction",
    "train/entropy_loss": "slime/entropy",
    "train/grad_norm": "slime/grad_norm",
    "train/lr-pg_0": "slime/lr",
    # importance sampling (agentbridge.runs.IS_METRIC_NAMES): slime's backends/megatron_utils/loss.py
    # (policy_loss_function; vanilla_tis_function and icepop_function for --use-tis) and its MIS helper
    # (examples/train_infer_mismatch_helper/mis.py, keys prefixed mis_)
    "train/tis": "is/ratio_mean",  # exp(old - rollout log-prob) per token, before --tis-clip
    "train/tis_clipfrac": "is/capped_fraction",  # tokens truncated (TIS) or zeroed (IcePop)
    "train/mis_tis_truncate_fraction": "is/capped_fraction",  # MIS truncate: weights above tis_upper_bound
    "train/mis_tis_mask_fraction_high": "is/capped_fraction",  # MIS mask: weights above tis_upper_bound
    "train/mis_kl": "is/mismatch_kl",  # MIS: mean of rollout - train log-prob
    "train/train_rollout_logprob_abs_diff": "is/logp_abs_diff",  # mean |old - rollout log-prob|
}


# rows(run_dir, problems): one row per rollout slime logged under ``run_dir/tensorboard/slime``; main: the command line
rows, main = tensorboard_metrics(SOURCE, NORMALIZED, "slime", "slime")


if __name__ == "__main__":
    sys.exit(main())
