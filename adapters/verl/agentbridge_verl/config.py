"""Map a spec to veRL 0.9.1's Hydra trainer config (pure: imports no veRL, torch or Hydra).

The job's config file extends ``ppo_trainer`` through Hydra's search path; paths that depend on where the job
lives (data, model, agent-loop YAML, reward file) are passed as command-line overrides by ``path_overrides``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentbridge.adapter import BackendOptions, set_dotted
from agentbridge.adapter.models import RewardModelArgs, backend_served
from agentbridge.adapter.scripts import worker_env
from agentbridge.spec.recipe import clip_settings, kl_setting
from agentbridge.spec.schema import Spec
from agentbridge_verl.algorithms import (
    ALGORITHMS,
    IS_MASK_FLOOR,
    KL_PENALTIES,
    LOSS_AGG_MODES,
    needs_critic,
)

BACKEND = "verl"
AGENT_NAME = "agentbridge"
CONFIG_NAME = "agentbridge_job"
AGENT_LOOP_TARGET = "agentbridge_verl.rollout.AgentBridgeAgentLoop"
REWARD_FILE = "reward.py"
REWARD_MODEL_ENGINE = "vllm"  # the driver scores through vLLM's /classify, the request veRL's reward loop sends
AGENT_LOOP_FILE = "agent_loop.yaml"
FILE_LOGGER_ENV = "VERL_FILE_LOGGER_PATH"  # veRL's file logger (verl.utils.tracking.FileLogger, in the TaskRunner)
# the runtime env main_ppo passes to ray.init, merged on veRL's own; veRL 0.9.1's config has no env_vars there: `+`
RAY_INIT_ENV_VARS = "ray_kwargs.ray_init.runtime_env.env_vars"

# options a spec may set under backend.options, and their defaults
OPTIONS: dict[str, Any] = {
    "rollout_engine": "vllm",         # vllm | sglang | trtllm (veRL 0.9.1's rollout replicas)
    "tensor_parallel_size": 1,
    "gpu_memory_utilization": 0.5,
    "micro_batch_size_per_gpu": 1,
    "agent_workers": 8,
    "reward_workers": 8,
    "logger": ["console"],
    "save_freq": 100,                 # veRL's recipes; the V1 trainer also saves at the last step when > 0
    "test_freq": -1,
    # core/reward_model with serve: backend: veRL's vLLM reward-model servers, on a GPU pool of their own
    # (reward.reward_model.enable_resource_pool): one server per reward_model_tensor_parallel_size GPUs of it
    "reward_model_nodes": 1,
    "reward_model_gpus_per_node": 1,
    "reward_model_tensor_parallel_size": 1,
    "reward_model_gpu_memory_utilization": 0.85,
}
ROLLOUT_ENGINES = ("vllm", "sglang", "trtllm")
# resources' sizing fields -> the option each is the default of (agentbridge.spec.sizing); gradient_checkpointing and
# save_total_limit set veRL's keys directly (sizing_settings)
SIZING_OPTIONS = {"micro_batch_size": "micro_batch_size_per_gpu", "save_steps": "save_freq"}


OWN_OPTIONS = BackendOptions(BACKEND, OPTIONS, SIZING_OPTIONS)
applies, options, overrides = OWN_OPTIONS.applies, OWN_OPTIONS.options, OWN_OPTIONS.overrides


def agent_workers(spec: Spec) -> int:
    """veRL's agent-loop workers: ``agent_workers``, lowered to the largest count that divides a step's episodes.

    veRL's ``AgentLoopManager`` splits each step's ``batch_size x group_size`` episodes into one equal chunk per
    worker (``DataProto.chunk`` asserts "only support equal chunk" otherwise).
    """
    episodes = spec.algorithm.batch_size * spec.algorithm.group_size
    wanted = max(1, int(options(spec)["agent_workers"]))
    return max(n for n in range(1, min(wanted, episodes) + 1) if episodes % n == 0)


def n_gpus_per_node(spec: Spec) -> int:
    """veRL's trainer always places workers on GPUs: a CPU spec (0 GPUs) compiles for one GPU per node."""
    return max(1, spec.resources.gpus_per_node)


def trainer_settings(spec: Spec) -> dict[str, Any]:
    """Every veRL key this spec sets, dotted, before ``backend.overrides``."""
    algo, agent, opts = spec.algorithm, spec.agent, options(spec)
    micro = int(opts["micro_batch_size_per_gpu"])
    settings: dict[str, Any] = {
        "algorithm.use_kl_in_reward": False,
        "data.train_batch_size": algo.batch_size,
        "data.max_prompt_length": agent.max_prompt_tokens,
        "data.max_response_length": agent.max_response_tokens,
        "data.return_raw_chat": True,
        "data.filter_overlong_prompts": False,
        "data.truncation": "error",
        "data.seed": spec.seed,
        "actor_rollout_ref.actor.optim.lr": algo.lr,
        "actor_rollout_ref.actor.optim.lr_warmup_steps": algo.warmup_steps,
        "actor_rollout_ref.actor.optim.weight_decay": 0.0,   # as TRL and OpenRLHF (veRL's default is 0.01)
        "actor_rollout_ref.actor.ppo_mini_batch_size": algo.batch_size,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.actor.use_kl_loss": algo.kl_coef > 0,
        "actor_rollout_ref.actor.kl_loss_coef": algo.kl_coef,
        "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
        "actor_rollout_ref.rollout.name": opts["rollout_engine"],
        "actor_rollout_ref.rollout.mode": "async",
        "actor_rollout_ref.rollout.n": algo.group_size,
        "actor_rollout_ref.rollout.temperature": agent.sampling.temperature,
        "actor_rollout_ref.rollout.top_p": agent.sampling.top_p,
        "actor_rollout_ref.rollout.top_k": agent.sampling.top_k or -1,
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": int(opts["tensor_parallel_size"]),
        "actor_rollout_ref.rollout.gpu_memory_utilization": float(opts["gpu_memory_utilization"]),
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.rollout.multi_turn.enable": True,
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": agent.max_turns,
        "actor_rollout_ref.rollout.agent.default_agent_loop": AGENT_NAME,
        "actor_rollout_ref.rollout.agent.num_workers": agent_workers(spec),
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": micro,
        "reward.custom_reward_function.name": "compute_score",
        "reward.reward_manager.name": "naive",
        "reward.num_workers": int(opts["reward_workers"]),
        "trainer.project_name": spec.logging.project or "agentbridge",
        "trainer.experiment_name": spec.name,
        "trainer.nnodes": spec.resources.nodes,
        "trainer.n_gpus_per_node": n_gpus_per_node(spec),
        "trainer.total_training_steps": algo.steps,
        # veRL stops at whichever comes first, total_epochs (30 by default) or the steps: an epoch has one step at
        # least, so this many epochs never end the run before its steps (64 rows in batches of 32 would at 60)
        "trainer.total_epochs": algo.steps,
        # backend.options.logger plus the spec's trackers (logging:), each once
        # the file logger always: its rows become the run's metrics.jsonl (agentbridge_verl.run_metrics)
        "trainer.logger": list(dict.fromkeys([*opts["logger"], "file", *spec.logging.enabled()])),
        "trainer.save_freq": int(opts["save_freq"]),
        # a HF model beside the FSDP shards: agentbridge evaluates the trained actor from it (after_rl)
        "actor_rollout_ref.actor.checkpoint.save_contents": ["model", "optimizer", "extra", "hf_model"],
        "trainer.test_freq": int(opts["test_freq"]),
        "trainer.val_before_train": False,
        **ALGORITHMS.get(algo.name, {}),
    }
    settings.update(recipe_settings(spec))
    settings.update(reward_model_settings(spec))
    if needs_critic(algo.name):
        settings.update({
            "critic.optim.lr": algo.lr * 10,
            "critic.ppo_micro_batch_size_per_gpu": micro,
        })
    settings.update(sizing_settings(spec))
    settings.update(memory_settings(spec))
    return settings


# a GPU job on one GPU: FSDP has nothing to shard over, and the actor's weights and Adam state would share the GPU
# with vLLM's reservation (veRL keeps them there while it generates unless offloaded): veRL's FSDP offload (engine/
# fsdp.yaml: param_offload, optimizer_offload "trade speed for memory"; its GRPO recipes offload the reference the
# same way). agentbridge.memory reads these keys
ONE_GPU_OFFLOAD = {"actor_rollout_ref.actor.fsdp_config.param_offload": True,
                   "actor_rollout_ref.actor.fsdp_config.optimizer_offload": True}
REF_OFFLOAD = {"actor_rollout_ref.ref.fsdp_config.param_offload": True}


def memory_settings(spec: Spec) -> dict[str, Any]:
    """veRL's offload for a GPU job on a single GPU (none otherwise): the actor's weights and optimizer state, and
    the reference's weights when there is one (KL); ``backend.overrides`` still win."""
    res = spec.resources
    if res.gpus_per_node <= 0 or res.nodes * res.gpus_per_node > 1:
        return {}
    return {**ONE_GPU_OFFLOAD, **(REF_OFFLOAD if spec.algorithm.kl_coef > 0 else {})}


def sizing_settings(spec: Spec) -> dict[str, Any]:
    """veRL keys of the sizing fields without a veRL option (none for a field left null: veRL's default, activation
    checkpointing on and every checkpoint kept), for the actor and, with PPO, the critic."""
    res, roles = spec.resources, ("actor", "critic") if needs_critic(spec.algorithm.name) else ("actor",)
    out: dict[str, Any] = {}
    if res.gradient_checkpointing is not None:
        out.update({("actor_rollout_ref" if role == "actor" else role) + ".model.enable_gradient_checkpointing":
                    res.gradient_checkpointing for role in roles})
    if res.save_total_limit is not None:
        out.update({f"trainer.max_{role}_ckpt_to_keep": res.save_total_limit for role in roles})
    return out


def recipe_settings(spec: Spec) -> dict[str, Any]:
    """veRL keys of the spec's explicit recipe fields (none for a field left null: the preset's)."""
    algo, actor = spec.algorithm, "actor_rollout_ref.actor."
    out: dict[str, Any] = {}
    # the gradient clip: actor.optim.clip_grad (actor.grad_clip is not read by 0.9.1's engine)
    out.update(clip_settings(algo, {"clip_low": actor + "clip_ratio_low", "clip_high": actor + "clip_ratio_high",
                                    "dual_clip": actor + "clip_ratio_c", "entropy_coef": actor + "entropy_coeff",
                                    "max_grad_norm": actor + "optim.clip_grad"}))
    if algo.loss_agg is not None:
        out[actor + "loss_agg_mode"] = LOSS_AGG_MODES[algo.loss_agg]
        if algo.loss_agg == "seq_mean_token_sum_norm":
            out[actor + "loss_scale_factor"] = spec.agent.max_response_tokens
    if algo.scale_advantages is not None:  # batch is refused (VerlBackend.recipe_why_not)
        out["algorithm.norm_adv_by_std_in_grpo"] = algo.scale_advantages == "group"
    if algo.epochs is not None:
        out[actor + "ppo_epochs"] = algo.epochs
    if algo.mini_batches is not None:  # in prompts: veRL multiplies by rollout.n
        out[actor + "ppo_mini_batch_size"] = algo.batch_size // algo.mini_batches
    if algo.kl_estimator is not None or algo.kl_in is not None:  # both need kl_coef > 0 (the spec says so)
        out.update(kl_settings(spec))
    out.update(is_correction_settings(spec))
    out.update(rollout_settings(spec))
    lora = spec.model.lora
    if lora is not None:  # FSDP's LoRA; the reference log-probs run with the adapter disabled: the base model
        out.update({"actor_rollout_ref.model.lora_rank": lora.rank,
                    "actor_rollout_ref.model.lora_alpha": lora.scaling_alpha(),
                    "actor_rollout_ref.model.target_modules": lora.target_modules})
    return out


def kl_settings(spec: Spec) -> dict[str, Any]:
    """veRL keys of the KL term (``spec.recipe.kl_setting``: the explicit estimator and place, else the preset's):
    in the loss, ``actor.kl_loss_type`` (``dp_actor``'s / ``losses.ppo_loss``'s ``kl_penalty``); in the reward,
    ``algorithm.use_kl_in_reward`` with ``kl_penalty`` and a fixed ``kl_ctrl.kl_coef`` (``ray_trainer.apply_kl_penalty``
    on the old log-probs, before the advantage), and no KL loss."""
    algo, actor = spec.algorithm, "actor_rollout_ref.actor."
    estimator, where = kl_setting(algo)
    if where == "loss":
        return {actor + "use_kl_loss": True, actor + "kl_loss_type": KL_PENALTIES[estimator],
                actor + "kl_loss_coef": algo.kl_coef, "algorithm.use_kl_in_reward": False}
    return {actor + "use_kl_loss": False, "algorithm.use_kl_in_reward": True,
            "algorithm.kl_penalty": KL_PENALTIES[estimator], "algorithm.kl_ctrl.type": "fixed",
            "algorithm.kl_ctrl.kl_coef": algo.kl_coef}


def is_correction_settings(spec: Spec) -> dict[str, Any]:
    """veRL's rollout correction (``algorithm.rollout_correction``, decoupled mode: the trainer's old log-probs
    against the rollout's ``rollout_log_probs``) for ``algorithm.is_correction``; none when it is null.

    truncate: ``rollout_is_threshold`` = cap (TIS: ``clamp(max=cap)``). mask: IcePop's ``"lower_upper"`` threshold,
    which zeroes a weight outside [lower, cap]; the lower bound is :data:`IS_MASK_FLOOR`, below the smallest weight
    veRL forms (it clamps the log-ratio at -20), so only weights above cap are zeroed. No rejection sampling
    (``rollout_rs``: it would drop tokens from the loss's denominator) and no batch normalisation of the weights.
    """
    isc = spec.algorithm.is_correction
    if isc is None:
        return {}
    rc = "algorithm.rollout_correction."
    threshold: float | str = isc.cap if isc.mode == "truncate" else f"{IS_MASK_FLOOR}_{isc.cap}"
    return {rc + "rollout_is": isc.level, rc + "rollout_is_threshold": threshold, rc + "rollout_rs": None,
            rc + "rollout_is_batch_normalize": False, rc + "bypass_mode": False}


def rollout_settings(spec: Spec) -> dict[str, Any]:
    """veRL's V1 trainer mode for ``algorithm.rollout``: sync, or ``colocate_async`` for async with partial rollouts
    (its ``FullyAsyncLLMServerClient`` resumes a generation cut by a weight update with the new weights), the
    staleness as ``trainer.v1.sampler.max_off_policy_threshold``: the model versions a trajectory may span, the
    version it trains on included (its prompt's step to the training step, plus one), so ``max_staleness + 1``;
    trajectories past it are dropped. one_step_off and async without partial are refused
    (``VerlBackend.recipe_why_not``)."""
    rollout = spec.algorithm.rollout
    if rollout is None:
        return {}
    v1 = "trainer.v1."
    if rollout.mode == "sync":
        return {v1 + "trainer_mode": "sync"}
    out: dict[str, Any] = {v1 + "trainer_mode": "colocate_async"}
    if rollout.max_staleness is not None:
        out.update({v1 + "sampler.max_off_policy_threshold": rollout.max_staleness + 1,
                    v1 + "sampler.max_off_policy_strategy": "drop"})
    return out


def served_reward_model(spec: Spec) -> RewardModelArgs | None:
    """The reward model the job serves (``core/reward_model`` with ``serve: backend``), or None."""
    models = backend_served(spec)
    return models[0] if models else None


def reward_model_settings(spec: Spec) -> dict[str, Any]:
    """veRL's reward-model server for a served ``core/reward_model`` (its ``model_path`` comes from ``launch.sh``).

    On a pool of its own (``enable_resource_pool``): the agent loop scores each episode as it ends, while the
    rollout runs, and veRL wakes a reward model that shares the trainer's GPUs only for its own scoring after the
    rollout. ``free_cache_engine`` off: veRL puts the servers to sleep at start when it is on and, with a pool of
    their own, never wakes them. One vLLM server per ``reward_model_tensor_parallel_size`` GPUs of the pool, behind
    veRL's reward router: more GPUs, more servers.
    """
    if served_reward_model(spec) is None:
        return {}
    opts = options(spec)
    rm = "reward.reward_model"
    return {
        f"{rm}.enable": True,
        f"{rm}.enable_resource_pool": True,
        f"{rm}.nnodes": int(opts["reward_model_nodes"]),
        f"{rm}.n_gpus_per_node": int(opts["reward_model_gpus_per_node"]),
        f"{rm}.rollout.name": REWARD_MODEL_ENGINE,
        f"{rm}.rollout.tensor_model_parallel_size": int(opts["reward_model_tensor_parallel_size"]),
        f"{rm}.rollout.gpu_memory_utilization": float(opts["reward_model_gpu_memory_utilization"]),
        f"{rm}.rollout.free_cache_engine": False,
    }


def job_config(spec: Spec) -> dict[str, Any]:
    """The job's Hydra config file: extends ``ppo_trainer`` and sets the mapped keys, then the overrides."""
    tree: dict[str, Any] = {}
    for key, value in {**trainer_settings(spec), **overrides(spec)}.items():
        set_dotted(tree, key, value)
    return {"hydra": {"searchpath": ["pkg://verl.trainer.config"]}, "defaults": ["ppo_trainer", "_self_"], **tree}


def path_overrides(spec: Spec, job: str, model: str, *, has_eval: bool, reward_model: str | None = None) -> list[str]:
    """Hydra overrides for the paths that depend on where the job and the models live (``reward_model``: where
    the served reward model is, default its ``path``)."""
    data = f"{job}/data"
    out = [
        f"data.train_files={data}/train.parquet",
        f"data.val_files={data}/{'eval' if has_eval else 'train'}.parquet",
        f"actor_rollout_ref.model.path={model}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={job}/{AGENT_LOOP_FILE}",
        f"reward.custom_reward_function.path={job}/{REWARD_FILE}",
    ]
    if needs_critic(spec.algorithm.name):
        out.append(f"critic.model.path={model}")
    served = served_reward_model(spec)
    if served is not None:
        out.append(f"reward.reward_model.model_path={reward_model or served.path}")
    return out


def run_format_env(run_dir: str, exported: tuple[str, ...] = ()) -> dict[str, str]:
    """The variables every Ray worker of the run needs for the run format (``run_dir`` and the values shell
    expressions in ``launch.sh``): where the agent loop records episodes, veRL's metrics file, then ``exported``
    (the trackers' directories)."""
    return worker_env(run_dir, (FILE_LOGGER_ENV, *exported))


def ray_worker_env_overrides(env: Mapping[str, str]) -> list[str]:
    """Hydra overrides adding ``env`` to the runtime env ``main_ppo`` gives ``ray.init``, so that the TaskRunner and
    every worker see it, on a cluster Ray was already running too (a worker inherits nothing from the entrypoint's
    shell there). Each value a quoted Hydra string: a number-like value stays a string, as Ray requires."""
    return [f"+{RAY_INIT_ENV_VARS}.{name}='{value}'" for name, value in env.items()]


def agent_loop_entries() -> list[dict[str, Any]]:
    """The agent-loop YAML veRL's ``AgentLoopWorker`` instantiates (``_target_`` is imported in the worker)."""
    return [{"name": AGENT_NAME, "_target_": AGENT_LOOP_TARGET}]
