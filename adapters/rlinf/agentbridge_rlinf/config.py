"""The spec mapped to RLinf 0.3.0's reasoning-task Hydra config (``runner.task_type: reasoning``).

RLinf reads one YAML with the sections ``cluster``, ``runner``, ``algorithm``, ``data``, ``agentloop``, ``rollout``,
``reward``, ``actor`` and ``inference`` (plus ``critic`` for PPO). The job's entry (``agentbridge_rlinf.entry``)
builds RLinf's worker groups with agentbridge's agent-loop worker; ``agentbridge.spec_path`` tells that worker
where the job's spec is.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, PositiveInt

from agentbridge import adapter as kit
from agentbridge.adapter import set_dotted
from agentbridge.spec import Spec
from agentbridge.spec.recipe import clip_settings, kl_setting

CONFIG_NAME = "rlinf_job"
ENTRY_FILE = "entry.py"

# RLinf 0.3.0's agent loop talks to its engine over channels (rollout_serverless): only its SGLang worker serves them
ROLLOUT_BACKENDS = ("sglang",)
TRAINING_BACKENDS = ("fsdp", "megatron")

# agentbridge algorithm -> RLinf ``algorithm.*`` keys (``rlinf/algorithms/advantages.py``, ``losses.py``)
# (the actor's reasoning path: ``FSDPActor.compute_advantages_and_returns`` and its ``policy_loss`` call)
ALGORITHMS: dict[str, dict[str, Any]] = {
    # each sequence's token mean, then the mean over sequences (as agentbridge's grpo and veRL's mapping)
    "grpo": {"adv_type": "grpo", "loss_type": "actor", "loss_agg_func": "seq-mean-token-mean"},
    # RLinf's DAPO recipe: GRPO advantages, decoupled clip, token-mean over valid tokens
    "dapo": {"adv_type": "grpo", "loss_type": "actor", "clip_ratio_low": 0.2, "clip_ratio_high": 0.28,
             "loss_agg_func": "token-mean", "use_valid_token_scale": True},
    # KL as a k1 penalty in the token rewards (``reinpp_kl_beta``, set to the spec's kl_coef), not in the loss
    "reinforce_pp": {"adv_type": "reinpp", "loss_type": "actor", "kl_beta": 0.0, "kl_penalty_type": "kl"},
}
GROUPED = ("grpo", "dapo")
# algorithm.loss_agg -> algorithm.loss_agg_func (rlinf/utils/utils.py); seq_mean_token_sum_norm is refused
LOSS_AGG_FUNCS = {"token_mean": "token-mean", "seq_mean_token_sum": "seq-mean-token-sum",
                  "seq_mean_token_mean": "seq-mean-token-mean"}
# algorithm.kl_estimator -> algorithm.kl_penalty_type (rlinf/algorithms/utils.py kl_penalty: "k1"/"kl", "k2"/"mse",
# "k3"/"low_var_kl"); one key for the loss's KL (kl_beta) and the reward's (reinpp_kl_beta). k3 keeps the preset's name
KL_PENALTY_TYPES = {"k1": "k1", "k2": "k2", "k3": "low_var_kl"}
# why RLinf 0.3.0 cannot honour a recipe value (RlinfBackend.recipe_why_not / recipe_refusals)
KL_REWARD_WHY = ("RLinf 0.3.0 puts KL in the reward only in its reinpp advantage (reinpp_kl_beta, read by "
                 "compute_reinpp_advantages alone): its grpo advantage takes no KL")
KL_K1_LOSS_WHY = ("RLinf 0.3.0's FSDP actor calls kl_penalty(ref_logprobs, logprobs, 'k1'), which is ref - logp: the "
                  "k1 estimate negated (its Megatron actor passes them in order: backend.options.training_backend "
                  "megatron)")
IS_WHY = ("RLinf 0.3.0's importance_sampling_fix is per token and truncates (advantages x clamp(exp(recomputed - "
          "rollout), max=importance_sampling_clip) in the actor's training_step): no sequence level, no mask")
ROLLOUT_WHY = ("RLinf 0.3.0's asynchronous runner (algorithm.staleness_threshold) is the embodied one "
               "(AsyncPPOEmbodiedRunner); its AgentRunner, which runs agent loops, generates and trains in turn")
# Megatron's full recompute of every layer (megatron_model_manager: build_transformer_config(actor.model))
MEGATRON_RECOMPUTE = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
# why RLinf 0.3.0 cannot run the others (the capability error says it, naming the backends that can)
WHY_NOT = {
    "gspo": "RLinf 0.3.0 has no sequence-level importance ratio (no gspo loss)",
    "rloo": "RLinf 0.3.0 registers no leave-one-out advantage (no rloo)",
    "ppo": "RLinf 0.3.0's AgentRunner, which runs agent loops, passes ReasoningRunner no critic: its gae has no "
           "values",
    "dr_grpo": "RLinf 0.3.0's grpo advantage always divides by the group's std and no registered advantage "
               "drops it",
}
# what stands between a compiled job and a GPU run (agentbridge backends setup rlinf --gpu says the same)
ENV_CONFLICT = ("GPU environment: RLinf 0.3.0's engine extras (agentic-sglang, agentic-vllm) pin "
                "transformers==4.51.1 and its FSDP actor imports a class transformers 5 removed, while agentbridge's "
                "driver needs transformers>=5.5.3: the job needs an RLinf build on transformers 5 (RLinf main pins "
                "SGLang 0.5.12.post1 with transformers 5.6.1)")
NOTES = [
    "dapo: RLinf's grpo advantage with clip 0.2/0.28 and token-mean over valid tokens; dynamic sampling and "
    "overlong shaping are not switched on",
    "rollout engine: SGLang (RLinf 0.3.0's agent loop reaches its engine over channels only through SGLang)",
    ENV_CONFLICT,
]

class RlinfOptions(BaseModel):
    """``backend.options`` the RLinf adapter understands, with their defaults; each description says what a value must
    be (``agentbridge.adapter.option_problems``)."""

    rollout_backend: Literal["sglang"] = Field("sglang", description="one of sglang (RLinf 0.3.0's agent loop "
                                               "reaches only SGLang over its channels)")
    training_backend: Literal["fsdp", "megatron"] = Field("fsdp", description="one of fsdp, megatron")
    model_type: str = Field("qwen2.5", description="a string (RLinf's SupportedModel of the policy)")
    precision: str = Field("bf16", description="a string")
    micro_batch_size: PositiveInt = Field(1, description="a positive integer (algorithm.training_batch_size_per_gpu)")
    gpu_memory_utilization: float = Field(0.6, gt=0, le=1, description="a number in (0, 1]")
    tensor_parallel_size: PositiveInt = Field(1, description="a positive integer")
    agent_workers: PositiveInt = Field(1, description="a positive integer (agent-loop workers; RLinf runs one per "
                                       "rollout data-parallel rank)")
    # a checkpoint every N steps and at the last (runner_utils.check_progress saves at step == max_steps when > 0)
    save_interval: PositiveInt = Field(50, description="a positive integer (the trained model is the last step's "
                                       "checkpoint)")
    logger: list[str] = Field(["tensorboard"], description="a list of RLinf logger names (e.g. [tensorboard])")


# resources' sizing fields -> the option each is the default of (agentbridge.spec.sizing); gradient_checkpointing sets
# the FSDP or Megatron actor's recompute directly (settings)
SIZING_OPTIONS = {"micro_batch_size": "micro_batch_size", "save_steps": "save_interval"}
SIZING_WHY_NOT = {"save_total_limit": "RLinf 0.3.0 keeps every checkpoint: its runner saves every "
                                      "runner.save_interval steps (ReasoningRunner._save_checkpoint) and deletes none"}
OWN_OPTIONS = kit.BackendOptions.of_model("rlinf", RlinfOptions, SIZING_OPTIONS)
applies, options, overrides = OWN_OPTIONS.applies, OWN_OPTIONS.options, OWN_OPTIONS.overrides


def seq_length(spec: Spec) -> int:
    """``runner.seq_length``: prompt plus response (RLinf keeps ``seq_length - data.max_prompt_length`` for the
    response)."""
    return spec.agent.max_prompt_tokens + spec.agent.max_response_tokens


def gpus_per_node(spec: Spec) -> int:
    return max(1, spec.resources.gpus_per_node)


def one_gpu(spec: Spec) -> bool:
    """Whether the spec is a GPU job on a single GPU."""
    return spec.resources.gpus_per_node > 0 and spec.resources.nodes * spec.resources.gpus_per_node == 1


def settings(spec: Spec) -> dict[str, Any]:
    """Every RLinf key this spec sets, dotted, before ``backend.overrides``."""
    algo, agent, opts = spec.algorithm, spec.agent, options(spec)
    micro = int(opts["micro_batch_size"])
    model = {"model_path": "MODEL_PATH_SET_BY_LAUNCH", "model_type": opts["model_type"],
             "precision": opts["precision"]}
    tree: dict[str, Any] = {
        "agentbridge.spec_path": "spec.yaml",  # launch.sh sets the job's path
        "cluster.num_nodes": spec.resources.nodes,
        "cluster.component_placement": {"actor,rollout,reward": "all"},
        "runner.task_type": "reasoning",
        "runner.logger.log_path": "${runner.output_dir}/${runner.experiment_name}",
        "runner.logger.project_name": spec.logging.project or "agentbridge",
        "runner.logger.experiment_name": "${runner.experiment_name}",
        "runner.logger.logger_backends": list(opts["logger"]),
        "runner.max_epochs": algo.steps,  # an epoch has a step at least: the steps end the run
        "runner.max_steps": algo.steps,
        "runner.val_check_interval": -1,
        # checkpoints in runner.output_dir/<experiment_name>/checkpoints/global_step_N (ReasoningRunner.
        # _save_checkpoint); a relaunch resumes from the latest (resume_dir auto: ReasoningRunner.init_workers looks
        # in runner.logger.log_path/checkpoints, the same folder)
        "runner.save_interval": int(opts["save_interval"]),
        "runner.seq_length": seq_length(spec),
        "runner.enable_dynamic_batch_size": False,
        "runner.resume_dir": "auto",
        "runner.experiment_name": spec.name,
        "runner.output_dir": "runs",
        "algorithm.group_size": algo.group_size,
        "algorithm.n_minibatches": 1,
        "algorithm.training_batch_size_per_gpu": micro,
        "algorithm.rollout_batch_size_per_gpu": None,
        "algorithm.logprob_forward_micro_batch_size": micro,
        "algorithm.val_rollout_batch_size_per_gpu": micro,
        # the driver keeps the engine's log-probs of every generated token: they are the old log-probs. With KL or
        # IS correction the actor recomputes them: RLinf 0.3.0 computes the reference's log-probs only in that pass
        # (run_inference, which AgentRunner calls only when recompute_logprobs is on), and its IS correction weighs
        # the engine's log-probs against the recomputed ones
        "algorithm.recompute_logprobs": algo.kl_coef > 0 or algo.is_correction is not None,
        "algorithm.shuffle_rollout": False,
        "algorithm.loss_agg_func": "token-mean",
        "algorithm.kl_beta": algo.kl_coef,
        "algorithm.kl_penalty_type": "low_var_kl",
        "algorithm.ratio_clip_eps": 0.2,
        "algorithm.entropy_bonus": 0.0,
        "algorithm.calculate_entropy": False,
        "algorithm.clip_ratio_c": None,
        "algorithm.clip_ratio_low": None,
        "algorithm.clip_ratio_high": None,
        "algorithm.normalize_advantages": False,
        "algorithm.use_valid_token_scale": False,
        "algorithm.sampling_params": {
            "do_sample": True, "temperature": agent.sampling.temperature, "top_k": agent.sampling.top_k or -1,
            "top_p": agent.sampling.top_p, "repetition_penalty": 1.0, "max_new_tokens": agent.max_tokens_per_turn,
            "min_new_tokens": 1},
        "data.type": "math",
        "data.max_prompt_length": agent.max_prompt_tokens,
        "data.filter_prompt_by_length": False,
        "data.rollout_batch_size": algo.batch_size,
        "data.val_rollout_batch_size": None,
        "data.num_workers": 0,
        "data.prompt_key": "prompt",
        "data.answer_key": kit.TASK_KEY,  # the column carrying each task as JSON
        "data.apply_chat_template": True,
        "data.shuffle": True,
        "data.validation_shuffle": False,
        "data.seed": spec.seed,
        "data.train_data_paths": ["data/train.jsonl"],
        "data.val_data_paths": None,
        "agentloop.group_name": "AgentLoopGroup",
        "agentloop.toolcall_parser": None,  # agentbridge's driver parses tool calls
        "agentloop.max_turns": agent.max_turns,
        "agentloop.print_outputs": False,
        "agentloop.is_dynamic_rollout_batch": False,
        "agentloop.num_workers": int(opts["agent_workers"]),
        "rollout.group_name": "RolloutGroup",
        "rollout.gpu_memory_utilization": float(opts["gpu_memory_utilization"]),
        "rollout.model": model,
        "rollout.enforce_eager": False,
        "rollout.distributed_executor_backend": "mp",
        "rollout.disable_log_stats": False,
        "rollout.detokenize": False,
        "rollout.padding": None,
        "rollout.eos": None,
        "rollout.return_logprobs": True,
        "rollout.rollout_backend": opts["rollout_backend"],
        "rollout.sglang": {"attention_backend": "triton", "decode_log_interval": 500000, "use_torch_compile": False,
                           "torch_compile_max_bs": 128},
        "rollout.vllm": {"attention_backend": "FLASH_ATTN", "enable_chunked_prefill": True,
                         "enable_prefix_caching": True, "enable_flash_infer_sampler": True,
                         "max_num_batched_tokens": None, "torch_profiler_dir": None},
        "rollout.tensor_parallel_size": int(opts["tensor_parallel_size"]),
        "rollout.pipeline_parallel_size": 1,
        "rollout.max_running_requests": 128,
        "rollout.cuda_graph_max_bs": 128,
        "rollout.validate_weight_first_sync": False,
        "rollout.validate_weight": False,
        "rollout.validate_save_dir": None,
        "rollout.print_outputs": False,
        # the driver scores every episode inside the agent loop: no reward worker is launched
        "reward.group_name": "RewardGroup",
        "reward.use_reward_model": False,
        "reward.reward_type": "agentbridge",
        "reward.reward_scale": 1.0,
        "actor.group_name": "ActorGroup",
        "actor.training_backend": opts["training_backend"],
        "actor.calculate_flops": False,
        "actor.seed": spec.seed,
        # a GPU job on one GPU: FSDP has nothing to shard over, so the actor's weights, gradients and Adam state go
        # to CPU while the rollout engine generates (FSDPActor: offload_param_and_grad, offload_optimizer between
        # phases, collocated placement); agentbridge.memory reads it
        "actor.enable_offload": one_gpu(spec),
        "actor.sync_precision": "${rollout.model.precision}",
        "actor.model": {"model_type": "${rollout.model.model_type}", "model_path": "${rollout.model.model_path}",
                        "precision": "fp32", "seq_length": "${runner.seq_length}",
                        "encoder_seq_length": "${runner.seq_length}", "is_lora": False},
        "actor.optim": {"optimizer": "adam", "lr": algo.lr, "lr_scheduler": "constant",
                        "total_training_steps": algo.steps,
                        "lr_warmup_steps_ratio": algo.warmup_steps / max(1, algo.steps),
                        "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_eps": 1.0e-8, "min_lr": 0.0,
                        "weight_decay": 0.0, "clip_grad": 1.0},
        "actor.tokenizer": {"tokenizer_model": "${rollout.model.model_path}", "use_fast": True,
                            "trust_remote_code": True, "padding_side": "right"},
        "actor.fsdp_config": {"strategy": "fsdp2", "sharding_strategy": "full_shard",
                              "gradient_checkpointing": spec.resources.gradient_checkpointing is not False,
                              "cpu_offload": False, "offload_pin_memory": True, "reshard_after_forward": True,
                              "enable_gradient_accumulation": True, "forward_prefetch": False,
                              "limit_all_gathers": False, "backward_prefetch": None, "use_orig_params": False,
                              "use_liger_kernel": False,
                              # each checkpoint also holds the full weights (actor/model_state_dict/full_weights.pt:
                              # FSDPStrategyBase.save_checkpoint), which launch.sh exports as a HF model
                              "save_full_model_weights": True,
                              "mixed_precision": {"param_dtype": "bf16", "reduce_dtype": "fp32",
                                                  "buffer_dtype": "fp32"},
                              "amp_autocast": {"enabled": False, "precision": "bf16"},
                              "grad_scaler": {"enabled": False}},
        "inference.model_type": "${rollout.model.model_type}",
        "inference.group_name": "InferenceGroup",
        "inference.load_from_actor": True,
        "inference.model": {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
                            "sequence_parallel": False},
    }
    for key, value in ALGORITHMS.get(algo.name, {}).items():
        tree[f"algorithm.{key}"] = value
    if algo.name == "reinforce_pp":
        tree["algorithm.reinpp_kl_beta"] = algo.kl_coef
    tree.update(recipe_settings(spec))
    if algo.max_grad_norm is not None:
        tree["actor.optim"] = {**tree["actor.optim"], "clip_grad": algo.max_grad_norm}
    if spec.resources.gradient_checkpointing and opts["training_backend"] == "megatron":
        tree["actor.model"] = {**tree["actor.model"], **MEGATRON_RECOMPUTE}
    tree["critic.use_critic_model"] = False
    return tree


def recipe_settings(spec: Spec) -> dict[str, Any]:
    """``algorithm.*`` keys of the spec's explicit recipe fields (none for a field left null: the preset's); the
    gradient clip (``actor.optim.clip_grad``) is set by ``settings``."""
    algo = spec.algorithm
    out = clip_settings(algo, {"clip_low": "algorithm.clip_ratio_low", "clip_high": "algorithm.clip_ratio_high",
                               "dual_clip": "algorithm.clip_ratio_c"})
    if algo.entropy_coef is not None:
        # the actor subtracts the bonus only when both are set (entropy_bonus > 0 and calculate_entropy)
        out["algorithm.entropy_bonus"] = algo.entropy_coef
        out["algorithm.calculate_entropy"] = algo.entropy_coef > 0
    if algo.loss_agg in LOSS_AGG_FUNCS:
        out["algorithm.loss_agg_func"] = LOSS_AGG_FUNCS[algo.loss_agg]
    if algo.mini_batches is not None:  # the actor's global batch is the step's samples / n_minibatches
        out["algorithm.n_minibatches"] = algo.mini_batches
    out.update(kl_settings(spec))
    if algo.is_correction is not None:  # token level, truncate (the others are refused): FSDPActor.training_step
        out["algorithm.importance_sampling_fix"] = True
        out["algorithm.importance_sampling_clip"] = algo.is_correction.cap
    return out


def kl_settings(spec: Spec) -> dict[str, Any]:
    """The KL keys of an explicit ``kl_estimator`` / ``kl_in`` (none when both are null: the preset's): the estimator
    as ``kl_penalty_type``; the coefficient as ``kl_beta`` (the actor's KL loss) or ``reinpp_kl_beta`` (k-estimate
    subtracted from reinpp's token rewards; other advantages refuse KL in the reward)."""
    algo = spec.algorithm
    if algo.kl_coef <= 0 or (algo.kl_estimator is None and algo.kl_in is None):
        return {}
    estimator, where = kl_setting(algo)
    loss = where == "loss"
    return {"algorithm.kl_penalty_type": KL_PENALTY_TYPES[estimator],
            "algorithm.kl_beta": algo.kl_coef if loss else 0.0,
            "algorithm.reinpp_kl_beta": 0.0 if loss else algo.kl_coef}


def kl_refusals(spec: Spec) -> dict[str, str]:
    """The KL settings of the spec RLinf 0.3.0 cannot honour: the field's path -> why."""
    algo = spec.algorithm
    out: dict[str, str] = {}
    if algo.kl_coef <= 0 or (algo.kl_estimator is None and algo.kl_in is None):
        return out
    estimator, where = kl_setting(algo)
    if where == "reward" and ALGORITHMS.get(algo.name, {}).get("adv_type") != "reinpp":
        out["algorithm.kl_in"] = KL_REWARD_WHY
    elif where == "loss" and estimator == "k1" and options(spec)["training_backend"] == "fsdp":
        out["algorithm.kl_estimator" if algo.kl_estimator else "algorithm.kl_in"] = KL_K1_LOSS_WHY
    return out


def job_config(spec: Spec) -> dict[str, Any]:
    """The job's Hydra config: RLinf's reasoning sections with the mapped keys, then the overrides."""
    tree: dict[str, Any] = {"defaults": ["_self_"], "hydra": {"run": {"dir": "."}, "output_subdir": None}}
    for key, value in {**settings(spec), **overrides(spec)}.items():
        set_dotted(tree, key, value)
    return tree


def path_overrides(job: str, model: str, *, has_eval: bool) -> list[str]:
    """Hydra overrides for the paths that depend on where the job and the model live."""
    out = [f"agentbridge.spec_path={job}/spec.yaml", f"rollout.model.model_path={model}",
           f"data.train_data_paths=[{job}/data/train.jsonl]"]
    if has_eval:
        out.append(f"data.val_data_paths=[{job}/data/eval.jsonl]")
    return out
