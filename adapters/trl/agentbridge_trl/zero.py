"""DeepSpeed ZeRO around TRL's trainer: generating with gathered weights, and the trained model after RL.

Under ZeRO-3 each rank holds a shard of every weight, and the HF model the trainer was given is left with empty
placeholders; under ZeRO-1/2 its weights are the 16-bit copies and the fp32 master weights live in the optimizer's
shards. What runs after RL (the held-out evaluation, saving, the SFT-only control) needs one whole model, so every
rank joins in gathering the master weights (a collective) into a plain transformers model of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def uses_deepspeed(trainer: Any) -> bool:
    """Whether ``trainer`` trains under DeepSpeed (its model is a DeepSpeed engine)."""
    return bool(getattr(trainer, "is_deepspeed_enabled", False))


@contextmanager
def unsynced_generation() -> Iterator[None]:
    """``generate`` on weights that are whole on this rank runs on its own: transformers syncs every decoding step
    over all ranks (``synced_gpus``) whenever ZeRO-3 is configured, and agentbridge's episodes make a different
    number of ``generate`` calls on each rank, which would deadlock or mix ranks' steps."""
    from transformers.integrations import deepspeed as hf_deepspeed

    saved = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed._hf_deepspeed_config_weak_ref = None
    try:
        yield
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = saved


def full_weight(param: Any) -> Any:
    """One parameter's whole fp32 master weight (every rank must call it, in the same order): DeepSpeed's optimizer
    copy, else the parameter itself, gathered when ZeRO-3 shards it (a weight the optimizer does not train)."""
    import deepspeed
    from deepspeed.utils import safe_get_full_fp32_param

    full = safe_get_full_fp32_param(param)
    if full is None:
        with deepspeed.zero.GatheredParameters([param], modifier_rank=None):
            full = param.data.detach().clone()
    return full


def trained_model(trainer: Any) -> Any:
    """The model ``trainer`` trained under DeepSpeed, whole, in fp32, as a plain transformers model on this rank's
    device, with no DeepSpeed hooks (every rank must call it: it gathers each weight's shards). From here on this
    process no longer counts as running ZeRO-3 (transformers' ``generate`` and ``save_pretrained`` act on this
    rank's model alone). A PEFT model (``model.lora``) comes back with its adapter merged into the weights."""
    import torch
    from accelerate.utils import is_peft_model
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    module = trainer.accelerator.unwrap_model(trainer.model_wrapped)
    device = trainer.accelerator.device
    weights = {name: full_weight(param) for name, param in module.named_parameters()}
    unset_hf_deepspeed_config()
    base = module.get_base_model() if is_peft_model(module) else module
    with torch.device(device):
        plain = type(base)(base.config)
    plain = plain.float()  # buffers (rotary frequencies) as the model computes them, not DeepSpeed's 16-bit copies
    target = plain
    if base is not module:  # the same adapter on the plain model, so that every gathered name has its place
        import copy

        from peft import get_peft_model

        target = get_peft_model(plain, copy.deepcopy(module.peft_config[module.active_adapter]))
    own = dict(target.named_parameters())
    with torch.no_grad():
        for name, value in weights.items():
            own[name].copy_(value.to(device=device, dtype=own[name].dtype))
    if target is not plain:
        plain = target.merge_and_unload()
        for param in plain.parameters():
            param.requires_grad_(True)
    plain.generation_config = base.generation_config
    plain.train(module.training)
    return plain


def release(trainer: Any) -> None:
    """Drop the trainer's DeepSpeed engine and optimizer (this rank's shards) once the trained model is gathered."""
    import gc

    import torch

    trainer.accelerator.free_memory()
    trainer.model_wrapped = trainer.deepspeed = trainer.optimizer = trainer.lr_scheduler = None
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
