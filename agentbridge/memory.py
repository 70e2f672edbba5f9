"""A per-GPU memory estimate of a compiled GPU job: parameters, gradients, optimizer state, the reference model, the
colocated inference engine's share and activations, in GiB, divided by the sharding the job's config sets up.

Paper arithmetic, not a measurement: it says whether a job is in the right range (a 3B model at 1x1 without offload
or LoRA is not), written into each job's manifest (``memory_per_gpu``) and checked by ``agentbridge check``.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path
from typing import Any

from agentbridge.spec.schema import Spec

GIB = 1024 ** 3
DEFAULT_GPU_GIB = 80.0  # an 80 GB A100 / H100; resources: names no GPU model
GPU_GIB_OPTION = "gpu_memory_gib"  # read from backend.options when a spec names its GPU's size there
PARAM_BYTES = 2  # bf16 weights
GRAD_BYTES = 2  # bf16 gradients
OPTIMIZER_BYTES = 12  # Adam in fp32: master weights, m and v (4 bytes each)
# activation bytes per token per layer per unit of hidden size: 34 without recompute (bf16, flash attention: no
# s x s scores; Korthikanti et al. 2022, "Reducing Activation Recomputation"); with recompute only each layer's bf16
# input is kept (2) and one layer's 34 is rebuilt at a time
ACT_BYTES, ACT_BYTES_RECOMPUTE = 34, 2
LOGIT_BYTES = 4  # the fp32 logits of a micro-batch (micro x sequence x vocab)
_SIZE_IN_NAME = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[Bb](?![a-zA-Z])")

# what each backend's compiled job calls its sharding, offload, micro-batch, recompute and colocated engine (``swap``:
# whether it offloads its training states while the engine generates and sleeps the engine while it trains): the
# dotted keys looked up, in order, in the job's config files (JSON/YAML, and the --flags of launch.sh), then the
# adapter's default (adapters/*/agentbridge_*/config.py, or the backend's own default where the adapter sets none)
BACKENDS: dict[str, dict[str, Any]] = {
    "trl": {"sharding": "zero", "keys": {
        "zero_stage": (["deepspeed.zero_optimization.stage"], 0),
        "param_offload": (["deepspeed.zero_optimization.offload_param.device"], False),
        "optimizer_offload": (["deepspeed.zero_optimization.offload_optimizer.device"], False),
        "micro_batch": (["per_device_train_batch_size"], 1),
        "recompute": (["activation_checkpointing", "gradient_checkpointing"], False),
        "engine": (["use_vllm"], False),
        "engine_mode": (["vllm_mode"], "colocate"),  # only a colocated vLLM shares the trainer's GPUs
        "gpu_memory_utilization": (["vllm_gpu_memory_utilization"], 0.3)}},
    "verl": {"sharding": "fsdp", "keys": {  # FSDP full shard, the rollout engine colocated (hybrid engine)
        "param_offload": (["actor_rollout_ref.actor.fsdp_config.param_offload"], False),
        "optimizer_offload": (["actor_rollout_ref.actor.fsdp_config.optimizer_offload"], False),
        "ref_offload": (["actor_rollout_ref.ref.fsdp_config.param_offload"], False),
        "micro_batch": (["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"], 1),
        "recompute": (["actor_rollout_ref.model.enable_gradient_checkpointing"], True),  # veRL's default
        "engine": ([], True),
        "gpu_memory_utilization": (["actor_rollout_ref.rollout.gpu_memory_utilization"], 0.5)}},
    "openrlhf": {"sharding": "zero", "keys": {  # colocated: DeepSpeed and vLLM sleep in turn (PPOTrainer._run_sleep)
        "zero_stage": (["ds.zero_stage", "zero_stage"], 2),
        "param_offload": ([], False),
        "optimizer_offload": (["ds.adam_offload", "adam_offload"], False),
        "ref_offload": (["ref.offload", "ref_reward_offload"], False),
        "micro_batch": (["train.micro_batch_size", "micro_train_batch_size"], 1),
        "recompute": (["actor.gradient_checkpointing_enable", "gradient_checkpointing"], False),
        "engine": (["train.colocate_all", "colocate_all_models"], False),
        "gpu_memory_utilization": (["vllm.gpu_memory_utilization", "vllm_gpu_memory_utilization"], 0.6),
        "swap": (["ds.enable_sleep", "deepspeed_enable_sleep"], False),
        "engine_sleep": (["vllm.enable_sleep", "vllm_enable_sleep"], False)}},
    "slime": {"sharding": "megatron", "keys": {
        "tp": (["tensor-model-parallel-size"], 1),
        # slime always sets it (megatron_utils/arguments._set_default_megatron_args: "always use zero optimizer")
        "distributed_optimizer": (["use-distributed-optimizer"], True),
        "optimizer_offload": (["optimizer-cpu-offload"], False),
        "ref_offload": ([], True),  # the reference's weights wait in pinned CPU memory (TensorBackuper "ref")
        "micro_batch": (["micro-batch-size"], 1),
        "recompute": (["recompute-granularity"], False),
        "engine": (["colocate"], True),
        "gpu_memory_utilization": (["sglang-mem-fraction-static"], 0.7),
        # colocated: the actor offloaded while SGLang generates, SGLang's memory released while the actor trains
        # (arguments.py: --colocate sets offload_train and offload_rollout unless --no-offload-train/-rollout)
        "swap": (["offload-train"], True)}},
    "roll": {"sharding": "megatron", "keys": {  # megatron_train; fsdp2_train is read as full shard below
        "strategy": (["actor_train.strategy_args.strategy_name"], "megatron_train"),
        "tp": (["actor_train.strategy_args.strategy_config.tensor_model_parallel_size"], 1),
        "distributed_optimizer": (["actor_train.strategy_args.strategy_config.use_distributed_optimizer"], False),
        # every worker loads its states for its phase and offloads them after (state_offload_manger): the
        # reference waits on CPU while the actor trains; AgenticPipeline.run offloads actor_train before generating
        # and actor_infer before training
        "ref_offload": ([], True),
        "micro_batch": (["actor_train.training_args.per_device_train_batch_size"], 1),
        "recompute": (["actor_train.strategy_args.strategy_config.recompute_granularity"], False),
        "engine": ([], True),  # actor_train and actor_infer share the GPUs (device_mapping)
        "gpu_memory_utilization": (["actor_infer.strategy_args.strategy_config.gpu_memory_utilization"], 0.8),
        "swap": ([], True)}},
    "rlinf": {"sharding": "fsdp", "keys": {
        "param_offload": (["actor.fsdp_config.cpu_offload", "actor.enable_offload"], False),
        "optimizer_offload": (["actor.fsdp_config.cpu_offload", "actor.enable_offload"], False),
        "micro_batch": (["algorithm.training_batch_size_per_gpu", "actor.micro_batch_size"], 1),
        "recompute": (["actor.fsdp_config.gradient_checkpointing", "actor.model.gradient_checkpointing"], True),
        "engine": ([], True),
        "gpu_memory_utilization": (["rollout.gpu_memory_utilization"], 0.6)}},
}
_LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def model_shape(path: str) -> tuple[dict[str, Any] | None, str]:
    """The model's size: ``{parameters, hidden, layers, vocab, ...}`` and where it came from, or None and why.

    From its config.json when the model is local (a builtin, a directory, a cached hub id), else from a size its
    name states ("3B", "0.5B"), with hidden and layers then assumed from the size (12 x layers x hidden^2
    parameters at 128 hidden units per layer, roughly the Llama/Qwen shapes)."""
    from agentbridge.models import ModelError, resolve_model_path

    try:
        local = resolve_model_path(path)
    except ModelError:
        local = None
    if local is not None and (local / "config.json").is_file():
        try:
            config = json.loads((local / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            config = {}
        shape = shape_from_config(config) if isinstance(config, dict) else None
        if shape is not None:
            return shape, f"{local / 'config.json'}"
    match = _SIZE_IN_NAME.search(path.rsplit("/", 1)[-1])
    if match:
        params = float(match.group(1)) * 1e9
        hidden = (params * 128 / 12) ** (1 / 3)
        layers = max(1, round(hidden / 128))
        return ({"parameters": int(params), "hidden": int(hidden), "layers": layers, "vocab": None,
                 "intermediate": int(hidden * 8 / 3), "kv": int(hidden)},
                f"the size in the model's name ({match.group(1)}B); hidden and layers assumed from it")
    return None, (f"model.path '{path}': no local config.json and no size in its name (like 3B), so its parameter "
                  "count is unknown")


def shape_from_config(config: dict[str, Any]) -> dict[str, Any] | None:
    """Parameters of a decoder from its config.json: embeddings (twice unless tied), per layer attention
    (q, k, v, o with grouped KV heads) + gated MLP (3 x hidden x intermediate) + norms."""
    text = config.get("text_config") or config
    try:
        hidden, layers = int(text["hidden_size"]), int(text["num_hidden_layers"])
    except (KeyError, TypeError, ValueError):
        return None
    heads = int(text.get("num_attention_heads") or 1)
    head_dim = int(text.get("head_dim") or hidden // max(1, heads))
    kv = int(text.get("num_key_value_heads") or heads) * head_dim
    q = heads * head_dim
    intermediate = int(text.get("intermediate_size") or 4 * hidden)
    vocab = int(text.get("vocab_size") or 0)
    tied = bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))
    attention = hidden * q + 2 * hidden * kv + q * hidden + q + 2 * kv  # with q/k/v biases (Qwen); small otherwise
    per_layer = attention + 3 * hidden * intermediate + 2 * hidden
    params = layers * per_layer + vocab * hidden * (1 if tied else 2) + hidden
    return {"parameters": params, "hidden": hidden, "layers": layers, "vocab": vocab or None,
            "intermediate": intermediate, "kv": kv, "q": q}


def lora_parameters(shape: dict[str, Any], rank: int, targets: list[str] | str) -> int:
    """The adapter's parameters: rank x (in + out) for each targeted linear layer of each decoder layer."""
    h, kv, i = shape["hidden"], shape.get("kv") or shape["hidden"], shape["intermediate"]
    q = shape.get("q") or h
    dims = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}
    names = _LORA_MODULES if targets == "all-linear" else [t for t in targets if t in dims]
    return shape["layers"] * sum(rank * sum(dims[n]) for n in names)


def estimate(spec: Spec, *, backend: str, offload: dict[str, bool] | None = None, sharding: str = "none",
             zero_stage: int = 0, tp: int = 1, distributed_optimizer: bool = False, micro_batch: int = 1,
             recompute: bool = False, engine_fraction: float = 0.0, swap: bool = False, gpu_gib: float | None = None,
             inputs: dict[str, str] | None = None) -> dict[str, Any]:
    """The per-GPU estimate in GiB, with its formula and assumptions; ``total_gib`` None (and ``why``) when the
    model's size is unknown.

    ``sharding``: ``zero`` (``zero_stage`` 1: optimizer, 2: + gradients, 3: + parameters over every GPU), ``fsdp``
    (full shard: all three), ``megatron`` (parameters and gradients over ``tp``; the optimizer over every GPU with
    ``distributed_optimizer``), ``none``. ``offload``: ``{"params", "optimizer", "ref"}`` moved to CPU (their terms
    become 0). ``engine_fraction``: the colocated vLLM/SGLang engine's gpu_memory_utilization (0: none). ``swap``:
    the job offloads its training states while the engine generates and releases the engine while it trains, so
    the peak is the larger phase, not their sum. ``inputs``: where each setting came from (recorded as given)."""
    offload = offload or {}
    gpus = max(1, spec.resources.nodes * spec.resources.gpus_per_node)
    gpu_gib = float(gpu_gib or spec.backend.options.get(GPU_GIB_OPTION) or DEFAULT_GPU_GIB)
    gpu_source = (f"{gpu_gib:g} GiB" + ("" if gpu_gib != DEFAULT_GPU_GIB else
                                        " (the default: an 80 GB A100/H100; the spec names no GPU)"))
    shape, source = model_shape(spec.model.path)
    result: dict[str, Any] = {"backend": backend, "model": spec.model.path, "gpus": gpus, "gpu_memory_gib": gpu_gib,
                              "gpu_memory": gpu_source}
    if shape is None:
        return {**result, "total_gib": None, "why": source}
    params = shape["parameters"]
    lora = spec.model.lora
    trainable = lora_parameters(shape, lora.rank, lora.target_modules) if lora else params
    tp = max(1, tp)
    if sharding == "zero":
        p_div, g_div, o_div = (gpus if zero_stage >= 3 else 1, gpus if zero_stage >= 2 else 1,
                               gpus if zero_stage >= 1 else 1)
        how = f"DeepSpeed ZeRO-{zero_stage} over {gpus} GPU(s)"
    elif sharding == "fsdp":
        p_div = g_div = o_div = gpus
        how = f"FSDP full shard over {gpus} GPU(s)"
    elif sharding == "megatron":
        p_div = g_div = tp
        o_div = gpus if distributed_optimizer else tp
        how = (f"Megatron tensor parallel {tp}" + (f", distributed optimizer over {gpus} GPU(s)"
                                                   if distributed_optimizer else ", no distributed optimizer"))
    else:
        p_div = g_div = o_div = 1
        how = "no sharding"
    seq = spec.agent.max_prompt_tokens + spec.agent.max_response_tokens
    h, layers, vocab = shape["hidden"], shape["layers"], shape["vocab"]
    per_token_layer = (ACT_BYTES_RECOMPUTE * layers + ACT_BYTES) if recompute else ACT_BYTES * layers
    activations = micro_batch * seq * h * per_token_layer / tp + micro_batch * seq * (vocab or 0) * LOGIT_BYTES
    reference = spec.algorithm.kl_coef > 0 and lora is None
    gib = {
        "parameters": 0.0 if offload.get("params") else (params + (trainable if lora else 0)) * PARAM_BYTES / p_div,
        "gradients": trainable * GRAD_BYTES / g_div,
        "optimizer": 0.0 if offload.get("optimizer") else trainable * OPTIMIZER_BYTES / o_div,
        "reference": 0.0 if not reference or offload.get("ref") else params * PARAM_BYTES / p_div,
        "inference_engine": engine_fraction * gpu_gib * GIB,
        "activations": activations,
    }
    gib = {k: round(v / GIB, 2) for k, v in gib.items()}
    training = round(sum(v for k, v in gib.items() if k != "inference_engine"), 2)
    generation = round(gib["inference_engine"] + gib["reference"], 2)
    total = round(max(training, generation), 2) if swap else round(sum(gib.values()), 2)
    act_const = (f"({ACT_BYTES_RECOMPUTE} x layers + {ACT_BYTES}) bytes: recompute keeps each layer's input, rebuilds "
                 f"one layer at a time" if recompute else f"{ACT_BYTES} x layers bytes: no recompute")
    return {
        **result,
        "model_source": source,
        "parameters": params,
        "trainable_parameters": trainable,
        "hidden": h, "layers": layers, "sequence": seq, "micro_batch": micro_batch,
        "sharding": how,
        "offload": {k: bool(offload.get(k)) for k in ("params", "optimizer", "ref")},
        "recompute": recompute,
        "swap": swap,
        **({"inputs": inputs} if inputs else {}),
        "gib": gib,
        **({"phases": {"training": training, "generation": generation}} if swap else {}),
        "total_gib": total,
        "formula": [
            f"parameters = parameters x {PARAM_BYTES} bytes / {p_div} (sharding){' + the LoRA adapter' if lora else ''}"
            ", 0 when offloaded",
            f"gradients = trainable parameters x {GRAD_BYTES} bytes / {g_div}",
            f"optimizer = trainable parameters x {OPTIMIZER_BYTES} bytes (fp32 master, m, v) / {o_div}, 0 when "
            "offloaded",
            "reference = parameters x 2 bytes / parameter sharding, when kl_coef > 0 without LoRA (LoRA's reference "
            "is the base model without the adapter), 0 when offloaded",
            f"inference_engine = gpu_memory_utilization {engine_fraction:g} x {gpu_gib:g} GiB (a colocated "
            "vLLM/SGLang engine's reservation: weights and KV cache)",
            f"activations = micro-batch {micro_batch} x sequence {seq} (prompt + response tokens) x hidden {h} x "
            f"{act_const}" + (f" / tensor parallel {tp}" if tp > 1 else "")
            + (f" + micro-batch x sequence x vocab {vocab} x {LOGIT_BYTES} bytes (fp32 logits)" if vocab else ""),
            "total = max(training: every term but inference_engine, generation: inference_engine + reference): the "
            "job offloads its training states while the engine generates and releases the engine while it trains"
            if swap else "total = the sum of the terms: they share the GPU at once",
        ],
        "assumptions": [
            "bf16 parameters and gradients, Adam with fp32 master weights and moments",
            f"GPU memory {gpu_source}",
            "the colocated engine's reservation counted in full" + (" while it generates" if swap else
                                                                      ", as if it stayed awake while training"),
            "no allocator fragmentation, CUDA context or communication buffers (a few GiB more in practice)",
        ],
    }


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.update(_flatten(v, f"{prefix}{k}."))
    if prefix:
        out[prefix[:-1]] = tree
    return out


def _flags(script: str) -> dict[str, Any]:
    """``--name value`` and bare ``--name`` switches of a launch script."""
    try:
        words = shlex.split(script, comments=True)
    except ValueError:
        return {}
    out: dict[str, Any] = {}
    for i, word in enumerate(words):
        if word.startswith("--") and len(word) > 2:
            nxt = words[i + 1] if i + 1 < len(words) else ""
            out.setdefault(word[2:], True if not nxt or nxt.startswith("--") else nxt)
    return out


def job_config(path: Path) -> dict[str, Any]:
    """Every dotted key the job's config files set: its JSON and YAML files, then launch.sh's --flags."""
    import yaml

    config: dict[str, Any] = {}
    for file in sorted(path.iterdir()) if path.is_dir() else []:
        if file.name in ("manifest.json", "spec.yaml") or not file.is_file():
            continue
        try:
            if file.suffix == ".json":
                config.update({k: v for k, v in _flatten(json.loads(file.read_text())).items() if k not in config})
            elif file.suffix in (".yaml", ".yml"):
                config.update({k: v for k, v in _flatten(yaml.safe_load(file.read_text())).items()
                               if k not in config})
        except (ValueError, yaml.YAMLError, OSError):
            continue
    launch = path / "launch.sh"
    if launch.is_file():
        config.update({k: v for k, v in _flags(launch.read_text()).items() if k not in config})
    return config


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("", "false", "0", "none", "null", "no", "off")
    return bool(value)


def job_settings(backend: str, config: dict[str, Any]) -> dict[str, Any]:
    """The :func:`estimate` keywords of a ``backend`` job, read from its ``config`` (:func:`job_config`) through
    :data:`BACKENDS`; an unknown backend is estimated unsharded, without an engine. ``inputs`` says, for each
    setting, the job's key it was read from or that it is the default."""
    entry = BACKENDS.get(backend, {"sharding": "none", "keys": {}})
    inputs: dict[str, str] = {}

    def get(field: str, default: Any = None) -> Any:
        keys, fallback = entry["keys"].get(field, ([], default))
        for key in keys:
            if key in config and config[key] is not None:
                inputs[field] = f"{key}: {config[key]}"
                return config[key]
        if field in entry["keys"]:
            inputs[field] = f"default: {fallback}"
        return fallback

    def offloaded(field: str) -> bool:  # offloaded when any of its keys says so (RLinf has two)
        keys, fallback = entry["keys"].get(field, ([], False))
        found = [key for key in keys if key in config and config[key] is not None]
        if not found:
            return _truthy(get(field, False))
        chosen = next((key for key in found if _truthy(config[key])), found[0])
        inputs[field] = f"{chosen}: {config[chosen]}"
        return _truthy(config[chosen])

    sharding = entry["sharding"]
    if backend == "roll" and "fsdp" in str(get("strategy")):
        sharding = "fsdp"
    engine = _truthy(get("engine", False)) and str(get("engine_mode", "colocate")) == "colocate"
    recompute = _truthy(get("recompute", False))
    if backend == "roll" and sharding == "fsdp":  # the HF model of ROLL's FSDP2 checkpoints unless disabled
        recompute = not _truthy(config.get("actor_train.model_args.disable_gradient_checkpointing", False))
    if backend == "rlinf" and config.get("actor.training_backend") == "megatron":  # Megatron's recompute, not FSDP's
        recompute = _truthy(config.get("actor.model.recompute_granularity", False))
    try:
        zero_stage = int(get("zero_stage", 0) or 0)
    except (TypeError, ValueError):
        zero_stage = 0
    engine_fraction = float(get("gpu_memory_utilization", 0.0) or 0.0) if engine else 0.0
    swap = bool(engine_fraction) and _truthy(get("swap", False)) and _truthy(get("engine_sleep", True))
    if backend == "slime" and any(_truthy(config.get(f"no-offload-{x}", False)) for x in ("train", "rollout")):
        swap = False
    return {
        "sharding": sharding,
        "zero_stage": zero_stage,
        "tp": int(get("tp", 1) or 1),
        "distributed_optimizer": _truthy(get("distributed_optimizer", False)),
        "offload": {"params": offloaded("param_offload"), "optimizer": offloaded("optimizer_offload"),
                    "ref": offloaded("ref_offload")},
        "micro_batch": max(1, int(get("micro_batch", 1) or 1)),
        "recompute": recompute,
        "engine_fraction": engine_fraction,
        "swap": swap,
        "inputs": dict(sorted(inputs.items())),
    }


def estimate_job(spec: Spec, backend: str, path: Path) -> dict[str, Any]:
    """:func:`estimate` for the compiled job of ``backend`` in ``path``."""
    return estimate(spec, backend=backend, **job_settings(backend, job_config(path)))


def over_budget(memory: dict[str, Any]) -> str | None:
    """The warning for an estimate past its GPU's memory, or None: one line without the job's name."""
    total, gpu = memory.get("total_gib"), memory.get("gpu_memory_gib") or DEFAULT_GPU_GIB
    if total is None or not math.isfinite(total) or total <= gpu:
        return None
    names = {"parameters": "params", "gradients": "grads", "optimizer": "optimizer", "reference": "reference",
             "inference_engine": "engine", "activations": "activations"}
    parts = ", ".join(f"{names.get(k, k)} {v:g}" for k, v in memory.get("gib", {}).items())
    return f"the estimated {total:g} GiB per GPU ({parts}) exceeds {gpu:g} GiB: offload, shard or use LoRA"
