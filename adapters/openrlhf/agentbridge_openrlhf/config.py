"""Map a spec to OpenRLHF 0.11.2's ``train_ppo_ray`` command line (pure: imports no OpenRLHF, no torch)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any

from agentbridge.adapter import BackendOptions
from agentbridge.spec.recipe import clip_range, dual_clip, kl_setting
from agentbridge.spec.schema import Spec

OPENRLHF_PIN = "0.11.2"
BACKEND = "openrlhf"
AGENT_FILE = "agentbridge_agent.py"

# agentbridge algorithm -> OpenRLHF flags. Rewards are sequence-level in OpenRLHF agent mode (placed on the
# last action token, the advantage is broadcast over every generated token): no per-turn credit assignment.
ALGORITHMS: dict[str, dict[str, Any]] = {
    "grpo": {"algo.advantage.estimator": "group_norm", "actor.loss_agg_mode": "seq-mean-token-mean"},
    "dr_grpo": {"algo.advantage.estimator": "dr_grpo"},
    "rloo": {"algo.advantage.estimator": "rloo"},
    "reinforce_pp": {"algo.advantage.estimator": "reinforce"},  # REINFORCE++ (no critic, global baseline)
    "gspo": {"algo.advantage.estimator": "group_norm", "actor.policy_loss_type": "gspo",
             "actor.eps_clip_low_high": [3e-4, 4e-4]},
    # DAPO: clip-higher, token-mean loss (OpenRLHF's default). As on veRL and TRL: no dynamic sampling (OpenRLHF's
    # filter keeps a group by its mean reward, not by whether its rewards differ) and no reward change for
    # truncated episodes; the algorithm conformance suite names both differences from the paper.
    "dapo": {"algo.advantage.estimator": "group_norm", "actor.eps_clip_low_high": [0.2, 0.28]},
    # with a critic (value model) initialised from the actor; GAE lambda 0.95 as on veRL
    "ppo": {"algo.advantage.estimator": "gae", "algo.advantage.lambd": 0.95},
}
# algorithm.loss_agg -> --actor.loss_agg_mode; the others are refused (agentbridge.spec.recipe)
LOSS_AGG_MODES = {"token_mean": "token-mean", "seq_mean_token_mean": "seq-mean-token-mean"}
GROUP_ESTIMATORS = ("group_norm", "dr_grpo", "rloo", "reinforce_baseline")
WHY_NOT: dict[str, str] = {}  # every agentbridge algorithm maps; see NOTES for how
NOTES = [
    "dapo: group_norm + clip-higher (0.2, 0.28), token-mean loss; no dynamic sampling and no overlong shaping "
    "(as on veRL and TRL; OpenRLHF's overlong buffer would count tool tokens, issue #1243)",
    "gspo: group_norm + --actor.policy_loss_type gspo, clip (3e-4, 4e-4)",
    "reinforce_pp: REINFORCE++ (estimator reinforce); backend.options.estimator=reinforce_baseline for the "
    "group-baseline variant",
    "ppo: GAE with a critic initialised from the actor (text models only)",
    "algorithm.warm_start.control is not run by the OpenRLHF job: the SFT-only control needs RL's wall time "
    "in-process (the TRL backend runs it); the warm start and the held-out arms run around OpenRLHF's trainer",
]
# backend.options a spec may set, and their defaults
OPTIONS: dict[str, Any] = {
    "async": False,                 # --train.async_enable: vLLM engines on half the GPUs, the models on the
                                    # other half (async_split), instead of all on every GPU with sleep
    "async_queue_size": 1,
    "partial_rollout": False,
    "vllm_num_engines": None,       # default: one engine per GPU (tensor_parallel_size 1)
    "vllm_tensor_parallel_size": 1,
    "vllm_gpu_memory_utilization": 0.6,
    "prefix_caching": True,         # vllm.enable_prefix_caching: each turn re-sends the episode so far, whose KV
                                    # cache vLLM then reuses (OpenRLHF passes False to vLLM unless asked)
    "zero_stage": 2,
    "gradient_checkpointing": False,
    "packing_samples": False,
    "rollout_micro_batch_size": None,  # default: 4, or fewer when a step has fewer samples per actor process
                                    # (OpenRLHF asserts batch_size * n_samples // micro >= actor processes)
    "train_micro_batch_size": 1,
    "is_correction": "off",         # off | token | seq: off-policy correction (asks vLLM for logprobs)
    "estimator": None,              # any OpenRLHF estimator, overriding the algorithm's (e.g. reinforce_baseline)
    "eval_steps": -1,               # evaluate on data.eval every N steps (-1: never)
    "critic_lr": 9e-6,              # ppo only
    "max_images_per_prompt": 0,     # VLM: every image one trajectory sees (vLLM limit_mm_per_prompt); 0 = the
                                    # task's first images (at least 1) + one screenshot per later turn
    "save_steps": 50,               # a DeepSpeed checkpoint every N steps in OUT/checkpoints (-1: none); a job
                                    # launched again with the same OUT continues from the newest (ckpt.load_enable)
    "save_total_limit": 2,          # how many checkpoints are kept (ckpt.max_num)
}
# resources' sizing fields -> the option each is the default of (agentbridge.spec.sizing): --train.micro_batch_size,
# --actor.gradient_checkpointing_enable, --ckpt.save_steps, --ckpt.max_num
SIZING_OPTIONS = {"micro_batch_size": "train_micro_batch_size", "gradient_checkpointing": "gradient_checkpointing",
                  "save_steps": "save_steps", "save_total_limit": "save_total_limit"}
# Flags the executor contract depends on: an override may not change them.
OWNED = ("train.agent_func_path", "data.prompt_dataset", "data.input_key", "data.label_key")


OWN_OPTIONS = BackendOptions(BACKEND, OPTIONS, SIZING_OPTIONS)
applies, options = OWN_OPTIONS.applies, OWN_OPTIONS.options


def overrides(spec: Spec) -> dict[str, Any]:
    """``backend.overrides`` when the spec's backend is OpenRLHF (another backend's flags mean nothing here)."""
    return dict(spec.backend.overrides) if applies(spec) else {}


@cache
def openrlhf_flags() -> dict[str, dict[str, Any]]:
    """``{dotted name: {"nargs", "default", "choices"}}`` of OpenRLHF 0.11.2's parser (shipped, dumped from it)."""
    text = resources.files("agentbridge_openrlhf").joinpath(f"flags_{OPENRLHF_PIN}.json").read_text()
    return json.loads(text)



def world_size(spec: Spec) -> int:
    return max(1, spec.resources.nodes * spec.resources.gpus_per_node)


def estimator(spec: Spec) -> str:
    return options(spec)["estimator"] or ALGORITHMS.get(spec.algorithm.name, {}).get("algo.advantage.estimator", "gae")


def reward_range(spec: Spec) -> tuple[float, float]:
    """Lowest and highest total reward, assuming each component lies in [0, 1] (process rewards excluded)."""
    low = sum(min(0.0, r.weight) for r in spec.reward)
    high = sum(max(0.0, r.weight) for r in spec.reward)
    return round(low, 6), round(high, 6)


def max_len(spec: Spec) -> int:
    """``--data.max_len``: OpenRLHF's budget for the prompt plus every turn (tool tokens included)."""
    return spec.agent.max_prompt_tokens + spec.agent.max_response_tokens


# algorithm.is_correction (level, mode) -> --algo.advantage.is_correction_level / _mode (PolicyLoss: TIS is the token
# clip, ICEPOP the token mask); the sequence level is refused (OpenRLHFBackend.recipe_why_not)
IS_CORRECTION = {("token", "truncate"): ("token", "clip"), ("token", "mask"): ("token", "mask")}
# algorithm.scale_advantages -> the group estimator that scales so (experience_maker: group_norm divides by the
# group's std, dr_grpo subtracts the group's mean only)
SCALE_ESTIMATORS = {"group": "group_norm", "none": "dr_grpo"}


def recipe_flags(spec: Spec) -> dict[str, Any]:
    """Flags of the spec's explicit recipe fields (none for a field left null: the preset's). An entropy
    coefficient of 0 sets no flag: OpenRLHF then skips the entropy, as with no coefficient."""
    algo = spec.algorithm
    out: dict[str, Any] = {}
    clip = clip_range(algo)
    if clip is not None:
        out["actor.eps_clip_low_high"] = list(clip)
    if dual_clip(algo) is not None:
        out["actor.dual_clip"] = dual_clip(algo)
    if algo.entropy_coef:
        out["actor.entropy_coef"] = algo.entropy_coef
    if algo.max_grad_norm is not None:
        out["actor.max_norm"] = algo.max_grad_norm
    if algo.loss_agg in LOSS_AGG_MODES:
        out["actor.loss_agg_mode"] = LOSS_AGG_MODES[algo.loss_agg]
    if algo.scale_advantages in SCALE_ESTIMATORS:  # batch is refused (OpenRLHFBackend.recipe_why_not)
        out["algo.advantage.estimator"] = SCALE_ESTIMATORS[algo.scale_advantages]
    if algo.epochs is not None:
        out["train.max_epochs"] = algo.epochs
    if algo.mini_batches is not None:  # samples per optimizer step
        out["train.batch_size"] = algo.batch_size * algo.group_size // algo.mini_batches
    isc = algo.is_correction
    if isc is not None and (isc.level, isc.mode) in IS_CORRECTION:  # the sequence level is refused (backend.py)
        level, mode = IS_CORRECTION[(isc.level, isc.mode)]
        # gating on the ratio itself, band [0, cap]: clip is min(w, cap), mask zeroes a token whose w > cap
        out.update({"algo.advantage.is_correction_level": level, "algo.advantage.is_correction_mode": mode,
                    "algo.advantage.is_correction_gating": "ratio",
                    "algo.advantage.is_correction_threshold": [0.0, isc.cap]})
    return out


def kl_flags(spec: Spec) -> dict[str, Any]:
    """``--algo.kl.*`` of the spec's KL term (none with kl_coef 0). With ``kl_estimator`` and ``kl_in`` both null:
    k3 in the loss for every preset, the job these specs compiled to before the knobs existed (reinforce_pp and ppo
    then differ from their preset, k1 in the reward: pinned in the algorithm probe); with either set, the spec's
    (estimator, where) (``agentbridge.spec.recipe.kl_setting``): ``--algo.kl.estimator``, and ``--algo.kl.use_loss``
    for the loss (without it OpenRLHF's experience maker puts each token's estimate into the token rewards)."""
    algo = spec.algorithm
    if algo.kl_coef <= 0:
        return {}
    if algo.kl_estimator is None and algo.kl_in is None:
        return {"algo.kl.use_loss": True, "algo.kl.estimator": "k3"}
    estimator_, where = kl_setting(algo)
    return {**({"algo.kl.use_loss": True} if where == "loss" else {}), "algo.kl.estimator": estimator_}


ROLLOUT_OPTIONS = ("async", "async_queue_size", "partial_rollout")  # algorithm.rollout's backend.options twins


def rollout_plan(spec: Spec) -> tuple[bool, int, bool]:
    """(``--train.async_enable``, ``--train.async_queue_size``, ``--train.partial_rollout_enable``) of the spec.

    ``algorithm.rollout`` when set: sync is OpenRLHF's synchronous trainer; one_step_off its async trainer with a
    queue of 1, async with a queue of ``max_staleness`` (null: OpenRLHF's default queue, 1), and partial rollouts
    with ``partial``. The queue is the staleness bound: ``PPOTrainerAsync`` hands the generator one slot per queue
    place and the trainer frees one when it takes a batch, before training on it, so batch b starts generating once
    batch b - queue is taken, on weights no older than that step's, and trains at step b. Unset: the
    ``backend.options`` of the same names."""
    r = spec.algorithm.rollout
    if r is None:
        opts = options(spec)
        return bool(opts["async"]), int(opts["async_queue_size"]), bool(opts["partial_rollout"])
    if r.mode == "sync":
        return False, 1, False
    if r.mode == "one_step_off":
        return True, 1, False
    return True, r.max_staleness or int(openrlhf_flags()["train.async_queue_size"]["default"]), r.partial


def episode_plan(steps: int, batch_size: int, train_size: int) -> tuple[int, int]:
    """``(train.num_episodes, data.max_samples)`` that make OpenRLHF run exactly ``steps`` RL steps: it passes over
    ``max_samples`` prompts ``num_episodes`` times, one step per ``rollout.batch_size`` prompts. The fewest passes
    whose steps divide ``steps`` evenly, each within the ``train_size`` training tasks (200 steps of 32 prompts over
    2,048 tasks: 4 passes over 1,600, not 4 over 2,048, which would be 256 steps)."""
    per_pass = max(1, train_size // max(1, batch_size))  # the most steps one pass over the tasks can make
    episodes = next(e for e in range(min(steps, max(1, math.ceil(steps / per_pass))), steps + 1) if steps % e == 0)
    return episodes, min(train_size, steps // episodes * batch_size)


def flag_values(spec: Spec, *, model: str, job: str, out: str, train_size: int, eval_size: int,
                multimodal: bool = False, first_images: int = 0) -> dict[str, Any]:
    """The command line as ``{dotted flag: value}`` (True = a bare switch); overrides applied last, verbatim.

    ``model``/``job``/``out`` are written as given (shell variables in launch.sh). ``None`` or ``False`` in
    ``backend.overrides`` removes a flag. ``first_images``: the most images a task starts with (dataset images).
    """
    a, algo, res = spec.agent, spec.algorithm, spec.resources
    opts = options(spec)
    asynchronous, queue, partial = rollout_plan(spec)
    gpus = max(1, res.gpus_per_node)
    # async: vLLM engines get GPUs of their own, so the DeepSpeed models take half of the cluster
    model_nodes, model_gpus = async_split(res.nodes, gpus) if asynchronous else (res.nodes, gpus)
    episodes, samples = episode_plan(algo.steps, algo.batch_size, train_size)
    v: dict[str, Any] = {
        "actor.model_name_or_path": model,
        "train.agent_func_path": f"{job}/{AGENT_FILE}",
        "data.prompt_dataset": f"{job}/data/train.jsonl",
        "data.input_key": "prompt",
        "data.label_key": "label",
        "data.apply_chat_template": True,
        "data.max_len": max_len(spec),
        # OpenRLHF's own executor uses max_new_tokens only to cut long prompts; agentbridge's driver caps
        # each turn at max_tokens_per_turn itself, so the same number is passed for consistent accounting.
        "rollout.max_new_tokens": a.max_tokens_per_turn,
        "data.max_samples": samples,
        "train.num_episodes": episodes,
        "rollout.n_samples_per_prompt": algo.group_size,
        "rollout.batch_size": algo.batch_size,
        "train.batch_size": algo.batch_size * algo.group_size,
        "rollout.micro_batch_size": (opts["rollout_micro_batch_size"]
                                     or max(1, min(4, algo.batch_size * algo.group_size // world_size(spec)))),
        "train.micro_batch_size": opts["train_micro_batch_size"],
        "rollout.temperature": a.sampling.temperature,
        "rollout.top_p": a.sampling.top_p,
        "algo.advantage.estimator": estimator(spec),
        "actor.adam.lr": algo.lr,
        "actor.lr_warmup_ratio": round(algo.warmup_steps / algo.steps, 6),
        "actor.lr_scheduler": "constant_with_warmup",  # as the TRL and veRL jobs (OpenRLHF defaults to a cosine decay)
        "algo.kl.init_coef": algo.kl_coef,
        "train.seed": spec.seed,
        "actor.num_nodes": model_nodes,
        "actor.num_gpus_per_node": model_gpus,
        "ref.num_nodes": model_nodes,
        "ref.num_gpus_per_node": model_gpus,
        "vllm.tensor_parallel_size": opts["vllm_tensor_parallel_size"],
        "vllm.gpu_memory_utilization": opts["vllm_gpu_memory_utilization"],
        "ds.zero_stage": opts["zero_stage"],
        "ds.param_dtype": "bf16",
        "ckpt.output_dir": f"{out}/ckpt",
        "ckpt.save_steps": opts["save_steps"],
        "ckpt.path": f"{out}/checkpoints",
        "ckpt.max_num": opts["save_total_limit"],
        "ckpt.load_enable": True,  # OpenRLHF resumes from ckpt.path when a checkpoint is there
        "logger.tensorboard_dir": f"{out}/tensorboard",
    }
    tp = int(opts["vllm_tensor_parallel_size"])
    vllm_gpus = world_size(spec) - model_nodes * model_gpus if asynchronous else world_size(spec)
    v["vllm.num_engines"] = opts["vllm_num_engines"] or max(1, vllm_gpus // tp)
    for key, value in ALGORITHMS.get(spec.algorithm.name, {}).items():
        if key != "algo.advantage.estimator":
            v[key] = value
    v.update(recipe_flags(spec))
    if v.get("algo.dynamic_filtering_enable"):
        v["algo.dynamic_filtering_range"] = list(reward_range(spec))
    v.update(kl_flags(spec))
    if estimator(spec) == "gae":
        v.update({"critic.model_name_or_path": model, "critic.num_nodes": model_nodes,
                  "critic.num_gpus_per_node": model_gpus, "critic.adam.lr": opts["critic_lr"]})
    if asynchronous:
        # as OpenRLHF's async agent recipe: colocate_all shares one placement group among the DeepSpeed models
        # (actor, ref, critic); the vLLM engines get their own (train_ppo_ray.train)
        v.update({"train.async_enable": True, "train.async_queue_size": queue, "train.colocate_all": True})
        if partial:
            v["train.partial_rollout_enable"] = True
    else:
        v.update({"train.colocate_all": True, "vllm.enable_sleep": True, "ds.enable_sleep": True})
    if opts["prefix_caching"]:
        v["vllm.enable_prefix_caching"] = True
    if opts["gradient_checkpointing"]:
        v["actor.gradient_checkpointing_enable"] = True
    if opts["packing_samples"]:
        v["ds.packing_samples"] = True
    if opts["is_correction"] != "off" and algo.is_correction is None:
        v["algo.advantage.is_correction_level"] = opts["is_correction"]
    if eval_size and int(opts["eval_steps"]) > 0:
        v.update({"eval.dataset": f"{job}/data/eval.jsonl", "eval.steps": opts["eval_steps"],
                  "eval.n_samples_per_prompt": 1, "eval.temperature": a.sampling.temperature})
    if multimodal:
        v["data.image_key"] = "images"
        # vLLM rejects a prompt with more images than this, and OpenRLHF re-sends every image each turn
        v["data.max_images_per_prompt"] = (int(opts["max_images_per_prompt"])
                                           or max(1, first_images) + a.max_turns - 1)
    for key, value in overrides(spec).items():
        key = key.removeprefix("--")
        if value is None or value is False:
            v.pop(key, None)
        else:
            v[key] = value
    if v.get("algo.dynamic_filtering_enable") and "algo.dynamic_filtering_range" not in v:
        v["algo.dynamic_filtering_range"] = list(reward_range(spec))  # turned on by an override: the spec's range
    return v


def async_split(nodes: int, gpus_per_node: int) -> tuple[int, int]:
    """Nodes and GPUs per node of the DeepSpeed models in an async job: half the cluster (whole nodes when the node
    count is even), the other half for the vLLM engines, as in OpenRLHF's async recipes. A cluster that does not
    halve keeps every GPU for the models; :func:`gpu_demand` then exceeds it and ``check`` says so."""
    if nodes % 2 == 0:
        return nodes // 2, gpus_per_node
    if gpus_per_node % 2 == 0:
        return nodes, gpus_per_node // 2
    return nodes, gpus_per_node


def gpu_demand(flag: Callable[[str], Any]) -> dict[str, int]:
    """The GPUs OpenRLHF 0.11.2's ``train()`` (``openrlhf/cli/train_ppo_ray.py``) holds, by placement group or actor
    group, for the flags ``flag(dotted name)`` returns (parsed args, or :func:`flag_values` with OpenRLHF's
    defaults). ``train()`` waits for each placement group without a timeout: more than the cluster has waits forever.
    """
    def gpus(role: str) -> int:
        return int(flag(f"{role}.num_nodes")) * int(flag(f"{role}.num_gpus_per_node"))

    colocate_all, asynchronous = bool(flag("train.colocate_all")), bool(flag("train.async_enable"))
    kl = float(flag("algo.kl.init_coef") or 0) > 0
    demand: dict[str, int] = {}
    shared = colocate_all or bool(flag("train.colocate_actor_ref"))  # one placement group for actor and ref
    if shared:
        demand["actor+ref" if kl else "actor"] = gpus("actor")
    engines = int(flag("vllm.num_engines") or 0)
    if engines > 0 and not (colocate_all and not asynchronous):  # else the engines share the actor's group
        demand["vLLM engines"] = engines * int(flag("vllm.tensor_parallel_size"))
    if not shared:
        demand["actor"] = gpus("actor")
        if kl:
            demand["ref"] = gpus("ref")
    critic_group = bool(flag("critic.model_name_or_path")) and bool(flag("train.colocate_critic_reward"))
    if critic_group:  # a placement group of its own, even under colocate_all
        demand["critic+reward"] = gpus("critic")
    elif flag("critic.model_name_or_path") and not colocate_all:
        demand["critic"] = gpus("critic")
    agent_mode = flag("reward.remote_url") or flag("train.agent_func_path")  # no reward model then
    if not agent_mode and not colocate_all and not critic_group:
        demand["reward model"] = gpus("reward")
    return demand


def describe_demand(demand: dict[str, int]) -> str:
    """``'32 GPUs (actor 16, vLLM engines 16)'``."""
    total = sum(demand.values())
    parts = ", ".join(f"{name} {n}" for name, n in demand.items())
    return f"{total} GPU{'s' if total != 1 else ''} ({parts})"


def flag_getter(values: dict[str, Any]) -> Callable[[str], Any]:
    """``flag(dotted name)`` over :func:`flag_values`: the value set there, else OpenRLHF's default."""
    flags = openrlhf_flags()
    return lambda name: values[name] if name in values else flags[name]["default"]


def to_argv(values: dict[str, Any]) -> list[str]:
    """``--flag value`` tokens; lists become several values, True a bare switch."""
    argv: list[str] = []
    for key, value in values.items():
        argv.append(f"--{key}")
        if value is True:
            continue
        argv += [_str(x) for x in value] if isinstance(value, list | tuple) else [_str(value)]
    return argv


def _str(value: Any) -> str:
    return repr(value) if isinstance(value, float) and value != 0 and abs(value) < 1e-3 else str(value)
