"""The spec mapped to a ROLL agentic-pipeline config (``roll.pipeline.agentic.agentic_config.AgenticConfig``).

ROLL reads one Hydra YAML, composed and turned into its config dataclasses with ``dacite.from_dict``. Its agentic
pipeline plays episodes in env managers: ``custom_envs.<tag>.env_manager_cls`` names the class, which this job sets
to agentbridge's (``agentbridge_roll.rollout.AgentBridgeEnvManager``); that env manager reads the job's spec and
tasks from ``custom_envs.<tag>.env_config`` and generates through ROLL's ``llm_proxy`` (``policy``: ROLL's own
vLLM/SGLang router).
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import BaseModel, Field, PositiveInt

from agentbridge.adapter import BackendOptions, set_dotted
from agentbridge.spec import Spec
from agentbridge.spec.recipe import clip_range, dual_clip, kl_setting, preset_clip

CONFIG_NAME = "roll_job"
ENTRY_FILE = "entry.py"
TAG = "agentbridge"  # the custom_envs tag of the job's training episodes
EVAL_TAG = "agentbridge_eval"  # ... and of its held-out tasks (ROLL's val env manager)
ENV_MANAGER = "agentbridge_roll.rollout.AgentBridgeEnvManager"
GROUP_FILTER = "agentbridge_roll.layout.EqualScoresFilter"  # dapo's dynamic sampling
ROLL_GROUP_FILTER = "roll.pipeline.agentic.agentic_pipeline.GroupFilter"  # ROLL's default: keeps every group
ROLLOUT_ENGINES = ("vllm", "sglang")
TRAINING_STRATEGIES = ("megatron_train", "fsdp2_train")

# agentbridge algorithm -> ROLL agentic keys (``configs/base_config.py`` PPOConfig, ``agentic_config.py``); the
# default actor worker (``agentic_actor_worker.ActorWorker``) takes the clipped PPO surrogate with ``pg_clip``
GROUP_NORM = {"grouping": "traj_group_id", "norm_mean_type": "group", "norm_std_type": "group"}
ALGORITHMS: dict[str, dict[str, Any]] = {
    # episode rewards normalised within each group (ROLL groups by traj_group_id), each sequence's token mean
    "grpo": {"adv_estimator": "grpo", "reward_normalization": GROUP_NORM, "loss_agg_mode": "seq-mean-token-mean"},
    # no std division; token losses summed and divided by a constant (ROLL: the padded sequence width)
    "dr_grpo": {"adv_estimator": "grpo", "loss_agg_mode": "seq-mean-token-sum-norm",
                "reward_normalization": {**GROUP_NORM, "norm_std_type": None}},
    # clip-higher and token-level loss; dynamic sampling by the adapter's group filter (drops equal-score groups)
    "dapo": {"adv_estimator": "grpo", "reward_normalization": GROUP_NORM, "loss_agg_mode": "token-mean",
             "use_pg_clip_range": True, "pg_clip_low": 0.2, "pg_clip_high": 0.28},
    # REINFORCE++: KL (k1) in the token rewards, returns with gamma 1, advantages whitened over the batch
    "reinforce_pp": {"adv_estimator": "reinforce", "loss_agg_mode": "token-mean", "whiten_advantages": True,
                     "add_token_level_kl": True, "kl_penalty": "kl",
                     "reward_normalization": {"grouping": "batch", "norm_mean_type": None, "norm_std_type": None}},
    # GAE with ROLL's critic worker, KL in the token rewards as for REINFORCE++
    "ppo": {"adv_estimator": "gae", "loss_agg_mode": "token-mean", "whiten_advantages": True, "gamma": 1.0,
            "lambd": 0.95, "add_token_level_kl": True, "kl_penalty": "kl",
            "reward_normalization": {"grouping": "batch", "norm_mean_type": None, "norm_std_type": None}},
}
# resources' sizing fields -> the option each is the default of (agentbridge.spec.sizing); gradient_checkpointing sets
# the training workers' recompute (_worker), save_total_limit max_ckpt_to_keep (BasePipeline._cleanup_old_checkpoints)
SIZING_OPTIONS = {"micro_batch_size": "micro_batch_size", "save_steps": "save_steps"}
MEGATRON_RECOMPUTE = {"recompute_granularity": "full"}  # mcore_adapter: every layer, uniform, as ROLL's examples
# a GPU job's Megatron training workers: the optimizer sharded over the data-parallel GPUs, as every Megatron recipe
# of ROLL's sets (examples/*/*.yaml: strategy_config.use_distributed_optimizer: true); agentbridge.memory reads it
MEGATRON_MEMORY = {"use_distributed_optimizer": True}
GROUPED = ("grpo", "dr_grpo", "dapo")
# algorithm.loss_agg -> loss_agg_mode (roll/utils/functionals.agg_loss); seq_mean_token_sum_norm is refused: ROLL
# divides by the padded width, not agent.max_response_tokens (its dr_grpo preset keeps that, with a note)
LOSS_AGG_MODES = {"token_mean": "token-mean", "seq_mean_token_sum": "seq-mean-token-sum",
                  "seq_mean_token_mean": "seq-mean-token-mean"}
TOKEN_KL = ("reinforce_pp", "ppo")  # KL as a token-reward penalty (init_kl_coef), not a loss term
# algorithm.kl_estimator -> kl_penalty, the token-reward KL's estimator (PPOConfig.kl_penalty: kl, abs, mse, full;
# roll/utils/functionals.compute_approx_kl: kl = logp - ref, mse = (logp - ref)^2 / 2); k3 is refused there
KL_PENALTIES = {"k1": "kl", "k2": "mse"}
# why ROLL cannot honour a recipe value (RollBackend.recipe_why_not / recipe_refusals)
KL_LOSS_WHY = ("ROLL's agentic ActorWorker.loss_func computes its KL loss with compute_approx_kl(..., kl_penalty='k3') "
               "whatever the config says: k3 only")
KL_REWARD_K3_WHY = ("ROLL's token-reward KL estimator, PPOConfig.kl_penalty, is one of kl, abs, mse, full (dacite "
                    "refuses any other): no k3")
ROLLOUT_PARTIAL_WHY = ("ROLL aborts in-flight requests at each weight update (RolloutScheduler.suspend: abort_all) and "
                       "agentbridge's env manager plays an aborted episode again from its start")
ROLLOUT_GPUS_WHY = ("ROLL's async pipeline (async_generation_ratio > 0) keeps actor_infer generating through the "
                    "train step (AgenticPipeline.run offloads it in sync mode only), so the engine needs GPUs apart "
                    "from the training workers', as in ROLL's async examples: 2 or more GPUs")
# why ROLL's agentic pipeline cannot run the others (the capability error says it, naming the backends that can)
WHY_NOT = {
    "gspo": "ROLL's sequence-level ratio (importance_sampling: seq) is in its RLVR pipeline only, not in "
            "AgenticConfig",
    "rloo": "ROLL has no leave-one-out advantage (adv_estimator has no rloo)",
}
NOTES = [
    "dapo: clip 0.2/0.28, token-mean; dynamic sampling by agentbridge's group filter (a group whose episodes all "
    "score the same is dropped and resampled); no overlong shaping",
    "dr_grpo: ROLL's seq-mean-token-sum-norm divides by the padded sequence width (sequence_length - 1), a "
    "constant, where the paper divides by the response budget",
    "rollout engine: ROLL's own (vLLM or SGLang through its router), reached through llm_proxy 'policy'",
]

# backend.options the ROLL adapter understands, with their defaults
class RollOptions(BaseModel):
    """``backend.options`` the ROLL adapter understands, with their defaults; each description says what a value must
    be (``agentbridge.adapter.option_problems``)."""

    rollout_engine: Literal["vllm", "sglang"] = Field("vllm", description="one of vllm, sglang")
    training_strategy: Literal["megatron_train", "fsdp2_train"] = Field(
        "megatron_train", description="one of megatron_train, fsdp2_train")
    micro_batch_size: PositiveInt = Field(1, description="a positive integer (actor_train.training_args"
                                          ".per_device_train_batch_size)")
    gpu_memory_utilization: float = Field(0.8, gt=0, le=1, description="a number in (0, 1]")
    env_managers_per_worker: PositiveInt = Field(16, description="a positive integer (train_env_manager"
                                                 ".max_env_num_per_worker: threads per EnvironmentWorker)")
    dtype: str = Field("bf16", description="a string")
    # a checkpoint every N steps and at the last (BasePipeline.do_checkpoint: global_step == max_steps - 1)
    save_steps: PositiveInt = Field(50, description="a positive integer")
    track_with: str = Field("tensorboard", description="a string")


OWN_OPTIONS = BackendOptions.of_model("roll", RollOptions, SIZING_OPTIONS)
applies, options, overrides = OWN_OPTIONS.applies, OWN_OPTIONS.options, OWN_OPTIONS.overrides


def sequence_length(spec: Spec) -> int:
    """``sequence_length``: ROLL pads every trajectory to it (prompt plus response)."""
    return spec.agent.max_prompt_tokens + spec.agent.max_response_tokens


def gpus_per_node(spec: Spec) -> int:
    return max(1, spec.resources.gpus_per_node)


def off_policy(spec: Spec) -> bool:
    """Whether the spec asks for generation ahead of training (``algorithm.rollout`` one_step_off or async)."""
    rollout = spec.algorithm.rollout
    return rollout is not None and rollout.mode != "sync"


def async_generation_ratio(spec: Spec) -> int:
    """ROLL's ``async_generation_ratio``: how many steps of episode groups its rollout scheduler keeps ahead of
    training, dropping those more than that many steps old (``GroupQueue.advance_step``) — the staleness bound: 1 for
    one_step_off, ``max_staleness`` (1 when null, as ROLL's async examples) for async, 0 (synchronous) else."""
    rollout = spec.algorithm.rollout
    if rollout is None or rollout.mode == "sync":
        return 0
    return (rollout.max_staleness or 1) if rollout.mode == "async" else 1


def train_gpus(spec: Spec) -> range:
    """The GPUs of ROLL's training workers (actor_train, reference, critic): all of the job's, or the first half
    when generation runs ahead (the async pipeline gives actor_infer GPUs of its own, as ROLL's async examples)."""
    total = gpus_per_node(spec) * spec.resources.nodes
    return range(0, total // 2 if off_policy(spec) else total)


def infer_gpus(spec: Spec) -> range:
    """The GPUs of ROLL's actor_infer: all of the job's, or the second half when generation runs ahead."""
    total = gpus_per_node(spec) * spec.resources.nodes
    return range(total // 2 if off_policy(spec) else 0, total)


def device_mapping(spec: Spec, gpus: range | None = None) -> str:
    """ROLL's ``device_mapping`` (a Python expression it evaluates) of ``gpus``: by default every GPU of the job,
    shared by the workers."""
    gpus = gpus if gpus is not None else range(0, gpus_per_node(spec) * spec.resources.nodes)
    return f"list(range({gpus.start},{gpus.stop}))"


def rollout_batch_size(spec: Spec) -> int:
    """Trajectories per step: ROLL counts episodes, agentbridge counts prompts (``batch_size``) of ``group_size``."""
    return spec.algorithm.batch_size * spec.algorithm.group_size


def _worker(spec: Spec, strategy: str, *, dtype: str, train: bool, micro: int = 1,
            gpus_of: range | None = None) -> dict[str, Any]:
    """One ROLL worker section (``WorkerConfig``) on ``gpus_of`` (the training workers' GPUs by default); a training
    one recomputes activations as ``resources.gradient_checkpointing`` says (null: ROLL's default, on for FSDP2's HF
    model, off for Megatron), and a Megatron one of a GPU job shards its optimizer (``MEGATRON_MEMORY``)."""
    algo, recompute = spec.algorithm, spec.resources.gradient_checkpointing
    megatron = train and strategy == "megatron_train"
    strategy_config = {**(MEGATRON_MEMORY if megatron and spec.resources.gpus_per_node > 0 else {}),
                       **(MEGATRON_RECOMPUTE if megatron and recompute else {})}
    section: dict[str, Any] = {
        "model_args": {"dtype": dtype, "disable_gradient_checkpointing": not train or recompute is False},
        "strategy_args": {"strategy_name": strategy, "strategy_config": strategy_config},
        "device_mapping": device_mapping(spec, gpus_of if gpus_of is not None else train_gpus(spec)),
    }
    if train:
        gpus = len(train_gpus(spec))
        section["training_args"] = {
            "learning_rate": algo.lr, "weight_decay": 0.0, "lr_scheduler_type": "constant",
            "warmup_steps": algo.warmup_steps, "per_device_train_batch_size": micro,
            # one optimizer step per pipeline step: per_device x accumulation x GPUs = the step's trajectories
            "gradient_accumulation_steps": max(1, rollout_batch_size(spec) // (micro * gpus))}
    else:
        section["infer_batch_size"] = micro
    return section


def _env(spec: Spec, split: str) -> dict[str, Any]:
    """One ``custom_envs`` entry: agentbridge's env manager over the job's tasks of ``split``."""
    agent = spec.agent
    return {
        "env_type": "agentbridge",  # informational: agentbridge's env manager makes no GEM env
        "env_manager_cls": ENV_MANAGER,
        "max_steps": agent.max_turns,
        "max_tokens_per_step": agent.max_tokens_per_turn,
        "agent_system_template": "",  # the spec's system prompt, rendered by agentbridge's driver
        "agent_template": "",
        "env_config": {"spec_path": "spec.yaml", "data_path": f"data/{split}.jsonl", "split": split},
    }


def settings(spec: Spec, *, has_eval: bool = False) -> dict[str, Any]:
    """Every ROLL key this spec sets, dotted, before ``backend.overrides``."""
    algo, agent, opts = spec.algorithm, spec.agent, options(spec)
    micro, dtype = int(opts["micro_batch_size"]), str(opts["dtype"])
    groups = algo.batch_size
    tree: dict[str, Any] = {
        "hydra.run.dir": ".",
        "hydra.output_subdir": None,
        "exp_name": spec.name,
        "seed": spec.seed,
        "output_dir": "runs",
        "logging_dir": "${output_dir}/logs",
        # the pipeline's step metrics (AgenticPipeline.run: tracker.log at each global_step), read back by
        # agentbridge_roll.run_metrics; agentbridge's own tracker writes beside them (tensorboard/agentbridge)
        "track_with": str(opts["track_with"]),
        "tracker_kwargs": {"log_dir": "${output_dir}/tensorboard/roll"},
        # checkpoints: output_dir/checkpoints/checkpoint-N (FileSystemUploader.upload of each worker's save dir: the
        # actor's Hugging Face model at its top, training_args.save_hf_model; the pipeline state in pipeline/)
        "checkpoint_config": {"type": "file_system", "output_dir": "${output_dir}/checkpoints"},
        "num_gpus_per_node": gpus_per_node(spec),
        "max_steps": algo.steps,
        "save_steps": int(opts["save_steps"]),
        **({"max_ckpt_to_keep": spec.resources.save_total_limit} if spec.resources.save_total_limit else {}),
        "logging_steps": 1,
        "eval_steps": 0,  # agentbridge's held-out evaluation is not run around ROLL's trainer
        # a relaunch resumes from the latest checkpoint-N there (BasePipeline.__init__ and ActorWorker.initialize:
        # get_latest_ckpt); a finished run skips every step (AgenticPipeline.run: global_step <= state.step)
        "resume_from_checkpoint": True,
        # generation ahead of training (algorithm.rollout): steps of episode groups kept ahead, the staleness bound
        "async_generation_ratio": async_generation_ratio(spec),
        "rollout_batch_size": rollout_batch_size(spec),
        "val_batch_size": 0,
        "sequence_length": sequence_length(spec),
        "pretrain": "MODEL_PATH_SET_BY_LAUNCH",
        "reward_pretrain": "${pretrain}",
        "ppo_epochs": 1,
        "max_grad_norm": 1.0,
        "pg_clip": 0.2,
        "entropy_loss_coef": 0.0,
        "whiten_advantages": False,
        # KL: the k3 estimator in the loss (grpo, dr_grpo, dapo) or k1 in the token rewards (reinforce_pp, ppo)
        "use_kl_loss": algo.kl_coef > 0 and algo.name not in TOKEN_KL,
        "kl_loss_coef": algo.kl_coef if algo.name not in TOKEN_KL else 0.0,
        "init_kl_coef": algo.kl_coef if algo.name in TOKEN_KL else 0.0,
        "actor_train": _worker(spec, str(opts["training_strategy"]), dtype=dtype, train=True, micro=micro),
        # the actor's checkpoints also as a Hugging Face model (MegatronTrainStrategy.save_checkpoint:
        # save_pretrained_as_hf into its save dir; ROLL's FSDP2 strategy always writes one): what finish evaluates
        "actor_train.training_args.save_hf_model": True,
        "actor_infer": {**_worker(spec, str(opts["rollout_engine"]), dtype=dtype, train=False, micro=micro,
                                  gpus_of=infer_gpus(spec)),
                        "generating_args": {
                            "max_new_tokens": agent.max_tokens_per_turn, "temperature": agent.sampling.temperature,
                            "top_p": agent.sampling.top_p, "top_k": agent.sampling.top_k or -1, "num_beams": 1,
                            "num_return_sequences": 1}},
        "actor_infer.strategy_args.strategy_config": {
            "gpu_memory_utilization": float(opts["gpu_memory_utilization"]), "load_format": "auto"},
        "reference": _worker(spec, "hf_infer", dtype=dtype, train=False, micro=micro),
        "train_env_manager": {
            "num_env_groups": groups, "group_size": algo.group_size, "tags": [TAG], "num_groups_partition": [groups],
            "max_env_num_per_worker": min(int(opts["env_managers_per_worker"]), groups * algo.group_size),
            "llm_proxy": {"proxy_type": "policy"},
            "group_filter_cls": GROUP_FILTER if algo.name == "dapo" else ROLL_GROUP_FILTER},
        "val_env_manager": {
            "num_env_groups": 1, "group_size": 1, "tags": [EVAL_TAG if has_eval else TAG], "num_groups_partition": [1],
            "max_env_num_per_worker": 1, "llm_proxy": {"proxy_type": "policy"}},
        "custom_envs": {TAG: _env(spec, "train"), **({EVAL_TAG: _env(spec, "eval")} if has_eval else {})},
    }
    for key, value in ALGORITHMS.get(algo.name, {}).items():
        tree[key] = copy.deepcopy(value)  # the preset's tables are shared: the recipe below may set inside them
    for key, value in recipe_settings(spec).items():
        set_dotted(tree, key, value)
    if algo.name == "ppo":
        tree["critic"] = _worker(spec, str(opts["training_strategy"]), dtype=dtype, train=True, micro=micro)
    return tree


def recipe_settings(spec: Spec) -> dict[str, Any]:
    """ROLL keys of the spec's explicit recipe fields (none for a field left null: the preset's).

    ROLL's dual-clip constant is ``1 + 2 * pg_clip``; with ``use_pg_clip_range`` the clip bounds are ``pg_clip_low``
    and ``pg_clip_high`` and ``pg_clip`` is read for nothing else (``agentic_actor_worker.ActorWorker.loss_func``), so
    an explicit dual sets the bounds there and ``pg_clip`` to ``(dual - 1) / 2``.
    """
    algo = spec.algorithm
    out: dict[str, Any] = {}
    clip, dual = clip_range(algo), dual_clip(algo)
    if clip is not None or dual is not None:
        low, high = clip or preset_clip(algo.name)
        out.update({"use_pg_clip_range": True, "pg_clip_low": low, "pg_clip_high": high})
    if dual is not None:
        out.update({"dual_clip_loss": True, "pg_clip": (dual - 1) / 2})
    if algo.entropy_coef is not None:
        out["entropy_loss_coef"] = algo.entropy_coef
    if algo.max_grad_norm is not None:
        out["max_grad_norm"] = algo.max_grad_norm
    if algo.loss_agg in LOSS_AGG_MODES:
        out["loss_agg_mode"] = LOSS_AGG_MODES[algo.loss_agg]
    if algo.scale_advantages is not None:  # group mean, then the group's std, the batch's or none
        out["reward_normalization.norm_std_type"] = {"none": None}.get(algo.scale_advantages, algo.scale_advantages)
    if algo.epochs is not None:
        out["ppo_epochs"] = algo.epochs
    if algo.mini_batches is not None:  # accumulation for batch_size / mini_batches prompts' trajectories per update
        train = "actor_train.training_args."
        micro, gpus = int(options(spec)["micro_batch_size"]), len(train_gpus(spec))
        out[train + "gradient_accumulation_steps"] = max(1, rollout_batch_size(spec) // algo.mini_batches
                                                         // (micro * gpus))
    out.update(kl_settings(spec))
    isc = algo.is_correction
    if isc is not None:  # the IS weight exp(old - infer) at the level, truncated at cap, or kept below cap by a filter
        weight = {"enabled": True, "weight_type": isc.level, "upper_bound": isc.cap if isc.mode == "truncate" else None,
                  "detach": True}
        filters = [] if isc.mode == "truncate" else [
            {"enabled": True, "agg_type": isc.level, "ratio_enabled": True, "ratio_low": 0.0, "ratio_high": isc.cap,
             "diff_enabled": False}]
        out["train_infer_correction"] = {"is_weight": weight, "filters": filters}
    lora = spec.model.lora
    if lora is not None:  # LoRA is on when lora_target is set; the reference then runs with the adapter disabled
        args = "actor_train.model_args."
        targets = "all" if lora.target_modules == "all-linear" else ",".join(lora.target_modules)
        out.update({args + "lora_target": targets, args + "lora_rank": lora.rank,
                    args + "lora_alpha": int(lora.scaling_alpha()), args + "lora_dropout": lora.dropout})
    return out


def kl_settings(spec: Spec) -> dict[str, Any]:
    """The KL keys of an explicit ``kl_estimator`` / ``kl_in`` (none when both are null: the preset's): KL in the
    loss is ROLL's KL loss (``use_kl_loss``, ``kl_loss_coef``; k3, the only estimator it has), KL in the reward its
    token-reward penalty (``add_token_level_kl``, ``init_kl_coef`` with no target_kl: a fixed coefficient,
    ``kl_penalty`` the estimator), subtracted from each token's reward after ROLL's reward normalisation."""
    algo = spec.algorithm
    if algo.kl_coef <= 0 or (algo.kl_estimator is None and algo.kl_in is None):
        return {}
    estimator, where = kl_setting(algo)
    if where == "loss":
        return {"use_kl_loss": True, "kl_loss_coef": algo.kl_coef, "add_token_level_kl": False, "init_kl_coef": 0.0}
    return {"use_kl_loss": False, "kl_loss_coef": 0.0, "add_token_level_kl": True, "init_kl_coef": algo.kl_coef,
            "kl_penalty": KL_PENALTIES.get(estimator, estimator)}


LORA_ALPHA_WHY = "ROLL's ModelArguments.lora_alpha is an integer"


def recipe_refusals(spec: Spec) -> dict[str, str]:
    """The KL and rollout settings of the spec ROLL cannot honour (they depend on the estimator's placement and the
    job's GPUs): the field's path -> why."""
    algo = spec.algorithm
    out: dict[str, str] = {}
    if algo.kl_coef > 0 and (algo.kl_estimator is not None or algo.kl_in is not None):
        estimator, where = kl_setting(algo)
        field = "algorithm.kl_estimator" if algo.kl_estimator else "algorithm.kl_in"
        if where == "loss" and estimator != "k3":
            out[field] = KL_LOSS_WHY
        elif where == "reward" and estimator not in KL_PENALTIES:
            out[field] = KL_REWARD_K3_WHY
    if off_policy(spec) and len(train_gpus(spec)) == 0:
        out["algorithm.rollout"] = ROLLOUT_GPUS_WHY
    if spec.model.lora is not None and not float(spec.model.lora.scaling_alpha()).is_integer():
        out["model.lora.alpha"] = LORA_ALPHA_WHY
    return out


def job_config(spec: Spec, *, has_eval: bool = False) -> dict[str, Any]:
    """The job's Hydra config: ROLL's agentic sections with the mapped keys, then the overrides."""
    tree: dict[str, Any] = {"defaults": ["_self_"]}
    for key, value in {**settings(spec, has_eval=has_eval), **overrides(spec)}.items():
        set_dotted(tree, key, value)
    return tree


def path_overrides(job: str, model: str, *, has_eval: bool) -> list[str]:
    """Hydra overrides for the paths that depend on where the job and the model live."""
    out = [f"pretrain={model}"]
    for tag, split in ((TAG, "train"), *(((EVAL_TAG, "eval"),) if has_eval else ())):
        out += [f"custom_envs.{tag}.env_config.spec_path={job}/spec.yaml",
                f"custom_envs.{tag}.env_config.data_path={job}/data/{split}.jsonl"]
    return out
