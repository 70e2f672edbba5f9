"""``model.lora`` on veRL 0.9.1's FSDP engine, on CPU: only the adapter's weights move, and the reference log-probs
(the actor with its adapter disabled) are the base model's (issue 36, item 2).

The job is ``examples/calculator.yaml`` compiled with ``model.lora.*``; the engine's configs are the job's, as
``main_ppo`` composes them (``agentbridge_verl.validate.compose_job``) and ``ActorRolloutRefWorker.init_model``
hands them over (``workers/engine_workers.py:591-645``: ``HFModelConfig`` from ``actor_rollout_ref.model`` with the
job's ``lora_rank`` / ``lora_alpha`` / ``target_modules``, the actor's ``engine`` and ``optim``, the loss
``partial(ppo_loss, config=actor_config)``), plus one CPU override, veRL's own knob
``actor_rollout_ref.model.override_config.attn_implementation=eager`` (the job's default ``flash_attention_2``
needs flash-attn).

veRL's own code run here (``verl/`` in ``.venv-verl/lib/python3.11/site-packages``), as methods of an
``FSDPEngineWithLMHead`` (``workers/engine/fsdp/transformer_impl.py``):

- ``_build_module`` (``:254``): the HF model in float32 (training: ``model_dtype`` fp32), veRL's monkey patches;
- ``_build_lora_module`` (``:339``): veRL's LoRA, ``enable_input_require_grads`` then
  ``get_peft_model(module, LoraConfig(task_type=CAUSAL_LM, r=lora_rank, lora_alpha=lora_alpha,
  target_modules=..., bias="none", ...))`` (``:359-368``), in the order ``_build_model_optimizer`` calls them
  (``:588-600``);
- ``_build_optimizer`` (``:496``): ``build_optimizer(module.parameters(), optim)`` over every parameter, frozen
  ones included (``workers/config/optimizer.py:298``);
- ``train_mode`` / ``eval_mode`` (``EngineTrainModeCtx`` / ``EngineEvalModeCtx``), ``optimizer_zero_grad``,
  ``forward_step`` (``:1549``: ``prepare_model_inputs`` / ``prepare_model_outputs``, the job's
  ``use_remove_padding`` packed sequences, ``logprobs_from_logits``, the loss), ``optimizer_step`` (``:788``:
  gradient clipping to ``optim.clip_grad``, the step), ``disable_adapter`` (``:1094``);
- the loss ``workers/utils/losses.py:57`` ``ppo_loss`` (policy loss, KL loss against ``ref_log_prob``), and the
  trainer's batch conversions ``workers/utils/padding.py:23`` ``left_right_2_no_padding`` / ``:97``
  ``no_padding_2_padding``.

The reference: with LoRA veRL builds no reference model. ``ref_in_actor`` (``trainer/ppo/ray_trainer.py:357-360``,
V1: ``trainer/ppo/v1/trainer_base.py:234-237``) sends ``no_lora_adapter=True`` with the reference's log-prob batch
to the actor (``ray_trainer.py:1273-1277``, ``trainer_base.py:1703-1707``), and ``TrainingWorker.infer_batch``
runs the forward inside ``engine.disable_adapter()`` (``workers/engine_workers.py:403,425``); ``ref_logps`` below
restates those few lines of ``infer_batch`` around the engine's own ``forward_step``.

What does not run on CPU, and why: ``FSDPEngine.__init__`` and the rest of ``initialize``. veRL 0.9.1 has no CPU
platform (``verl/plugin/platform``: nvidia, rocm, npu), so ``get_device_id()`` is ``torch.cuda.current_device()``
("Torch not compiled with CUDA enabled"), used by the device mesh (``_init_device_mesh``), the FSDP wrapping
(``_build_fsdp_module``: ``FSDP(..., device_id=get_device_id())`` with bf16 ``MixedPrecision``) and every
``forward_step``; ``__init__`` also needs ``torch.distributed`` initialised. So the engine here is built without
``__init__`` (the attributes it sets, without the device mesh), its module is the PEFT model unwrapped (no FSDP, a
float32 forward instead of FSDP's bf16 mixed precision), ``get_device_id`` / ``get_device_name`` of
``transformer_impl`` answer "cpu", and ``forward_backward_batch``'s per-micro-batch loop (its ``all_reduce`` of the
token count needs a process group) is restated for the one micro-batch: ``batch_num_tokens`` / ``dp_size`` set
as it sets them, the forward, ``loss.backward()``.

Two updates on the golden step batch (``agentbridge.conformance.step.step_batch``: twelve rows, prompt 4, response
8, ratios inside and outside the clip range, GRPO advantages of the golden rewards): the first moves only
``lora_B`` (with B = 0 the gradient reaching A is zero), the second moves ``lora_A`` too.
"""

from __future__ import annotations

from contextlib import nullcontext
from functools import partial
from inspect import signature
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import compile_job

from agentbridge.testing import assert_only_the_adapter_trained, assert_reference_is_the_base

LORA = ["model.path=builtin:tiny-qwen2.5", "algorithm.name=grpo", "algorithm.batch_size=3", "model.lora.rank=4",
        "model.lora.alpha=16", "model.lora.target_modules=[q_proj,v_proj,down_proj]", "algorithm.kl_coef=0.05",
        "algorithm.warm_start=null", "algorithm.lr=0.05", "algorithm.warmup_steps=0"]
CPU_ATTENTION = "+actor_rollout_ref.model.override_config.attn_implementation=eager"
TOL = 1e-6  # relative: float32 resolves a log-prob near -12 to 9.5e-7 (one ulp)


def cpu_engine(cfg: Any) -> Any:
    """veRL's ``FSDPEngineWithLMHead`` for the composed job config, built as ``FSDPEngine.__init__`` and
    ``_build_model_optimizer`` build it, less the device mesh and the FSDP wrapping (see the module docstring)."""
    import verl.utils.torch_functional as verl_F
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    model_config = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
    actor_config = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    engine = object.__new__(FSDPEngineWithLMHead)
    engine.model_config, engine.engine_config = model_config, actor_config.engine
    engine.optimizer_config, engine.checkpoint_config = actor_config.optim, actor_config.checkpoint
    engine.mode, engine.rank = None, 0
    engine.use_remove_padding = model_config.use_remove_padding
    engine.device_mesh = engine.ulysses_device_mesh = engine.ulysses_parallel_group = None
    engine.ulysses_sequence_parallel_size, engine.use_ulysses_sp = 1, False
    engine._is_offload_param = engine._is_offload_optimizer = False
    engine._is_lora = model_config.lora_rank > 0
    engine._uses_fsdp2_cpu_offload_policy, engine._qat_enabled = False, False
    engine._autocast_dtype, engine.scaler = torch.float32, None  # float32: the forward_step skips autocast
    engine.compute_entropy_from_logits = verl_F.entropy_from_logits
    engine.pad_to_length = engine.engine_config.pad_to_length
    engine.pad_to_length_bucket = engine.engine_config.pad_to_length_bucket
    engine.get_data_parallel_group = lambda: None  # one rank: ppo_loss takes the group and does not use it
    module = engine._build_module()
    engine.pass_packed_cu_seqlens = "cu_seqlens" in signature(module.forward).parameters
    if engine._is_lora:
        module = engine._build_lora_module(module)
    engine.module = module
    engine.optimizer = engine._build_optimizer(module)
    return engine, actor_config


def padded_batch(batch: dict[str, Any]) -> Any:
    """The golden step batch as the trainer's left/right-padded ``DataProto`` batch (prompts, responses,
    attention mask, position ids, response mask, old log-probs, advantages)."""
    from tensordict import TensorDict
    from verl.utils.model import compute_position_id_with_mask

    from agentbridge.conformance.step import PROMPT

    n = batch["input_ids"].shape[0]
    return TensorDict({"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
                       "position_ids": compute_position_id_with_mask(batch["attention_mask"]),
                       "prompts": batch["input_ids"][:, :PROMPT], "responses": batch["input_ids"][:, PROMPT:],
                       "response_mask": batch["response_mask"], "old_log_probs": batch["old_logp"],
                       "advantages": batch["advantages"]}, batch_size=[n])


def log_probs(engine: Any, padded: Any, cfg: Any, **metadata: Any) -> Any:
    """The response log-probs the actor worker computes for ``padded``: the trainer's conversion and metadata
    (``_compute_ref_log_prob`` / ``_compute_old_log_prob``), then ``TrainingWorker.infer_batch``'s adapter context
    around the engine's forward, back to the padded layout."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    data = left_right_2_no_padding(padded.clone())
    tu.assign_non_tensor(data, calculate_entropy=False, compute_loss=False, **metadata,
                         temperature=cfg.actor_rollout_ref.rollout.temperature,
                         use_remove_padding=engine.model_config.use_remove_padding,
                         use_fused_kernels=engine.engine_config.use_fused_kernels)
    no_lora_adapter = tu.pop(data, key="no_lora_adapter", default=False)  # engine_workers.py:403
    with engine.eval_mode(), torch.no_grad():
        with engine.disable_adapter() if no_lora_adapter else nullcontext():  # engine_workers.py:425
            _, output = engine.forward_step(data, loss_function=None, forward_only=True)
    return no_padding_2_padding(output["model_output"]["log_probs"], data)


def update(engine: Any, actor_config: Any, padded: Any, cfg: Any) -> float:
    """One actor update on the whole batch (one mini-batch, one micro-batch): ``BaseEngine.train_batch`` with
    ``forward_backward_batch``'s loop restated for the one micro-batch."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import left_right_2_no_padding

    data = left_right_2_no_padding(padded.clone())
    n = padded.batch_size[0]
    tu.assign_non_tensor(data, calculate_entropy=actor_config.entropy_coeff != 0, compute_loss=True,
                         temperature=cfg.actor_rollout_ref.rollout.temperature, global_batch_size=n,
                         use_remove_padding=engine.model_config.use_remove_padding,
                         use_fused_kernels=engine.engine_config.use_fused_kernels,
                         batch_num_tokens=int(data["loss_mask"].sum()), dp_size=1)
    with engine.train_mode():
        engine.optimizer_zero_grad()
        loss, _ = engine.forward_step(data, loss_function=partial(ppo_loss, config=actor_config), forward_only=False)
        loss.backward()
        engine.optimizer_step()
    return float(loss.detach())


def base_logps(path: str, batch: dict[str, Any], temperature: float) -> Any:
    """The response tokens' log-probs under the checkpoint as a plain transformers model (float32, padded batch),
    from scratch: x_i - logsumexp(x), the formula of veRL's ``logprobs_from_logits`` on CPU (torch.log_softmax's
    kernel rounds differently: 2 ulps, 2e-6, at log-probs near -12)."""
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    width = batch["response_mask"].shape[1]
    with torch.no_grad():
        logits = base(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        logits = logits[:, -width - 1:-1].float() / temperature
    return logits.gather(-1, batch["input_ids"][:, -width:, None]).squeeze(-1) - torch.logsumexp(logits, -1)


def snapshot(model: Any) -> dict[str, Any]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.fixture(scope="module")
def lora_step(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import verl.workers.engine.fsdp.transformer_impl as transformer_impl
    from verl.trainer.ppo.utils import need_reference_policy

    from agentbridge.conformance.step import step_batch
    from agentbridge.models import resolve_model_path
    from agentbridge.spec import load_spec
    from agentbridge_verl.backend import VerlBackend
    from agentbridge_verl.validate import compose_job

    torch.set_num_threads(1)
    job = compile_job(tmp_path_factory.mktemp("verl-lora") / "job", *LORA)
    spec = load_spec(job.path / "spec.yaml")
    init = str(resolve_model_path(spec.model.path))
    cfg = compose_job(Path(job.path), spec, init, [CPU_ATTENTION])
    model = cfg.actor_rollout_ref.model
    lora_rank = model.get("lora", {}).get("rank", 0)  # ray_trainer.py:357-360, as the trainer decides
    if lora_rank <= 0:
        lora_rank = model.get("lora_rank", 0)
    ref_in_actor = lora_rank > 0 or model.get("lora_adapter_path") is not None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(transformer_impl, "get_device_id", lambda: "cpu")  # no CPU platform in veRL 0.9.1
        mp.setattr(transformer_impl, "get_device_name", lambda: "cpu")
        torch.manual_seed(0)
        engine, actor_config = cpu_engine(cfg)
        batch = step_batch(init)
        padded = padded_batch(batch)
        run: dict[str, Any] = {"cfg": cfg, "check": VerlBackend().check(spec), "engine": engine,
                               "ref_in_actor": ref_in_actor, "need_ref": need_reference_policy(cfg),
                               "mask": batch["response_mask"].bool(), "before": snapshot(engine.module),
                               "base": base_logps(init, batch, cfg.actor_rollout_ref.rollout.temperature)}
        ref = {"no_lora_adapter": True} if ref_in_actor else {}  # _compute_ref_log_prob's metadata
        run["ref0"], run["policy0"] = log_probs(engine, padded, cfg, **ref), log_probs(engine, padded, cfg)
        padded["ref_log_prob"] = run["ref0"]
        run["loss1"] = update(engine, actor_config, padded, cfg)
        run["after1"] = snapshot(engine.module)
        run["loss2"] = update(engine, actor_config, padded, cfg)
        run["after2"] = snapshot(engine.module)
        run["ref2"], run["policy2"] = log_probs(engine, padded, cfg, **ref), log_probs(engine, padded, cfg)
    return run


def test_the_job_gives_verl_the_adapter_and_the_reference_in_the_actor(lora_step: dict[str, Any]) -> None:
    from peft import PeftModel

    cfg, engine = lora_step["cfg"], lora_step["engine"]
    assert lora_step["check"] == []
    model = cfg.actor_rollout_ref.model
    assert (model.lora_rank, model.lora_alpha, list(model.target_modules)) == (4, 16.0, ["q_proj", "v_proj",
                                                                                        "down_proj"])
    assert lora_step["need_ref"] and lora_step["ref_in_actor"]  # KL on; the reference is the adapter disabled
    assert isinstance(engine.module, PeftModel) and engine.engine_config.model_dtype == "fp32"
    config = engine.module.peft_config["default"]
    assert (config.r, config.lora_alpha, sorted(config.target_modules)) == (4, 16.0, ["down_proj", "q_proj",
                                                                                      "v_proj"])
    # the optimizer holds every parameter (build_optimizer(module.parameters())): frozen ones move only if they
    # get a gradient
    held = {id(p) for group in engine.optimizer.param_groups for p in group["params"]}
    assert held == {id(p) for p in engine.module.parameters()}


def test_only_the_adapter_trains(lora_step: dict[str, Any]) -> None:
    assert_only_the_adapter_trained(lora_step["before"], lora_step["after1"], lora_step["after2"],
                                    dict(lora_step["engine"].module.named_parameters()))


def test_reference_logps_are_the_base_models(lora_step: dict[str, Any]) -> None:
    """The reference (the adapter disabled) is the base model, before and after training the adapter."""
    assert_reference_is_the_base(lora_step, TOL)
