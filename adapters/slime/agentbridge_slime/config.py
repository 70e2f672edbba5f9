"""The spec mapped to slime's command line (``train.py``: Megatron's flags, slime's own, and ``--sglang-*``).

The job keeps the flags as one YAML mapping (``slime_job.yaml``: flag name without ``--`` -> value; ``true`` is a bare
switch, a list is several values). ``launch.sh`` turns it into ``train.py``'s argument list with
``python -m agentbridge_slime.args`` and the validator parses the same list with slime's own parser, so what is
checked is what runs. Values may name ``${ROOT}`` (the job directory), ``${MODEL}`` and ``${RUN_DIR}``.

slime reaches agentbridge through two of its hooks: ``--custom-generate-function-path`` (the driver runs each
sample's episode: :func:`agentbridge_slime.rollout.generate`) and ``--custom-config-path`` (``agentbridge.yaml``:
slime sets its keys on ``args``; ``agentbridge_spec`` tells the generate function where the job's spec is).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, PositiveInt, StringConstraints

from agentbridge.adapter import BackendOptions
from agentbridge.spec import Spec
from agentbridge.spec.recipe import clip_settings, kl_setting

CONFIG_NAME = "slime_job.yaml"
SAVE_DIR = "${RUN_DIR}/checkpoints"  # --save: Megatron's torch_dist checkpoints (iter_NNNNNNN)
HF_SAVE = "${RUN_DIR}/hf/rollout_{rollout_id}"  # --save-hf: the trained model at each save, in HF format
CUSTOM_CONFIG = "agentbridge.yaml"  # slime's --custom-config-path: keys set on args by slime_validate_args

GENERATE_HOOK = "agentbridge_slime.rollout.generate"
DR_GRPO_REDUCER = "agentbridge_slime.reducers.dr_grpo_pg_loss_reducer"
DAPO_FILTER = "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"

# agentbridge algorithm -> slime flags (slime/utils/arguments.py: --advantage-estimator and the loss flags). slime's
# default pg-loss reduction is each sample's token mean, then the mean over samples (sum_of_sample_mean): grpo's.
ALGORITHMS: dict[str, dict[str, Any]] = {
    "grpo": {"advantage-estimator": "grpo", "eps-clip": 0.2},
    # no std in the group advantage; the pg loss summed over tokens and divided by the constant max response length
    "dr_grpo": {"advantage-estimator": "grpo", "eps-clip": 0.2, "disable-grpo-std-normalization": True,
                "custom-pg-loss-reducer-function-path": DR_GRPO_REDUCER},
    # clip-higher, token-level loss, and slime's dynamic-sampling filter (groups whose rewards all agree dropped)
    "dapo": {"advantage-estimator": "grpo", "eps-clip": 0.2, "eps-clip-high": 0.28, "calculate-per-token-loss": True,
             "dynamic-sampling-filter-path": DAPO_FILTER},
    # sequence-level importance ratio (slime's gspo), GSPO's clip range
    "gspo": {"advantage-estimator": "gspo", "eps-clip": 3e-4, "eps-clip-high": 4e-4},
    # KL as a penalty in the token rewards (--kl-coef), advantages whitened (slime requires --normalize-advantages)
    "reinforce_pp": {"advantage-estimator": "reinforce_plus_plus", "eps-clip": 0.2, "normalize-advantages": True,
                     "calculate-per-token-loss": True},
    "ppo": {"advantage-estimator": "ppo", "eps-clip": 0.2, "gamma": 1.0, "lambd": 0.95, "normalize-advantages": True,
            "calculate-per-token-loss": True},
}
# algorithm.loss_agg -> slime's pg-loss reduction: per token over the step, its default per-sample mean
# (sum_of_sample_mean), or the Dr. GRPO reducer (÷ --rollout-max-response-len); seq_mean_token_sum is refused
LOSS_AGG_FLAGS: dict[str, dict[str, Any]] = {
    "token_mean": {"calculate-per-token-loss": True, "custom-pg-loss-reducer-function-path": None},
    "seq_mean_token_mean": {"calculate-per-token-loss": False, "custom-pg-loss-reducer-function-path": None},
    "seq_mean_token_sum_norm": {"calculate-per-token-loss": False,
                                "custom-pg-loss-reducer-function-path": DR_GRPO_REDUCER},
}
KL_IN_REWARD = ("reinforce_pp", "ppo")  # the others take KL as a k3 (low_var_kl) term in the loss
# algorithm.kl_estimator -> --kl-loss-type (slime/utils/ppo_utils.compute_approx_kl: k1 d, k2 d^2/2, k3 / low_var_kl
# exp(-d) + d - 1, low_var_kl clamped to [-10, 10]); one flag for the KL loss and the KL in the reward (--kl-coef)
KL_LOSS_TYPES = {"k1": "k1", "k2": "k2", "k3": "low_var_kl"}
# is_correction: token truncate is --use-tis (vanilla_tis_function: clamp(w, tis_clip_low 0, tis_clip)); token mask
# slime's IcePop (w kept in [tis_clip_low, tis_clip], else 0); the sequence level slime's MIS helper, its keys in the
# job's custom config (args)
ICEPOP = "slime.backends.megatron_utils.loss.icepop_function"
MIS = "examples.train_infer_mismatch_helper.mis.compute_mis_weights_with_cp"
ASYNC_ENTRY = "train_async.py"  # one_step_off: rollout n+1 generated (weights of step n-1) while step n trains
# why slime cannot honour a recipe value (SlimeBackend.recipe_why_not / recipe_refusals)
KL_REWARD_WHY = ("slime's grpo and gspo returns (get_grpo_returns) ignore the KL: --kl-coef shapes the rewards of "
                 "reinforce_plus_plus and ppo only")
ASYNC_WHY = ("slime's asynchronous trainer, train_async.py, is one step off (algorithm.rollout.mode one_step_off); "
             "its fully-async rollout (slime.rollout.fully_async_rollout) bounds no staleness and requeues an aborted "
             "group to start over")
ONE_STEP_GPUS_WHY = ("slime's train_async.py does not colocate (it asserts not args.colocate): the actor and SGLang "
                     "need GPUs of their own, 2 or more")
# resources' sizing fields -> the option each is the default of (agentbridge.spec.sizing); gradient_checkpointing is
# Megatron's full recompute of every layer (RECOMPUTE, as slime's scripts/run-*.sh); save_total_limit is refused
SIZING_OPTIONS = {"micro_batch_size": "micro_batch_size", "save_steps": "save_interval"}
SIZING_WHY_NOT = {"save_total_limit": "slime's --save writes a Megatron checkpoint every --save-interval rollouts "
                                      "and neither slime nor Megatron-LM has a flag that deletes older ones"}
RECOMPUTE = {"recompute-granularity": "full", "recompute-method": "uniform", "recompute-num-layers": 1}
# a GPU job's memory (agentbridge.memory): the optimizer sharded over the data-parallel GPUs. slime sets it whatever
# the command line says (megatron_utils/arguments._set_default_megatron_args: "always use zero optimizer"); the job
# names it so that the flags say what runs
MEMORY_FLAGS = {"use-distributed-optimizer": True}
GROUPED = ("grpo", "dr_grpo", "dapo", "gspo")
# why slime cannot run the others (the capability error says it, naming the backends that can)
WHY_NOT = {"rloo": "slime's --advantage-estimator has no leave-one-out baseline (grpo, gspo, cispo, "
                   "reinforce_plus_plus, reinforce_plus_plus_baseline, ppo)"}
NOTES = [
    "dr_grpo: slime's grpo advantage without the std (--disable-grpo-std-normalization) and a pg-loss reducer "
    "dividing by the constant max response length (agentbridge_slime.reducers)",
    "dapo: clip 0.2/0.28, token-level loss and slime's dynamic-sampling filter (check_reward_nonzero_std); no "
    "overlong shaping",
    "training: Megatron only (slime's --train-backend); rollouts: SGLang behind slime's router",
]

# backend.options the slime adapter understands, with their defaults
class SlimeOptions(BaseModel):
    """``backend.options`` the slime adapter understands, with their defaults; each description says what a value
    must be (``agentbridge.adapter.option_problems``)."""

    model_script: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")] | None = Field(
        None, description="the name of one of slime's scripts/models/*.sh (e.g. qwen2.5-3B): the Megatron "
        "architecture flags (MODEL_ARGS)")
    micro_batch_size: PositiveInt = Field(1, description="a positive integer")
    tensor_parallel_size: PositiveInt = Field(1, description="a positive integer (Megatron's "
                                              "--tensor-model-parallel-size)")
    gpus_per_engine: PositiveInt = Field(1, description="a positive integer (--rollout-num-gpus-per-engine: SGLang "
                                         "tensor parallelism)")
    gpu_memory_utilization: float = Field(0.7, gt=0, le=1, description="a number in (0, 1] "
                                          "(--sglang-mem-fraction-static)")
    colocate: bool = Field(True, description="true or false (actor and rollout on the same GPUs)")
    # a checkpoint every N rollouts and at the last (misc.should_run_periodic_action: rollout_id == num_rollout - 1)
    save_interval: PositiveInt = Field(50, description="a positive integer (the trained model is the last rollout's "
                                       "checkpoint)")


OWN_OPTIONS = BackendOptions.of_model("slime", SlimeOptions, SIZING_OPTIONS)
applies, options = OWN_OPTIONS.applies, OWN_OPTIONS.options


def gpus_per_node(spec: Spec) -> int:
    return max(1, spec.resources.gpus_per_node)


def flag_name(key: str) -> str:
    """``--foo_bar`` / ``foo_bar`` / ``foo-bar`` -> ``foo-bar`` (how the job's YAML names slime's flags)."""
    return key.lstrip("-").replace("_", "-")


def settings(spec: Spec) -> dict[str, Any]:
    """Every flag this spec sets, before ``backend.overrides``."""
    algo, agent, opts = spec.algorithm, spec.agent, options(spec)
    gpus = gpus_per_node(spec)
    flags: dict[str, Any] = {
        # cluster: actor (Megatron) and rollout (SGLang) on the same GPUs unless colocate is off
        "actor-num-nodes": spec.resources.nodes,
        "actor-num-gpus-per-node": gpus,
        "colocate": bool(opts["colocate"]),
        "rollout-num-gpus-per-engine": int(opts["gpus_per_engine"]),
        "sglang-mem-fraction-static": float(opts["gpu_memory_utilization"]),
        # the model: Hugging Face weights for SGLang, the tokenizer and slime's HF loader (a local directory:
        # hf_checkpoint_saver._copy_hf_assets copies its config and tokenizer into each --save-hf model)
        "hf-checkpoint": "${MODEL}",
        # LOAD: SAVE_DIR when it holds a Megatron checkpoint (a relaunch resumes: slime_validate_args keeps it,
        # MegatronTrainRayActor.init starts at its iteration + 1), else the model's HF weights (slime_validate_args:
        # load_is_hf). REF_LOAD: the model; the reference for KL, and slime's fallback for load
        "load": "${LOAD}",
        "ref-load": "${REF_LOAD}",
        # Megatron checkpoints every save-interval rollouts and at the last (train.py, should_run_periodic_action),
        # each also written as a Hugging Face model (MegatronTrainRayActor.save_model: save_hf.format(rollout_id=..))
        "save": SAVE_DIR,
        "save-interval": int(opts["save_interval"]),
        "save-hf": HF_SAVE,
        # slime's step metrics: TensorBoard in $TENSORBOARD_DIR (launch.sh: RUN_DIR/tensorboard/slime), read back by
        # agentbridge_slime.run_metrics; the project / experiment name only name the folder when that is unset
        "use-tensorboard": True,
        "tb-project-name": spec.logging.project or "agentbridge",
        "tb-experiment-name": spec.name,
        # data: the job's rows; slime renders each prompt with the chat template, the driver renders its own
        "prompt-data": "${ROOT}/data/train.jsonl",
        "input-key": "prompt",
        "label-key": "label",
        "metadata-key": "metadata",
        "apply-chat-template": True,
        "rollout-shuffle": True,
        "rollout-seed": spec.seed,
        "seed": spec.seed,
        # batch: one optimizer step per rollout of batch_size prompts x group_size episodes
        "num-rollout": algo.steps,
        "rollout-batch-size": algo.batch_size,
        "n-samples-per-prompt": algo.group_size,
        "global-batch-size": algo.batch_size * algo.group_size,
        "micro-batch-size": int(opts["micro_batch_size"]),
        # lengths: the driver cuts every episode to these (agentbridge.rollout.agent_edge.fit_limits)
        "rollout-max-prompt-len": agent.max_prompt_tokens,
        "rollout-max-response-len": agent.max_response_tokens,
        "rollout-max-context-len": agent.max_prompt_tokens + agent.max_response_tokens,
        # sampling: SGLang's sampling params for every turn; the driver sets each turn's max_new_tokens
        "rollout-temperature": agent.sampling.temperature,
        "rollout-top-p": agent.sampling.top_p,
        "rollout-top-k": agent.sampling.top_k or -1,
        # agentbridge: the driver runs each sample's episode and scores it (the reward is set: no reward model)
        "custom-generate-function-path": GENERATE_HOOK,
        "custom-config-path": f"${{ROOT}}/{CUSTOM_CONFIG}",
        # the engine's log-probs of every generated token are the old log-probs (as on the other backends)
        "use-rollout-logprobs": True,
        # optimizer (Megatron's flags)
        "optimizer": "adam",
        "lr": algo.lr,
        "lr-decay-style": "constant",
        "lr-warmup-iters": algo.warmup_steps,
        "weight-decay": 0.0,
        "adam-beta1": 0.9,
        "adam-beta2": 0.999,
        "clip-grad": 1.0,
        "bf16": True,
        "tensor-model-parallel-size": int(opts["tensor_parallel_size"]),
        "attention-dropout": 0.0,
        "hidden-dropout": 0.0,
        "accumulate-allreduce-grads-in-fp32": True,
        "attention-softmax-in-fp32": True,
        "entropy-coef": 0.0,
    }
    if spec.resources.gradient_checkpointing:
        flags.update(RECOMPUTE)
    if spec.resources.gpus_per_node > 0:
        flags.update(MEMORY_FLAGS)
    flags.update(ALGORITHMS.get(algo.name, {}))
    if algo.name == "dapo":
        flags["over-sampling-batch-size"] = algo.batch_size
    flags.update(recipe_flags(spec))
    if algo.kl_coef > 0:
        estimator, where = kl_setting(algo)  # the preset's: k1 in the reward (reinforce_pp, ppo), else k3 in the loss
        if where == "reward":  # only one of kl_coef and kl_loss_coef may be set (slime_validate_args)
            flags["kl-coef"] = algo.kl_coef
            if algo.kl_estimator is not None or algo.kl_in is not None:
                flags["kl-loss-type"] = KL_LOSS_TYPES[estimator]
        else:
            flags.update({"use-kl-loss": True, "kl-loss-coef": algo.kl_coef, "kl-loss-type": KL_LOSS_TYPES[estimator]})
    flags.update(placement_flags(spec))
    return flags


def one_step_off(spec: Spec) -> bool:
    """Whether the spec asks for one-step off-policy rollouts (slime's ``train_async.py``)."""
    return spec.algorithm.rollout is not None and spec.algorithm.rollout.mode == "one_step_off"


def entry(spec: Spec) -> str:
    """slime's trainer script for the spec: ``train_async.py`` one step off, ``train.py`` otherwise."""
    return ASYNC_ENTRY if one_step_off(spec) else "train.py"


def placement_flags(spec: Spec) -> dict[str, Any]:
    """One step off: the actor and the rollout engines on GPUs of their own (``train_async.py`` refuses
    ``--colocate``): the actor on the first half of the job's GPUs (whole nodes when there are several), SGLang on the
    rest (``--rollout-num-gpus``); none otherwise."""
    if not one_step_off(spec):
        return {}
    gpus, nodes = gpus_per_node(spec), spec.resources.nodes
    actor_nodes, actor_gpus = (1, gpus // 2) if nodes == 1 else (nodes // 2, gpus)
    return {"colocate": False, "actor-num-nodes": actor_nodes, "actor-num-gpus-per-node": actor_gpus,
            "rollout-num-gpus": nodes * gpus - actor_nodes * actor_gpus}


def recipe_refusals(spec: Spec) -> dict[str, str]:
    """The KL and rollout settings of the spec slime cannot honour (they depend on the algorithm and the job's
    GPUs): the field's path -> why."""
    algo = spec.algorithm
    out: dict[str, str] = {}
    if algo.kl_coef > 0 and (algo.kl_estimator is not None or algo.kl_in is not None):
        if kl_setting(algo)[1] == "reward" and algo.name not in KL_IN_REWARD:
            out["algorithm.kl_in"] = KL_REWARD_WHY
    if one_step_off(spec) and gpus_per_node(spec) * spec.resources.nodes < 2:
        out["algorithm.rollout"] = ONE_STEP_GPUS_WHY
    return out


def custom_config(spec: Spec) -> dict[str, Any]:
    """The job's ``--custom-config-path`` keys (slime sets each on ``args``): the spec's path for the generate
    function; for a sequence-level IS correction the keys slime's MIS helper reads (examples/
    train_infer_mismatch_helper/mis.py: the weight at ``tis_level``, truncated or masked at ``tis_upper_bound``, no
    lower bound, no rejection sampling, no batch normalisation)."""
    out: dict[str, Any] = {"agentbridge_spec": "spec.yaml"}
    isc = spec.algorithm.is_correction
    if isc is not None and isc.level == "sequence":
        out.update({"tis_level": "sequence", "tis_mode": isc.mode, "tis_lower_bound": 0.0,
                    "tis_upper_bound": isc.cap, "use_rs": False, "rs_level": "sequence", "rs_lower_bound": None,
                    "rs_upper_bound": None, "rs_veto_threshold": None, "tis_batch_normalize": False})
    return out


def recipe_flags(spec: Spec) -> dict[str, Any]:
    """Flags of the spec's explicit recipe fields (none for a field left null: the preset's); False or None
    leaves a flag out."""
    algo = spec.algorithm
    out: dict[str, Any] = {}
    out.update(clip_settings(algo, {"clip_low": "eps-clip", "clip_high": "eps-clip-high", "dual_clip": "eps-clip-c",
                                    "entropy_coef": "entropy-coef", "max_grad_norm": "clip-grad"}))
    if algo.loss_agg in LOSS_AGG_FLAGS:
        out.update(LOSS_AGG_FLAGS[algo.loss_agg])
    if algo.scale_advantages is not None:  # batch is refused (SlimeBackend.recipe_why_not)
        out["disable-grpo-std-normalization"] = algo.scale_advantages == "none"
    if algo.mini_batches is not None:  # samples per optimizer step; epochs above 1 are refused
        out["global-batch-size"] = algo.batch_size * algo.group_size // algo.mini_batches
    isc = algo.is_correction
    if isc is not None:  # the trainer's recomputed old log-probs against the engine's (use_tis refuses the other)
        out.update({"use-rollout-logprobs": False, "use-tis": True, "tis-clip": isc.cap})
        if isc.level == "sequence":
            out["custom-tis-function-path"] = MIS
        elif isc.mode == "mask":
            out["custom-tis-function-path"] = ICEPOP
    return out


def overrides(spec: Spec) -> dict[str, Any]:
    """``backend.overrides`` as flag names (``{eps-clip-high: 0.3}``; null or false removes a flag), when they are
    slime's."""
    return {flag_name(k): v for k, v in OWN_OPTIONS.overrides(spec).items()}


def job_config(spec: Spec) -> dict[str, Any]:
    """The job's flags: the mapped ones, then the overrides (a flag set to null or false is left out)."""
    merged = {**settings(spec), **overrides(spec)}
    return {k: v for k, v in merged.items() if v is not None and v is not False}


def argv(config: dict[str, Any], paths: dict[str, str]) -> list[str]:
    """``train.py``'s arguments for the job's flags, ``${NAME}`` replaced from ``paths`` (ROOT, MODEL, RUN_DIR, ...)."""

    def value(v: Any) -> str:
        text = str(v)
        for name, path in paths.items():
            text = text.replace(f"${{{name}}}", path)
        return text

    out: list[str] = []
    for key, v in config.items():
        if v is None or v is False:
            continue
        out.append(f"--{flag_name(key)}")
        if v is True:
            continue
        out += [value(x) for x in v] if isinstance(v, list) else [value(v)]
    return out
