"""Stand-in for a GPU trainer's program (veRL's ``main_ppo``, OpenRLHF's ``train_ppo_ray``), which cannot run on a
CPU: it records its argv and saves the model it was given where that trainer saves its trained HF model, so the
launch script's phases around it (prepare before, finish after) run for real. It logs its steps where the trainer
would, for the launch script's conversion to ``metrics.jsonl``: as OpenRLHF, two steps to TensorBoard
(``<--logger.tensorboard_dir>/<run name>``, tags ``train/<key>``); as veRL, three rows of its file logger
(``$VERL_FILE_LOGGER_PATH``, ``{"step": N, "data": {...}}``).

    python trainer_standin.py verl|openrlhf ARGS...
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from datetime import datetime
from pathlib import Path

# a few of the keys OpenRLHF 0.11.2's PPO trainer logs each step (its trainer's stats, the actor's, the executor's)
OPENRLHF_STEP = {"rollout/reward_mean": 0.5, "rollout/reward_std": 0.1, "timing/generation": 2.0,
                 "timing/step_total": 4.0, "policy_loss": -0.01, "actor_lr": 1e-6, "episode/response_tokens": 30.0}


def log_openrlhf_steps(tensorboard_dir: str) -> None:
    from torch.utils.tensorboard import SummaryWriter

    run_name = f"ppo_{datetime.now():%m%dT%H:%M}"  # OpenRLHF's default --logger.wandb.run_name
    with SummaryWriter(log_dir=os.path.join(tensorboard_dir, run_name)) as writer:
        for step in (1, 2):
            for key, value in OPENRLHF_STEP.items():
                writer.add_scalar(f"train/{key}", value, step)


# a few of the keys veRL 0.9.1's trainer logs each step (compute_data_metrics, timing, perf, the actor update)
VERL_STEP = {"critic/score/mean": 0.4, "response_length/mean": 40.0, "timing_s/step": 6.0,
             "perf/total_num_tokens": 3000, "perf/max_memory_allocated_gb": 3.5, "actor/kl_loss": 0.002,
             "actor/entropy": 1.2}


def log_verl_steps(path: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        for step in (1, 2, 3):
            f.write(json.dumps({"step": step, "data": {**VERL_STEP, "critic/score/mean": 0.4 + 0.1 * step}}) + "\n")


def main(argv: list[str]) -> None:
    backend, args = argv[0], argv[1:]
    Path(os.environ["STANDIN_RECORD"]).write_text(json.dumps(args))
    if backend == "openrlhf":
        model, out = args[args.index("--actor.model_name_or_path") + 1], args[args.index("--ckpt.output_dir") + 1]
        shutil.copytree(model, out)
        log_openrlhf_steps(args[args.index("--logger.tensorboard_dir") + 1])
        return
    values = dict(a.split("=", 1) for a in args if "=" in a and not a.startswith("-"))
    checkpoints = Path(values["trainer.default_local_dir"])
    shutil.copytree(values["actor_rollout_ref.model.path"], checkpoints / "global_step_3" / "actor" / "huggingface")
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("3")
    log_verl_steps(os.environ["VERL_FILE_LOGGER_PATH"])


if __name__ == "__main__":
    main(sys.argv[1:])
