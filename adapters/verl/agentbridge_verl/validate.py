"""Validate a compiled job with veRL 0.9.1's own code, on CPU, without Ray: every problem is one line.

Composes the job's Hydra config (extending ``ppo_trainer``), runs ``validate_config`` and the typed config
dataclasses as ``main_ppo`` does, loads the reward function, reward manager, agent-loop class and the advantage /
policy-loss functions, checks that the trainer ``trainer.use_v1`` selects can start (the V1 trainer needs
TransferQueue) and that a served reward model's server can start (``reward.reward_model``: its typed config, the
trainer's resource pools, ``RewardModelManager``'s asserts, its model), and rejects keys veRL would silently ignore.
Run as ``python -m agentbridge_verl.validate JOB_DIR [--json]`` in the veRL environment.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from agentbridge import adapter as kit
from agentbridge.adapter import Problem
from agentbridge.spec import Spec, recipe
from agentbridge_verl import VERL_PIN
from agentbridge_verl.config import (
    AGENT_LOOP_FILE,
    CONFIG_NAME,
    REWARD_MODEL_ENGINE,
    path_overrides,
    ray_worker_env_overrides,
    run_format_env,
    served_reward_model,
)

RUN_DIR_PLACEHOLDER = "/run-dir"  # what validation composes the run format's overrides with (launch.sh: $RUN_DIR)

# legacy top-level keys that still compose in 0.9.1 but main_ppo never reads (only fully_async_main migrates them)
LEGACY_PREFIXES = {
    "custom_reward_function": "reward.custom_reward_function",
    "reward_model": "reward.reward_manager / reward.reward_model",
}
REQUIRED_COLUMNS = ("prompt", "data_source", "reward_model", "extra_info", "agent_name")
TRANSFER_QUEUE_MIN = "0.1.10"  # verl[verl-core]'s bound; agentbridge-verl[backend] pins 0.1.11


def _config_dir() -> str:
    import verl

    return os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def legacy_keys(job_keys: dict[str, Any]) -> list[Problem]:
    """Legacy reward keys veRL 0.9.1 accepts and then ignores."""
    problems = []
    for dotted in job_keys:
        head = dotted.split(".", 1)[0]
        if head in LEGACY_PREFIXES:
            problems.append(Problem(f"{CONFIG_NAME}.yaml: {dotted}", f"legacy key that veRL {VERL_PIN}'s main_ppo "
                                    f"ignores; use {LEGACY_PREFIXES[head]}"))
    return problems


def _dataclasses(cfg: Any, model_files: bool = True) -> list[Problem]:
    """Build the typed configs ``main_ppo``'s workers build (ref keys remapped like ``engine_workers``).
    Without ``model_files`` (a hub id not on this machine) the model's config is left out: veRL reads its files."""
    from omegaconf import open_dict
    from verl.trainer.ppo.utils import need_critic
    from verl.utils.config import omega_conf_to_dataclass

    arr = cfg.actor_rollout_ref
    ref = arr.ref.copy()
    with open_dict(ref):
        ref.ppo_mini_batch_size = arr.actor.ppo_mini_batch_size
        ref.ppo_micro_batch_size_per_gpu = ref.pop("log_prob_micro_batch_size_per_gpu", None)
        ref.ppo_micro_batch_size = ref.pop("log_prob_micro_batch_size", None)
        ref.use_dynamic_bsz = ref.pop("log_prob_use_dynamic_bsz", False)
        ref.ppo_max_token_len_per_gpu = ref.pop("log_prob_max_token_len_per_gpu", None)
    parts = {"algorithm": cfg.algorithm, "actor_rollout_ref.actor": arr.actor, "actor_rollout_ref.rollout":
             arr.rollout, "actor_rollout_ref.model": arr.model, "actor_rollout_ref.ref": ref}
    if not model_files:
        parts.pop("actor_rollout_ref.model")
    if need_critic(cfg):
        parts["critic"] = cfg.critic
    problems = []
    for where, node in parts.items():
        try:
            omega_conf_to_dataclass(node)
        except Exception as e:  # noqa: BLE001 - any rejection is reported as one line
            problems.append(Problem(where, f"veRL rejects it: {kit.first_line(e)}"))
    return problems


def _algorithm(cfg: Any) -> list[Problem]:
    from verl.trainer.ppo import core_algos

    problems = []
    try:
        core_algos.get_adv_estimator_fn(cfg.algorithm.adv_estimator)
    except Exception as e:  # noqa: BLE001
        problems.append(Problem("algorithm.adv_estimator", f"veRL {VERL_PIN} has no such estimator: "
                                f"{kit.first_line(e)}"))
    loss_mode = cfg.actor_rollout_ref.actor.policy_loss.loss_mode
    try:
        core_algos.get_policy_loss_fn(loss_mode)
    except Exception as e:  # noqa: BLE001
        problems.append(Problem("actor_rollout_ref.actor.policy_loss.loss_mode",
                                f"veRL {VERL_PIN} has no such policy loss: {kit.first_line(e)}"))
    return problems


def _reward(cfg: Any) -> list[Problem]:
    from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls

    problems = []
    try:
        resolve_reward_manager_cls(cfg)
    except Exception as e:  # noqa: BLE001
        problems.append(Problem("reward.reward_manager", f"veRL cannot load it: {kit.first_line(e)}"))
    try:
        fn = get_custom_reward_fn(cfg)
    except Exception as e:  # noqa: BLE001
        return [*problems, Problem("reward.custom_reward_function", f"veRL cannot load it: {kit.first_line(e)}")]
    if fn is None:
        problems.append(Problem("reward.custom_reward_function.path", "veRL loads no reward function; the "
                                "driver's reward would not reach samples the reward loop scores"))
    return problems


def _agent_loop(job_dir: Path, cfg: Any) -> list[Problem]:
    import hydra
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase

    path = Path(cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path)
    problems, names = [], set()
    for entry in yaml.safe_load(path.read_text()) or []:
        names.add(entry.get("name"))
        try:
            cls = hydra.utils.get_class(entry["_target_"])
        except Exception as e:  # noqa: BLE001
            problems.append(Problem(f"{AGENT_LOOP_FILE}: {entry.get('name')}", f"cannot import: {kit.first_line(e)}"))
            continue
        if not issubclass(cls, AgentLoopBase):
            problems.append(Problem(f"{AGENT_LOOP_FILE}: {entry.get('name')}", f"{entry['_target_']} is not a "
                                    "veRL AgentLoopBase"))
    import pyarrow.parquet as pq

    for split in ("train", "eval"):
        file = job_dir / "data" / f"{split}.parquet"
        if not file.is_file():
            continue
        table = pq.read_table(file)
        missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
        if missing:
            problems.append(Problem(f"data/{file.name}", f"missing columns: {', '.join(missing)}"))
            continue
        unknown = sorted(set(table.column("agent_name").to_pylist()) - names)
        if unknown:
            problems.append(Problem(f"data/{file.name}", f"agent_name {', '.join(unknown)} is not in "
                                    f"{AGENT_LOOP_FILE} ({', '.join(sorted(map(str, names)))})"))
    return problems


def transfer_queue_version() -> str | None:
    """The installed TransferQueue's version, or None when ``transfer_queue`` does not import here."""
    from agentbridge.adapter.training import package_version

    return package_version("TransferQueue") if importlib.util.find_spec("transfer_queue") is not None else None


def _trainer_path(cfg: Any) -> list[Problem]:
    """The V1 trainer (``trainer.use_v1``, veRL's default) keeps rollouts in TransferQueue: it must be installed;
    its ``trainer.v1.trainer_mode`` must name one of its trainers (the legacy trainer has no async mode)."""
    from packaging.version import Version

    mode = (cfg.trainer.get("v1") or {}).get("trainer_mode", "sync")
    if not cfg.trainer.get("use_v1", True):
        if mode != "sync":
            return [Problem("trainer.v1.trainer_mode", f"{mode} is a V1 trainer mode; trainer.use_v1 false runs the "
                            "legacy trainer, which is synchronous")]
        if (cfg.algorithm.get("filter_groups") or {}).get("enable", False):  # dapo's dynamic sampling
            return [Problem("trainer.use_v1", "algorithm.filter_groups (DAPO's dynamic sampling) runs in veRL's V1 "
                            "trainer only; the legacy trainer would train on every group without a word")]
        return []
    fix = ("install TransferQueue==0.1.11 (agentbridge-verl[backend]) or set backend.overrides "
           "{trainer: {use_v1: false}} for the legacy trainer")
    if (cfg.algorithm.get("filter_groups") or {}).get("enable", False):  # the legacy trainer cannot run it
        fix = "install TransferQueue==0.1.11 (agentbridge-verl[backend]): DAPO's dynamic sampling needs the V1 trainer"
    version = transfer_queue_version()
    if version is None:
        return [Problem("trainer.use_v1", f"veRL's V1 trainer needs TransferQueue, which is not installed "
                        f"(main_ppo would stop with \"No module named 'transfer_queue'\"); {fix}")]
    if Version(version) < Version(TRANSFER_QUEUE_MIN):
        return [Problem("trainer.use_v1", f"veRL's V1 trainer needs TransferQueue>={TRANSFER_QUEUE_MIN}, "
                        f"{version} is installed; {fix}")]
    if mode != "sync":  # main_ppo picks the trainer class by this name (sync: the default, always there)
        from verl.trainer.ppo.v1 import get_trainer_cls

        try:
            get_trainer_cls(mode)
        except Exception as e:  # noqa: BLE001
            return [Problem("trainer.v1.trainer_mode", f"veRL {VERL_PIN} has no such trainer: {kit.first_line(e)}")]
    return []


def _images(model: str, cfg: Any, agent: Any, skipped: list[str]) -> list[Problem]:
    """For a vision-language model: veRL builds a processor (pixel_values, M-RoPE position ids) whose image token
    is the placeholder the driver expands, and the batch keeps the multimodal inputs."""
    from agentbridge.adapter.models import is_vlm
    from agentbridge_verl.processor import VERL_PROCESSORS, processor_class, verl_processor

    if not is_vlm(model):
        return []
    processor, note = verl_processor(model)
    if note:
        skipped.append(f"model.path: {note}")
    if processor is None:
        return [Problem("model.path", f"veRL {VERL_PIN} builds no multimodal processor for this model "
                        f"({processor_class(model) or 'no processor class'}); it binds only "
                        f"{', '.join(VERL_PROCESSORS)}, so images would not reach the batch")]
    from verl.utils.tokenizer import get_processor_token_id

    problems = []
    if not cfg.data.get("return_multi_modal_inputs", True):
        problems.append(Problem("data.return_multi_modal_inputs", "must be true for a vision-language model: "
                                "without it the batch carries no pixel_values"))
    image_token = get_processor_token_id(processor, "image")
    if agent is not None and agent.renderer.image_token_id != image_token:
        problems.append(Problem("model.chat_template", f"the driver's image placeholder (token id "
                                f"{agent.renderer.image_token_id}) is not the processor's image token "
                                f"({image_token}); veRL would not find the images in the sequence"))
    return problems


def _attention(cfg: Any, spec: Spec, skipped: list[str]) -> list[Problem]:
    """veRL builds the actor with ``flash_attention_2`` unless the model's ``override_config`` says otherwise;
    without flash-attn installed, a job for GPUs (``resources.gpus_per_node``) fails when it builds the model."""
    model = cfg.actor_rollout_ref.model
    impl = (model.get("override_config") or {}).get("attn_implementation", "flash_attention_2")
    if spec.resources.gpus_per_node <= 0 or impl != "flash_attention_2" \
            or importlib.util.find_spec("flash_attn") is not None:
        return []
    where = "actor_rollout_ref.model.override_config.attn_implementation"
    import torch

    if not torch.cuda.is_available():  # a CPU environment checking a GPU job: the GPU recipe installs flash-attn
        skipped.append(f"{where}: flash_attention_2 needs flash-attn, not in this CPU environment "
                       "(`agentbridge backends setup verl --gpu` installs it)")
        return []
    return [Problem(where, "flash_attention_2 needs flash-attn, which is not installed: run `agentbridge backends "
                           "setup verl --gpu`, or set it to sdpa with "
                           "actor_rollout_ref.model.use_remove_padding=false")]


def reward_model_path(spec: Spec) -> str | None:
    """Where the served reward model is on this machine (``launch.sh``'s ``RM_MODEL``), else its ``path`` (veRL is
    given the path as written)."""
    served = served_reward_model(spec)
    return None if served is None else kit.local_model_path(served.path) or served.path


def _reward_model(cfg: Any, spec: Spec, skipped: list[str]) -> list[Problem]:
    """veRL's reward-model server, as the trainer starts it: the typed ``RewardModelConfig``, the trainer's
    resource pools (``PPOTrainer._init_resource_pool_mgr``), ``RewardModelManager``'s asserts (a pool that holds
    one server at least, a tokenizer), its ``HFModelConfig`` of ``model_path``; and what the agent loop's
    scoring needs: a served reward model enabled on a pool of its own, awake, on vLLM, a classification head."""
    from types import SimpleNamespace

    from verl.utils.config import omega_conf_to_dataclass

    rm, where = cfg.reward.reward_model, "reward.reward_model"
    served = served_reward_model(spec)
    if not rm.enable:
        return [] if served is None else [Problem(f"{where}.enable", "core/reward_model serve: backend needs veRL's "
                                                  "reward-model server; backend.overrides turns it off")]
    try:
        config = omega_conf_to_dataclass(rm)
    except Exception as e:  # noqa: BLE001
        return [Problem(where, f"veRL rejects it: {kit.first_line(e)}")]
    try:
        from verl.trainer.ppo.v1.trainer_base import PPOTrainer

        trainer = SimpleNamespace(config=cfg.copy())
        PPOTrainer._init_resource_pool_mgr(trainer)  # reads config, sets the pools
        pools = trainer.resource_pool_manager.resource_pool_spec
    except Exception as e:  # noqa: BLE001
        return [Problem(where, f"veRL's trainer rejects its resource pool: {kit.first_line(e)}")]
    r = config.rollout
    per_server = r.tensor_model_parallel_size * r.data_parallel_size * r.pipeline_model_parallel_size
    gpus = sum(pools.get("reward_pool") or pools["global_pool"])
    if gpus // per_server <= 0:  # RewardModelManager._initialize_llm_servers's assert
        return [Problem(f"{where}.rollout.tensor_model_parallel_size", f"not enough GPUs to run the reward model: "
                        f"its pool has {gpus}, one server needs {per_server} (tensor x data x pipeline parallel)")]
    problems = []
    if r.skip_tokenizer_init:
        problems.append(Problem(f"{where}.rollout.skip_tokenizer_init", "veRL's reward model needs its tokenizer "
                                "(RewardModelManager asserts it is false)"))
    if served is None:
        return problems
    if not rm.enable_resource_pool:
        problems.append(Problem(f"{where}.enable_resource_pool", "must be true: the agent loop scores each episode "
                                "while the rollout runs, and veRL wakes a reward model on the trainer's GPUs only "
                                "after it"))
    elif r.free_cache_engine:
        problems.append(Problem(f"{where}.rollout.free_cache_engine", "must be false: veRL puts the reward-model "
                                "servers to sleep at start and, on a pool of their own, never wakes them"))
    if r.name != REWARD_MODEL_ENGINE:
        problems.append(Problem(f"{where}.rollout.name", f"must be {REWARD_MODEL_ENGINE}: the driver scores "
                                f"through vLLM's /classify, got {r.name!r}"))
    path = Path(str(rm.model_path or ""))
    if not (path / "config.json").is_file():
        skipped.append(f"{where}.model_path: {rm.model_path} is not on this machine; its config is not read here")
        return problems
    try:
        from verl.workers.config import HFModelConfig

        hf_config = HFModelConfig(path=str(path)).hf_config  # as RewardModelManager builds it
    except Exception as e:  # noqa: BLE001
        return [*problems, Problem(f"{where}.model_path", f"veRL cannot load it: {kit.first_line(e)}")]
    architectures = getattr(hf_config, "architectures", None) or []
    if architectures and not any(a.endswith("ForSequenceClassification") for a in architectures):
        problems.append(Problem("reward", f"core/reward_model path {served.path}: a {architectures[0]}, not a "
                                "sequence-classification reward model (vLLM's /classify reads its score head)"))
    elif served.label >= int(getattr(hf_config, "num_labels", 1)):
        problems.append(Problem("reward", f"core/reward_model label {served.label}: the model has "
                                f"{hf_config.num_labels} output(s)"))
    context = getattr(hf_config, "max_position_embeddings", None)
    if isinstance(context, int) and served.max_length > context:  # vLLM refuses truncate_prompt_tokens above it
        problems.append(Problem("reward", f"core/reward_model max_length {served.max_length}: the model reads "
                                f"{context} tokens at most (vLLM refuses longer truncate_prompt_tokens)"))
    return problems


def compose_job(job_dir: Path, spec: Any, model: str, extra: Sequence[str] = ()) -> Any:
    """The job's trainer config as ``main_ppo`` composes it from ``launch.sh``'s command line (unresolved), then
    ``extra`` overrides."""
    job_dir = Path(job_dir).resolve()
    overrides = path_overrides(spec, str(job_dir), model, has_eval=(job_dir / "data" / "eval.parquet").is_file(),
                               reward_model=reward_model_path(spec)) + list(extra)
    return kit.compose_hydra(job_dir, CONFIG_NAME, overrides)


KL_ESTIMATORS = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}


def semantics_of(cfg: Any, spec: Any = None) -> dict[str, str]:
    """What veRL will do, read from the composed config (and, with the job's ``spec``, the overlong shaping of
    agentbridge's rollout): the aspects of ``agentbridge.compare.semantics``, in its shared words, then `` · `` and
    veRL's own names."""
    a, actor, r = cfg.algorithm, cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    grouped = a.adv_estimator in ("grpo", "dapo", "grpo_passk", "gspo")
    advantage = {"grpo": "r - group mean", "rloo": "r - mean of the others", "reinforce_plus_plus":
                 "whitened returns", "gae": "GAE"}.get(a.adv_estimator, str(a.adv_estimator))
    if grouped:
        advantage += ", / group std" if a.get("norm_adv_by_std_in_grpo", True) else ", no std"
    kl = []
    if actor.get("use_kl_loss"):
        kl.append(f"{KL_ESTIMATORS.get(actor.kl_loss_type, actor.kl_loss_type)} in the loss, coef {actor.kl_loss_coef}")
    if a.get("use_kl_in_reward"):
        kl.append(f"{KL_ESTIMATORS.get(a.kl_penalty, a.kl_penalty)} in the reward, coef {a.kl_ctrl.kl_coef}")
    level = "sequence" if actor.policy_loss.loss_mode == "gspo" else "token"
    optim = actor.optim
    schedule = optim.get("lr_scheduler_type") or optim.get("warmup_style")
    mini = max(1, int(cfg.data.train_batch_size) // int(actor.ppo_mini_batch_size))
    return {
        "advantage": f"{advantage} · adv_estimator {a.adv_estimator}",
        "loss aggregation": str(actor.loss_agg_mode),
        "clip": f"({actor.clip_ratio_low}, {actor.clip_ratio_high}) on {level} ratios · "
                f"loss_mode {actor.policy_loss.loss_mode}",
        "KL": "; ".join(kl) or "none",
        "entropy bonus": f"{recipe.entropy_words(actor.get('entropy_coeff'))} · actor.entropy_coeff "
                         f"{actor.get('entropy_coeff')}",
        "IS correction": _is_semantics(a.get("rollout_correction")),
        "rollout mode": _rollout_semantics(cfg),
        "group filtering": "groups with equal rewards dropped" if a.filter_groups.get("enable") else "none",
        "sampling": recipe.sampling_words(r.temperature, r.top_p, r.top_k),
        "lengths": f"prompt {cfg.data.max_prompt_length}, response {cfg.data.max_response_length} tokens",
        # agentbridge's rollout masks and penalises as algorithm.overlong says, the same on every backend
        **({} if spec is None else {"overlong": recipe.overlong_words(spec.algorithm.overlong)}),
        "optimizer": f"{recipe.optimizer_words(optim.lr, schedule)} · {optim.lr_warmup_steps} warmup steps, {schedule}",
        "grad clip": _grad_clip_semantics(optim),
        "batch": f"{recipe.batch_words(cfg.data.train_batch_size, r.n, actor.ppo_epochs, mini)} · "
                 f"ppo_mini_batch_size {actor.ppo_mini_batch_size} prompts, ppo_epochs {actor.ppo_epochs}",
        "LoRA": _lora_semantics(cfg.actor_rollout_ref.model),
    }


def _grad_clip_semantics(optim: Any) -> str:
    """The ``grad clip`` aspect: the engine clips to ``actor.optim.clip_grad`` (its deprecated ``grad_clip``, when
    set, replaces it: ``OptimizerConfig.__post_init__``); ``actor.grad_clip`` is not read by 0.9.1's engine."""
    norm = optim.get("grad_clip")
    key = "actor.optim.grad_clip" if norm is not None else "actor.optim.clip_grad"
    norm = optim.get("clip_grad") if norm is None else norm
    return f"{recipe.grad_clip_words(norm)} · {key} {norm}"


def _lora_semantics(model: Any) -> str:
    """The ``LoRA`` aspect of ``actor_rollout_ref.model``: FSDP's adapter when ``lora_rank`` > 0 (veRL has no
    dropout key), else full fine-tuning."""
    rank = int(model.get("lora_rank", 0) or 0)
    if rank <= 0:
        return f"full fine-tuning · lora_rank {rank}"
    words = recipe.lora_words(rank, model.get("lora_alpha", 16), model.get("target_modules", "all-linear"))
    return f"{words} · lora_rank {rank}, lora_alpha {model.get('lora_alpha')}"


def _is_semantics(rc: Any) -> str:
    """The ``IS correction`` aspect of ``algorithm.rollout_correction`` (decoupled mode: the trainer's old log-probs
    against the rollout's): ``<level> truncate|mask, cap C`` (mask: IcePop's zeroing, with its lower bound when it
    can bite), rejection sampling and batch normalisation when set."""
    from verl.trainer.ppo.rollout_corr_helper import SAFETY_BOUND, _parse_rollout_is_threshold

    if rc is None or (rc.get("rollout_is") is None and rc.get("rollout_rs") is None):
        return "none · rollout_correction.rollout_is null"
    parts, own = [], []
    if rc.get("rollout_is") is not None:
        threshold = rc.get("rollout_is_threshold", 2.0)
        try:
            upper, lower = _parse_rollout_is_threshold(threshold)
        except (TypeError, ValueError):  # veRL rejects it: _rollout_correction says why
            parts.append(f"{rc.rollout_is}, threshold {threshold} (rejected)")
        else:
            # no weight veRL forms is below exp(-SAFETY_BOUND): a lower bound under it never bites
            low = "" if lower is None or lower < math.exp(-SAFETY_BOUND) else f" or below {lower:g}"
            mode = "truncate" if lower is None else "mask"
            parts.append(recipe.is_correction_words(rc.rollout_is, mode, upper) + low)
        if rc.get("rollout_is_batch_normalize", False):
            parts[-1] += ", normalised to mean 1"
        own.append(f"rollout_is {rc.rollout_is}, rollout_is_threshold {threshold}")
    if rc.get("rollout_rs") is not None:
        parts.append(f"rejection {rc.rollout_rs} at {rc.get('rollout_rs_threshold')}")
        own.append(f"rollout_rs {rc.rollout_rs}")
    if rc.get("bypass_mode", False):
        parts.append("against the rollout's log-probs (bypass)")
        own.append("bypass_mode")
    return "; ".join(parts) + " · " + ", ".join(own)


def _rollout_semantics(cfg: Any) -> str:
    """The ``rollout mode`` aspect: veRL's V1 trainer mode (the legacy trainer is synchronous); an async mode's
    staleness is ``max_off_policy_threshold`` - 1 (the threshold counts the versions a trajectory spans)."""
    if not cfg.trainer.get("use_v1", True):
        return f"{recipe.rollout_words('sync')} · legacy trainer (trainer.use_v1 false)"
    v1 = cfg.trainer.v1
    mode = v1.get("trainer_mode", "sync")
    if mode == "sync":
        return f"{recipe.rollout_words('sync')} · trainer.v1.trainer_mode sync"
    sampler = v1.get("sampler") or {}
    threshold = sampler.get("max_off_policy_threshold")  # null: no bound
    words = recipe.rollout_words("async", None if threshold is None else int(threshold) - 1, partial=True)
    return f"{words} · trainer.v1.trainer_mode {mode}, max_off_policy_threshold {threshold}, " \
           f"{sampler.get('max_off_policy_strategy', 'drop')}"


def _rollout_correction(cfg: Any) -> list[Problem]:
    """``algorithm.rollout_correction`` as veRL's trainer applies it: its helper accepts the level and thresholds (run
    on one token), and the rollout returns the log-probs it reads (without ``rollout_log_probs`` the trainer skips
    the correction without a word)."""
    import torch
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    rc, where = cfg.algorithm.get("rollout_correction"), "algorithm.rollout_correction"
    if rc is None or (rc.get("rollout_is") is None and rc.get("rollout_rs") is None):
        return []
    zero = torch.zeros(1, 1)
    try:
        compute_rollout_correction_and_rejection_mask(
            zero, zero, torch.ones(1, 1), rollout_is=rc.get("rollout_is"),
            rollout_is_threshold=rc.get("rollout_is_threshold", 2.0),
            rollout_is_batch_normalize=rc.get("rollout_is_batch_normalize", False),
            rollout_rs=rc.get("rollout_rs"), rollout_rs_threshold=rc.get("rollout_rs_threshold"))
    except Exception as e:  # noqa: BLE001
        return [Problem(where, f"veRL rejects it: {kit.first_line(e)}")]
    if not rc.get("bypass_mode", False) and not cfg.actor_rollout_ref.rollout.get("calculate_log_probs", False):
        return [Problem("actor_rollout_ref.rollout.calculate_log_probs", "must be true: veRL's trainer applies "
                        f"{where} only to a batch with the rollout's log-probs, and skips it without them")]
    return []


def _validate(job_dir: Path, start: kit.JobCheck, spec: Spec, skipped: list[str],
              semantics: dict[str, str]) -> list[Problem]:
    problems, model = start.problems, start.model
    from omegaconf import OmegaConf

    raw = yaml.safe_load((job_dir / f"{CONFIG_NAME}.yaml").read_text())
    job_keys = kit.flatten({k: v for k, v in raw.items() if k not in ("hydra", "defaults")})
    base = kit.compose_hydra(_config_dir(), "ppo_trainer")
    # keys ppo_trainer does not have (its empty mappings are open: ray_kwargs.ray_init, override_config)
    unknown = kit.unknown_config_keys(job_keys, base, f"{CONFIG_NAME}.yaml", f"veRL {VERL_PIN}")
    if unknown:  # the typed configs would only repeat these, less clearly
        return problems + unknown
    problems += legacy_keys(job_keys)
    # with launch.sh's run-format overrides too (a path for each value): veRL must take them as main_ppo's
    # ray.init runtime env
    run_env = dict.fromkeys(run_format_env(RUN_DIR_PLACEHOLDER), RUN_DIR_PLACEHOLDER)
    cfg = kit.composed(lambda: compose_job(job_dir, spec, model, ray_worker_env_overrides(run_env)),
                       f"{CONFIG_NAME}.yaml", problems)
    if cfg is None:
        return problems
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    checked = cfg
    if int(cfg.actor_rollout_ref.model.get("lora_rank", 0) or 0) > 0 and importlib.util.find_spec("vllm") is None:
        # validate_config checks the rank against vLLM's LoRA ranks by importing veRL's vLLM rollout, which needs
        # vLLM: everything else is checked here on a copy without the rank
        checked = copy.deepcopy(cfg)
        checked.actor_rollout_ref.model.lora_rank = 0
        skipped.append("actor_rollout_ref.model.lora_rank: veRL checks it against vLLM's LoRA ranks, which needs "
                       "vLLM (not in this CPU environment); checked where the job runs")
    try:
        validate_config(checked, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        OmegaConf.resolve(cfg)
    except Exception as e:  # noqa: BLE001
        return [*problems, Problem(f"{CONFIG_NAME}.yaml", f"veRL's validate_config rejects it: {kit.first_line(e)}")]
    semantics.update(semantics_of(cfg, spec))
    if start.tokenizer is None:
        skipped.append("actor_rollout_ref.model: veRL's model config reads the model's files; not built here")
    problems += _dataclasses(cfg, model_files=start.tokenizer is not None) + _algorithm(cfg) + _reward(cfg)
    problems += _rollout_correction(cfg)
    problems += _reward_model(cfg, spec, skipped)
    problems += _agent_loop(job_dir, cfg) + _trainer_path(cfg) + _attention(cfg, spec, skipped)
    agent, agent_problems = kit.agent_check(spec, start.tokenizer)
    if start.tokenizer is None:  # a hub id not on this machine: no processor to build (said in skipped)
        return problems + agent_problems
    return problems + agent_problems + _images(model, cfg, agent, skipped)


validate_job = kit.job_validator("agentbridge_verl.backend:VerlBackend", _validate, """Every problem veRL (or
agentbridge's side of the job) finds, one line each; veRL's chatter muted. A check this environment cannot run fully
appends one line saying so to ``skipped``; ``semantics`` receives what the composed config will do
(:func:`semantics_of`).""")

if __name__ == "__main__":
    sys.exit(kit.validator_main(validate_job, "python -m agentbridge_verl.validate"))
