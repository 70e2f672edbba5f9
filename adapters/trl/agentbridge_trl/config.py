"""Map a spec to TRL's ``GRPOConfig`` arguments and reward functions (imports TRL only in ``make_grpo_config``)."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from agentbridge.adapter import BackendOptions
from agentbridge.adapter.rollout import reward_components as core_reward_components
from agentbridge.spec.recipe import clip_settings
from agentbridge.spec.schema import Spec

# How each agentbridge algorithm runs on GRPOTrainer with a custom multi-turn rollout.
ALGORITHMS: dict[str, dict[str, Any]] = {
    "grpo": {"loss_type": "grpo", "scale_rewards": "group"},
    "dr_grpo": {"loss_type": "dr_grpo", "scale_rewards": "none"},
    "dapo": {"loss_type": "dapo", "scale_rewards": "group", "epsilon_high": 0.28, "mask_truncated_completions": True},
    "gspo": {"loss_type": "grpo", "scale_rewards": "group", "importance_sampling_level": "sequence",
             "epsilon": 3e-4, "epsilon_high": 4e-4},
}
WHY_NOT = {
    "rloo": "TRL's RLOOTrainer takes no rollout_func, so it cannot run agentbridge's multi-turn driver",
    "reinforce_pp": "TRL has no REINFORCE++ trainer",
    "ppo": "TRL's GRPOTrainer has no critic (PPO with a value model)",
}
# options a spec may set under backend.options, and their defaults
OPTIONS: dict[str, Any] = {"use_vllm": False, "vllm_mode": "colocate", "vllm_server_base_url": None,
                           "vllm_gpu_memory_utilization": 0.3, "vllm_tensor_parallel_size": 1,
                           "gradient_checkpointing": False, "log_completions": False, "eval_size": None,
                           "save_steps": 50, "save_total_limit": 2, "micro_batch_size": None, "zero_stage": None}
# save_steps: RL steps between checkpoints in RUN_DIR/trainer/checkpoint-N (and one at the last step), what
# `agentbridge train --resume` continues from; 0 saves none. save_total_limit: how many are kept (the newest).
# micro_batch_size: sequences per device in one forward/backward pass (gradients accumulate over the step's
# batch; one optimizer update per RL step either way); None: the device's whole share of the step at once.
# zero_stage: DeepSpeed ZeRO stage 1, 2 or 3 sharding optimizer state, gradients (2) and weights (3) over the GPUs
# (TRL's GRPO recipes launch with examples/accelerate_configs/deepspeed_zero3.yaml; generation gathers the weights,
# ds3_gather_for_generation); None: plain DDP, every GPU holds the whole model and its optimizer state.
ZERO_STAGES = (1, 2, 3)
# resources' sizing fields -> the option each is the default of (agentbridge.spec.sizing): per_device_train_batch_size,
# activation_checkpointing, save_steps and save_total_limit of GRPOConfig
SIZING_OPTIONS = {name: name for name in ("micro_batch_size", "gradient_checkpointing", "save_steps",
                                          "save_total_limit")}
# algorithm.loss_agg -> GRPOConfig.loss_type (grpo_trainer.py compute_loss): dapo is the token mean over the whole
# generation batch, luspo each sequence's token sum, dr_grpo the token sum over max_completion_length per sequence
LOSS_TYPES = {"token_mean": "dapo", "seq_mean_token_sum": "luspo", "seq_mean_token_mean": "grpo",
              "seq_mean_token_sum_norm": "dr_grpo"}


# what TRL 1.16 cannot run of the recipe: field -> spec.recipe.recipe_key -> why (TrlBackend.recipe_why_not).
# KL: GRPOTrainer._compute_loss adds beta x k3 (exp(ref - logp) - (ref - logp) - 1, grpo_trainer.py:3100) to the loss
# and GRPOConfig has no estimator option; its advantages are the weighted rewards minus the group mean (:2785), no KL.
# Rollout: _prepare_inputs generates each step's episodes with the current policy (:1541); the experimental
# AsyncGRPOTrainer takes a rollout_worker and an external vLLM server, no rollout_func.
_K3_ONLY = ("TRL 1.16's GRPOTrainer has one KL estimator, k3 in the loss (grpo_trainer.py _compute_loss); GRPOConfig "
            "has no option for {}")
_SYNC_ONLY = ("TRL 1.16's GRPOTrainer is synchronous (each step's episodes come from the current policy, "
              "_prepare_inputs); its experimental AsyncGRPOTrainer takes no rollout_func, so agentbridge's driver "
              "cannot run in it")
RECIPE_WHY_NOT: dict[str, dict[str, str]] = {
    "kl_estimator": {"k1": _K3_ONLY.format("k1"), "k2": _K3_ONLY.format("k2")},
    "kl_in": {"reward": "TRL 1.16's GRPOTrainer puts the KL (beta) only in the loss: its advantages are the rewards "
                        "minus their group's mean, with no KL penalty (grpo_trainer.py "
                        "_generate_and_score_completions)"},
    "rollout": {"one_step_off": _SYNC_ONLY, "async": _SYNC_ONLY, "async+partial": _SYNC_ONLY},
}
# GRPOConfig's importance-sampling defaults (grpo_config.py): what a vLLM job applies when algorithm.is_correction
# is null
IS_DEFAULTS = {"vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": "sequence_mask",
               "vllm_importance_sampling_clip_max": 3.0}


# GRPOConfig arguments that transformers renamed: the name written here -> the one releases before the rename take
RENAMED = {"activation_checkpointing": "gradient_checkpointing",
           "activation_checkpointing_kwargs": "gradient_checkpointing_kwargs"}


def accepted_kwargs(kwargs: dict[str, Any], fields: Collection[str]) -> dict[str, Any]:
    """``kwargs`` with each renamed argument under the name that a ``GRPOConfig`` of ``fields`` takes.

    The jobs write transformers' current names; a transformers from before the rename (the backend extra allows
    5.15 and later) refuses them, and takes the old name instead.
    """
    out = dict(kwargs)
    for new, old in RENAMED.items():
        if new in out and new not in fields and old in fields:
            out[old] = out.pop(new)
    return out


def make_grpo_config(kwargs: dict[str, Any]) -> Any:
    """``trl.GRPOConfig`` built from a job's arguments under the installed transformers' names (imports TRL)."""
    import dataclasses

    from trl import GRPOConfig

    return GRPOConfig(**accepted_kwargs(kwargs, {f.name for f in dataclasses.fields(GRPOConfig)}))


OWN_OPTIONS = BackendOptions("trl", OPTIONS, SIZING_OPTIONS)
applies, options = OWN_OPTIONS.applies, OWN_OPTIONS.options


def reward_key(component: str) -> str:
    """The rollout extra key (and reward function name) carrying one driver reward component."""
    return "ab_" + re.sub(r"\W", "_", component)


def reward_components(spec: Spec) -> list[tuple[str, float]]:
    """(component, weight) for each reward TRL will log, in the core's order (``agent_edge.reward_components``:
    the spec's rewards, then the process reward, weight 1)."""
    weights = {r.id: r.weight for r in spec.reward}
    return [(name, weights.get(name, 1.0)) for name in core_reward_components(spec)]


def world_size(spec: Spec) -> int:
    return max(1, spec.resources.nodes * spec.resources.gpus_per_node)


def checkpointing(opts: dict[str, Any]) -> dict[str, Any]:
    """GRPOConfig's save arguments for TRL's options: HF Trainer's checkpoint-N directories (model, optimizer,
    scheduler, RNG, trainer state) every ``save_steps`` steps and at the last one, the newest
    ``save_total_limit`` kept; none when ``save_steps`` is 0."""
    steps = int(opts["save_steps"] or 0)
    if steps <= 0:
        return {"save_strategy": "no"}
    return {"save_strategy": "steps", "save_steps": steps, "save_total_limit": max(1, int(opts["save_total_limit"]))}


def deepspeed_config(stage: int) -> dict[str, Any]:
    """The DeepSpeed config of ZeRO ``stage``, as TRL's accelerate recipes set it (no offload, bf16; "auto" values
    are filled from GRPOConfig by transformers: micro-batch, accumulation, clipping, bucket sizes)."""
    zero: dict[str, Any] = {"stage": stage, "overlap_comm": True, "contiguous_gradients": True,
                            "reduce_bucket_size": "auto"}
    if stage == 3:
        zero.update({"stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
                     "stage3_gather_16bit_weights_on_model_save": True})
    return {"zero_optimization": zero, "bf16": {"enabled": "auto"}, "gradient_clipping": "auto",
            "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}


def batch_shape(spec: Spec, micro_batch_size: int | None) -> dict[str, int]:
    """GRPOConfig's batch arguments: each device's share of the step's episodes in micro-batches of
    ``micro_batch_size`` whose gradients accumulate, all generated at once: one rollout, and one update per RL step
    (``algorithm.mini_batches`` updates, each over that share of the micro-batches)."""
    per_device = max(1, spec.algorithm.batch_size * spec.algorithm.group_size // world_size(spec))
    mini_batches = spec.algorithm.mini_batches or 1  # optimizer steps per generation (algorithm.mini_batches)
    micro = min(max(1, per_device // mini_batches), micro_batch_size or per_device)
    steps = max(1, per_device // micro)
    return {"per_device_train_batch_size": micro, "gradient_accumulation_steps": max(1, steps // mini_batches),
            "steps_per_generation": steps}


def _whole(value: Any, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def rl_step_plan(kwargs: dict[str, Any], processes: int, train_tasks: int) -> tuple[int, int]:
    """``(prompts per RL step, RL steps)`` that GRPOTrainer makes of a job's ``GRPOConfig`` arguments (``kwargs``,
    TRL's defaults where unset) on ``processes`` training processes over ``train_tasks`` tasks.

    A step generates one batch of ``generation_batch_size // num_generations`` distinct prompts; TRL's sampler
    drops a last batch that is not whole. Steps are ``max_steps``, or, when that is not positive, as many whole
    batches as ``num_train_epochs`` passes over the tasks hold.
    """
    generations = max(1, _whole(kwargs.get("num_generations"), 8))
    per_device = _whole(kwargs.get("per_device_train_batch_size"), 8)
    accumulation = _whole(kwargs.get("gradient_accumulation_steps"), 1)
    per_generation = _whole(kwargs.get("steps_per_generation"), accumulation)
    generation_batch = _whole(kwargs.get("generation_batch_size"), per_device * max(1, processes) * per_generation)
    prompts = max(1, generation_batch // generations)
    max_steps = _whole(kwargs.get("max_steps"), -1)
    if max_steps > 0:
        return prompts, max_steps
    try:
        epochs = float(kwargs.get("num_train_epochs", 3.0))
    except (TypeError, ValueError):
        epochs = 3.0
    return prompts, int(epochs * (train_tasks // prompts))


def recipe_kwargs(spec: Spec) -> dict[str, Any]:
    """GRPOConfig arguments of the spec's explicit recipe fields (none for a field left null: the preset's)."""
    algo = spec.algorithm
    # delta caps the unclipped ratio: with a negative advantage that is dual-clip; with a positive one the clipped
    # term (at most 1 + epsilon_high < delta) already wins
    kwargs = clip_settings(algo, {"clip_low": "epsilon", "clip_high": "epsilon_high", "dual_clip": "delta",
                                  "entropy_coef": "entropy_coef", "max_grad_norm": "max_grad_norm"})
    if algo.loss_agg is not None:
        kwargs["loss_type"] = LOSS_TYPES[algo.loss_agg]
    if algo.scale_advantages is not None:
        kwargs["scale_rewards"] = algo.scale_advantages  # TRL's own names: group, batch, none
    if algo.epochs is not None:
        kwargs["num_iterations"] = algo.epochs  # each generation's updates repeated (mini-batches: batch_shape)
    if algo.is_correction is not None:
        # TRL's vLLM importance sampling: exp(old - sampling logps) per token or of the sequence's sum, clamped at
        # clip_max (truncate) or 0 above it (mask), times each token's policy loss (grpo_trainer.py:2660, :3147); it
        # is computed only when TRL generates with vLLM (TrlBackend.compile_notes says so on the other path)
        isc = algo.is_correction
        kwargs["vllm_importance_sampling_correction"] = True
        kwargs["vllm_importance_sampling_mode"] = f"{isc.level}_{isc.mode}"  # TRL's own four names
        kwargs["vllm_importance_sampling_clip_max"] = isc.cap
        kwargs["vllm_importance_sampling_clip_min"] = None  # no lower bound: agentbridge's weights have none
    else:  # null means no correction on every backend; GRPOConfig's default would apply sequence_mask at 3.0
        kwargs["vllm_importance_sampling_correction"] = False
    return kwargs


def grpo_config_kwargs(spec: Spec, output_dir: str) -> dict[str, Any]:
    """``GRPOConfig(**kwargs)`` for this spec; ``backend.overrides`` are applied last, verbatim."""
    algo = spec.algorithm
    opts = options(spec)
    on_cpu = spec.resources.gpus_per_node == 0
    kwargs: dict[str, Any] = {
        "output_dir": output_dir,
        "learning_rate": algo.lr,
        "max_steps": algo.steps,
        "warmup_steps": algo.warmup_steps,
        "lr_scheduler_type": "constant_with_warmup",
        "beta": algo.kl_coef,
        "use_bias_correction_kl": False,  # the k3 estimator as in GRPO, veRL and OpenRLHF (TRL 1.16 weights it)
        "num_generations": algo.group_size,
        **batch_shape(spec, opts["micro_batch_size"]),
        "max_completion_length": spec.agent.max_response_tokens,
        "temperature": max(spec.agent.sampling.temperature, 1e-5),
        "top_p": spec.agent.sampling.top_p,
        "top_k": spec.agent.sampling.top_k,
        "reward_weights": [w for _, w in reward_components(spec)],
        "seed": spec.seed,
        "data_seed": spec.seed,
        "use_cpu": on_cpu,
        "bf16": not on_cpu,
        "activation_checkpointing": bool(opts["gradient_checkpointing"]),
        "logging_steps": 1,
        **checkpointing(opts),
        "report_to": spec.logging.enabled() or "none",  # the run's env places each tracker's files (entry.py)
        "disable_tqdm": True,
        "log_completions": bool(opts["log_completions"]),
        "use_vllm": bool(opts["use_vllm"]),
        **ALGORITHMS.get(algo.name, {}),
        **recipe_kwargs(spec),
    }
    if opts["use_vllm"]:
        kwargs["vllm_mode"] = opts["vllm_mode"]
        if opts["vllm_mode"] == "colocate":
            kwargs["vllm_gpu_memory_utilization"] = opts["vllm_gpu_memory_utilization"]
            kwargs["vllm_tensor_parallel_size"] = opts["vllm_tensor_parallel_size"]
        elif opts["vllm_server_base_url"]:
            kwargs["vllm_server_base_url"] = opts["vllm_server_base_url"]
        kwargs["vllm_max_model_length"] = spec.agent.max_prompt_tokens + spec.agent.max_response_tokens
    if opts["zero_stage"] in ZERO_STAGES and not on_cpu:
        kwargs["deepspeed"] = deepspeed_config(opts["zero_stage"])
    if applies(spec):
        kwargs.update(spec.backend.overrides)
    return kwargs
