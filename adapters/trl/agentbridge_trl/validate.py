"""Validate a compiled TRL job in the TRL environment: every problem is one line, nothing is trained.

Run in the TRL environment: ``python -m agentbridge_trl.validate JOB [--json]``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import patch

from agentbridge import adapter as kit
from agentbridge.adapter import Problem
from agentbridge.spec import Spec, recipe

LOSS_AGGREGATION = {"grpo": "seq-mean-token-mean", "dapo": "token-mean", "bnpo": "token-mean over the local batch",
                    "dr_grpo": "seq-mean-token-sum-norm (max_completion_length)"}


def semantics_of(config: Any, spec: Any = None) -> dict[str, str]:
    """What TRL will do, read from the built GRPOConfig (and, with the job's ``spec``, the PEFT ``LoraConfig`` the
    trainer gets and the overlong shaping of agentbridge's rollout): the aspects of ``agentbridge.compare.semantics``,
    in their shared words, then `` · `` and TRL's own names."""
    c = config
    norm = {"group": ", / group std", "batch": ", / batch std"}.get(str(c.scale_rewards), ", no std")
    high = c.epsilon_high if c.epsilon_high is not None else c.epsilon
    schedule = getattr(c.lr_scheduler_type, "value", c.lr_scheduler_type)
    return {
        "advantage": f"r - group mean{norm} · scale_rewards {c.scale_rewards}",
        "loss aggregation": f"{LOSS_AGGREGATION.get(c.loss_type, c.loss_type)} · loss_type {c.loss_type}",
        "clip": f"({c.epsilon}, {high}) on {c.importance_sampling_level} ratios",
        "KL": f"k3 in the loss, coef {c.beta}" if c.beta else "none",
        "entropy bonus": entropy_semantics(c),
        "IS correction": is_semantics(c),
        "rollout mode": recipe.rollout_words("sync") + " · GRPOTrainer generates each step's episodes with the current "
                        "policy",
        "group filtering": "none",
        "sampling": recipe.sampling_words(c.temperature, c.top_p, c.top_k),
        "lengths": f"completion {c.max_completion_length} tokens"
                   + (" · truncated completions masked" if c.mask_truncated_completions else ""),
        **({} if spec is None else {"overlong": overlong_semantics(c, spec.algorithm.overlong)}),
        "optimizer": f"{recipe.optimizer_words(c.learning_rate, schedule)} · {c.warmup_steps} warmup steps, {schedule}",
        "grad clip": f"{recipe.grad_clip_words(c.max_grad_norm)} · max_grad_norm {c.max_grad_norm}",
        "batch": batch_semantics(c, spec),
        **({} if spec is None else {"LoRA": lora_semantics(spec)}),
    }


def entropy_semantics(c: Any) -> str:
    """The ``entropy bonus`` aspect of a GRPOConfig (``coef C`` or ``none``; adaptive control in TRL's words)."""
    coef = float(c.entropy_coef or 0.0)
    if getattr(c, "use_adaptive_entropy", False):
        return (f"adaptive from coef {coef:g}, target entropy {c.entropy_target:g} · use_adaptive_entropy, "
                f"entropy_coef {coef:g}")
    return f"{recipe.entropy_words(coef)} · entropy_coef {coef:g}"


def batch_semantics(c: Any, spec: Any = None) -> str:
    """The ``batch`` aspect: one generation of ``per_device_train_batch_size x steps_per_generation`` samples per
    process (the job's processes: ``spec``'s world, 1 without it), updated ``num_iterations`` times over
    ``steps_per_generation / gradient_accumulation_steps`` optimizer steps."""
    from agentbridge_trl.config import world_size

    world = 1 if spec is None else world_size(spec)
    steps = int(c.steps_per_generation or c.gradient_accumulation_steps)
    prompts = c.per_device_train_batch_size * steps * world // c.num_generations
    mini = max(1, steps // c.gradient_accumulation_steps)
    return (f"{recipe.batch_words(prompts, c.num_generations, c.num_iterations, mini)} · "
            f"per_device_train_batch_size {c.per_device_train_batch_size}, steps_per_generation {steps}, "
            f"gradient_accumulation_steps {c.gradient_accumulation_steps}, num_iterations {c.num_iterations}, "
            f"{world} process(es)")


def lora_semantics(spec: Any) -> str:
    """The ``LoRA`` aspect: the PEFT ``LoraConfig`` the job's trainer passes GRPOTrainer (``peft_config``), or full
    fine-tuning without one."""
    from agentbridge_trl.trainer import lora_config

    peft = lora_config(spec)
    if peft is None:
        return "full fine-tuning · peft_config None"
    words = recipe.lora_words(peft.r, peft.lora_alpha, peft.target_modules, peft.lora_dropout)
    return f"{words} · peft LoraConfig(r={peft.r}, lora_alpha={peft.lora_alpha}, lora_dropout={peft.lora_dropout})"


def overlong_semantics(c: Any, overlong: Any) -> str:
    """The ``overlong`` aspect: agentbridge's rollout masks and penalises as ``algorithm.overlong`` says (the same on
    every backend); TRL's own ``mask_truncated_completions`` (dapo's preset) also masks a completion that does not
    end in EOS."""
    eos = ["completions without EOS masked"] if c.mask_truncated_completions else []
    return recipe.overlong_words(overlong, *eos)


def is_semantics(c: Any) -> str:
    """The ``IS correction`` aspect of a GRPOConfig: TRL weights each token's policy loss by the vLLM importance
    ratio (``<level> <truncate|mask>, cap C``) only when it generates with vLLM."""
    mode, cap, low = c.vllm_importance_sampling_mode, c.vllm_importance_sampling_clip_max, \
        c.vllm_importance_sampling_clip_min
    own = f"vllm_importance_sampling_mode {mode}, _clip_max {cap}, _clip_min {low}"
    if not c.vllm_importance_sampling_correction:
        return "none · vllm_importance_sampling_correction false"
    if not c.use_vllm:
        return f"none · use_vllm false: TRL corrects only vLLM's log-probs ({own})"
    level, _, kind = str(mode).partition("_")
    if cap is not None and low is None:
        return f"{recipe.is_correction_words(level, kind, float(cap))} · {own}"
    bounds = ("no cap" if cap is None else f"cap {cap:g}") + ("" if low is None else f", floor {low:g}")
    return f"{level} {kind}, {bounds} · {own}"


@contextlib.contextmanager
def gpu_precision_here(kwargs: dict[str, Any], skipped: list[str] | None) -> Iterator[None]:
    """A GPU job's config (``bf16``) checked on a machine without a bf16 GPU: transformers refuses bf16 there, so
    its device query answers as a bf16-capable GPU would and the rest of the config is checked as it is; the
    precision itself is said to be unchecked."""
    if not kwargs.get("bf16"):
        yield
        return
    import torch
    from transformers import training_args

    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        yield
        return
    if skipped is not None:
        skipped.append("bf16: no bf16 GPU here; GRPOConfig was checked as on one (the device is not)")
    with patch.object(training_args, "is_torch_bf16_gpu_available", lambda: True):
        yield


def finish_deepspeed_config(config: Any, model: str, skipped: list[str] | None) -> None:
    """Finish the job's DeepSpeed config as the trainer will once the model is loaded (its "auto" sizes from the
    model's hidden size), which raises ValueError where the config disagrees with GRPOConfig."""
    from types import SimpleNamespace

    from transformers import AutoConfig

    try:
        model_config = AutoConfig.from_pretrained(model)
        model_config = getattr(model_config, "text_config", None) or model_config
    except (OSError, ValueError):  # a hub id not on this machine
        model_config = SimpleNamespace(hidden_size=1024)
        if skipped is not None:
            skipped.append("deepspeed: the model's config.json is not here; its bucket sizes were sized for a "
                           "placeholder hidden size")
    config.hf_deepspeed_config.trainer_config_finalize(config, SimpleNamespace(config=model_config),
                                                       config.max_steps)


def _validate(job_dir: Path, start: kit.JobCheck, spec: Spec, skipped: list[str],
              semantics: dict[str, str]) -> list[Problem]:
    from agentbridge_trl.config import make_grpo_config

    problems = start.problems

    kwargs = json.loads((job_dir / "grpo_config.json").read_text())
    kwargs["output_dir"] = str(job_dir / "validate-trainer")
    if "deepspeed" in kwargs and importlib.util.find_spec("deepspeed") is None:
        kwargs.pop("deepspeed")
        skipped.append("deepspeed: not installed here, so its ZeRO config was not built (`pip install "
                       "--no-build-isolation deepspeed` where torch is, and check again)")
    try:
        with gpu_precision_here(kwargs, skipped):
            config = make_grpo_config(kwargs)
            if "deepspeed" in kwargs:
                finish_deepspeed_config(config, start.model, skipped)
    except (TypeError, ValueError) as e:
        said = " ".join(line.strip() for line in str(e).splitlines() if line.strip())  # DeepSpeed lists on lines
        problems.append(Problem("grpo_config.json", f"GRPOConfig rejects it: {said[:400]}"))
    else:
        semantics.update(semantics_of(config, spec))
    return problems + rl_steps_problems(job_dir, kwargs, spec) + kit.agent_check(spec, start.tokenizer)[1]


def rl_steps_problems(job_dir: Path, kwargs: dict[str, Any], spec: Spec) -> list[Problem]:
    """One problem when the job's RL phase would make no step: fewer training tasks than one step's prompts, or
    steps that resolve to 0 (:func:`agentbridge_trl.config.rl_step_plan`)."""
    from agentbridge.adapter.training import zero_steps_problem
    from agentbridge_trl.config import rl_step_plan, world_size

    train = job_dir / "data" / "train.jsonl"
    tasks = sum(1 for line in train.read_text(encoding="utf-8").splitlines() if line.strip()) if train.is_file() else 0
    prompts, steps = rl_step_plan(kwargs, world_size(spec), tasks)
    problem = zero_steps_problem(tasks, prompts, steps)
    if problem is None:
        return []
    return [Problem("data/train.jsonl" if tasks < prompts else "grpo_config.json", problem)]


validate_job = kit.job_validator("agentbridge_trl.backend:TrlBackend", _validate, """GRPOConfig builds, the model
path resolves, the tokenizer's chat template renders tool calls; ``semantics`` receives what the GRPOConfig will do
(:func:`semantics_of`).""", mute=False, install="install agentbridge-trl[backend] or run `agentbridge check --runner "
                                 "env`")

if __name__ == "__main__":
    sys.exit(kit.validator_main(validate_job, "python -m agentbridge_trl.validate"))
