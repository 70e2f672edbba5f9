"""Stand-in for a GPU trainer's program (veRL's ``main_ppo``, OpenRLHF's ``train_ppo_ray``, the RLinf and ROLL jobs'
``entry.py``, slime's ``train.py``), which cannot run on a CPU: it records its argv and saves the model it was given
where that trainer saves its trained model, so the launch script's phases around it (prepare before, finish after)
run for real. It logs its steps where the trainer would, for the launch script's conversion to ``metrics.jsonl``: as
OpenRLHF, two steps to TensorBoard (``<--logger.tensorboard_dir>/<run name>``, tags ``train/<key>``); as veRL, three
rows of its file logger (``$VERL_FILE_LOGGER_PATH``, ``{"step": N, "data": {...}}``); as RLinf, ROLL and slime, two,
three and two steps to TensorBoard (0-based, as they log them) in their folders and tags.

    python trainer_standin.py verl|openrlhf|rlinf|roll|slime ARGS...
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


def log_tensorboard(log_dir: Path, steps: dict[int, dict[str, float]]) -> None:
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(log_dir)) as writer:
        for step, values in steps.items():
            for key, value in values.items():
                writer.add_scalar(key, value, step)


# a few of the keys each logs per step: RLinf 0.3.0's AgentRunner (the agent loop's, time/, rollout/, train/), ROLL's
# AgenticPipeline (its tracker strips the @reducer tags), slime's rollout manager and actors (rollout/, perf/, train/)
RLINF_STEP = {"rollout/rewards": 0.25, "time/step": 5.0, "train/actor/policy_loss": -0.02, "episode/turns": 2.0}
ROLL_STEP = {"critic/score/mean": 0.3, "time/step_total": 7.0, "actor/pg_loss": 0.01,
             "tokens/response_length/mean": 50.0}
SLIME_STEP = {"rollout/raw_reward": 0.35, "perf/step_time": 8.0, "train/pg_loss": 0.03, "train/grad_norm": 0.5}


def save_hf(model: str, out: Path) -> None:
    """``model`` (a Hugging Face model directory) as the trained model at ``out``."""
    shutil.copytree(model, out, dirs_exist_ok=True)


def rlinf(args: list[str]) -> None:
    """RLinf's FSDP actor checkpoint (``global_step_N/actor/model_state_dict/full_weights.pt``: the full state dict),
    no HF model: launch.sh exports it. N-1 of N steps logged (RLinf logs no row for its last step)."""
    import torch
    import yaml
    from transformers import AutoModelForCausalLM

    values = dict(a.split("=", 1) for a in args if "=" in a and not a.startswith("-"))
    config = yaml.safe_load((Path(args[args.index("--config-path") + 1]) / "rlinf_job.yaml").read_text())
    log_dir = Path(values["runner.output_dir"]) / config["runner"]["experiment_name"]
    weights = log_dir / "checkpoints" / "global_step_3" / "actor" / "model_state_dict" / "full_weights.pt"
    weights.parent.mkdir(parents=True)
    torch.save(AutoModelForCausalLM.from_pretrained(values["rollout.model.model_path"]).state_dict(), weights)
    log_tensorboard(log_dir / "tensorboard", {0: RLINF_STEP, 1: {**RLINF_STEP, "rollout/rewards": 0.5}})


def roll(args: list[str]) -> None:
    """ROLL's checkpoint-N (the actor's HF model at its top, the pipeline state in pipeline/), its tracker's steps."""
    values = dict(a.split("=", 1) for a in args if "=" in a and not a.startswith("-"))
    out = Path(values["output_dir"])
    save_hf(values["pretrain"], out / "checkpoints" / "checkpoint-2")
    (out / "checkpoints" / "checkpoint-2" / "pipeline").mkdir()
    log_tensorboard(out / "tensorboard" / "roll", {step: {**ROLL_STEP, "critic/score/mean": 0.3 + 0.1 * step}
                                                   for step in (0, 1, 2)})


def slime(args: list[str]) -> None:
    """slime's Megatron checkpoint tracker in --save, the last rollout's --save-hf model, TensorBoard scalars in
    $TENSORBOARD_DIR."""
    def flag(name: str) -> str:
        return args[args.index(name) + 1]

    last = int(flag("--num-rollout")) - 1
    save_hf(flag("--hf-checkpoint"), Path(flag("--save-hf").format(rollout_id=last)))
    Path(flag("--save")).mkdir(parents=True, exist_ok=True)
    (Path(flag("--save")) / "latest_checkpointed_iteration.txt").write_text(str(last))
    log_tensorboard(Path(os.environ["TENSORBOARD_DIR"]), {0: SLIME_STEP, 1: {**SLIME_STEP, "rollout/raw_reward": 0.45}})


def main(argv: list[str]) -> None:
    backend, args = argv[0], argv[1:]
    Path(os.environ["STANDIN_RECORD"]).write_text(json.dumps(args))
    if backend in ("rlinf", "roll", "slime"):
        {"rlinf": rlinf, "roll": roll, "slime": slime}[backend](args)
        return
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
