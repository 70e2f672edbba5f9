"""Resolving and loading a spec's ``model.path`` (a builtin, a local directory, a hub id in the Hugging Face
cache) with transformers: tokenizer, model, image processor, and the images-only processor of a VLM."""

from __future__ import annotations

import functools
import importlib.util
import inspect
import json
import os
import re
from pathlib import Path
from typing import Any

from agentbridge.models.builtin import BUILTIN_MODELS, VLM_BUILTINS, ModelError, builtin_dir

_VL_NAME = re.compile(r"(?i)(^|[-_/.])(vl|vision|llava)(\d|[-_.]|$)")
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def is_hub_id(path: str) -> bool:
    """Whether ``model.path`` reads as a hub id (``org/name``) rather than a local path."""
    return bool(_HUB_ID.match(path)) and not Path(path).expanduser().exists()


def _hub_cache_dir(repo_id: str) -> Path | None:
    """The local snapshot of a hub model in the Hugging Face cache (never downloads), or None."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(repo_id, "config.json")
    return Path(found).parent if isinstance(found, str) else None


def resolve_model_path(path: str, *, download: bool = False) -> Path:
    """Map ``model.path`` (a builtin name, a local model directory, or a hub id already in the Hugging Face cache)
    to a local directory. ``download``: fetch a hub id that is not cached yet (unless ``HF_HUB_OFFLINE`` is set) —
    what a run on a GPU machine does; checks never download."""
    if path.startswith("builtin:"):
        if path not in BUILTIN_MODELS:
            known = ", ".join(BUILTIN_MODELS)
            raise ModelError(f"model.path: unknown builtin '{path}'; use one of: {known}")
        return builtin_dir(path)
    local = Path(path).expanduser()
    if (local / "config.json").is_file():
        return local
    cached = _hub_cache_dir(path) if is_hub_id(path) else None
    if cached is not None:
        return cached
    if download and is_hub_id(path) and os.environ.get("HF_HUB_OFFLINE", "").lower() not in ("1", "true", "yes"):
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(path))
    raise ModelError(f"model.path: '{path}' is not a local model directory (no config.json) and not a "
                     f"builtin ({', '.join(BUILTIN_MODELS)}); hub ids cannot be downloaded here")


def is_vlm(path: str | Path) -> bool:
    """Whether ``model.path`` is a vision-language model, read without building or loading it: a builtin by its
    name; a local model directory when its ``config.json`` has a ``vision_config`` (the vision tower transformers
    and the backends key on); any other path, a hub id, when its name says so (``...-VL-...``, ``vision``,
    ``llava``). Every adapter decides with this."""
    name = str(path)
    if name.startswith("builtin:"):
        return name in VLM_BUILTINS
    config = Path(name).expanduser() / "config.json"
    if config.is_file():
        try:
            return "vision_config" in json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
    return bool(_VL_NAME.search(name))


@functools.cache
def _without_video(base: Any) -> type:
    """``base`` (a transformers processor class, same name) that accepts ``video_processor=None``."""

    def check_argument_for_proper_class(self: Any, argument_name: str, argument: Any) -> Any:
        if argument_name == "video_processor" and argument is None:
            return type(None)
        return base.check_argument_for_proper_class(self, argument_name, argument)

    return type(base.__name__, (base,), {"check_argument_for_proper_class": check_argument_for_proper_class,
                                         "__module__": __name__})


def images_only_processor(model_type: str, tokenizer: Any, image_processor: Any) -> Any:
    """The transformers processor of ``model_type`` from ``tokenizer`` and ``image_processor``, with no video
    processor.

    Agents send images only, and transformers 5 builds Qwen-VL processors with a video processor that needs
    torchvision, whose PyPI wheel does not load beside the CPU build of torch. The class keeps its name (backends
    dispatch on it); the chat template is the tokenizer's.
    """
    import transformers
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    name = PROCESSOR_MAPPING_NAMES.get(model_type)
    base = getattr(transformers, name, None) if isinstance(name, str) else None
    if base is None:
        raise ValueError(f"no transformers processor is known for model type '{model_type}'")
    kwargs: dict[str, Any] = {"image_processor": image_processor, "tokenizer": tokenizer,
                              "chat_template": tokenizer.chat_template}
    if "video_processor" in inspect.signature(base.__init__).parameters:
        kwargs["video_processor"] = None
    return _without_video(base)(**kwargs)


def load_image_processor(path: str | Path) -> Any:
    """The image processor saved with a VLM (``preprocessor_config.json``), or None for a text model.

    Without torchvision, transformers falls back to the PIL implementation; that fallback is asked for directly
    here so no warning is printed.
    """
    local = resolve_model_path(str(path), download=True)
    config = local / "preprocessor_config.json"
    if not config.is_file():
        return None
    kind = json.loads(config.read_text(encoding="utf-8")).get("image_processor_type", "")
    if kind.startswith("Qwen2VLImageProcessor") and importlib.util.find_spec("torchvision") is None:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        return Qwen2VLImageProcessorPil.from_pretrained(local)
    from transformers import AutoImageProcessor

    return AutoImageProcessor.from_pretrained(local)


def load_model(path: str, seed: int = 0) -> Any:
    """The trainable model for ``model.path``: a causal LM, or an image-text-to-text model for a VLM.

    A builtin model is a random init: seed 0 is the cached one, another seed draws a fresh init of the same
    architecture (so a run's seed covers both data order and initialization). Weights load in float32 whatever
    the checkpoint stores (transformers 5 would keep a bf16 checkpoint in bf16): the optimizer keeps fp32 master
    weights, and bf16 on a GPU comes from autocast, so small updates are not rounded away.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    local = resolve_model_path(path, download=True)
    auto = AutoModelForImageTextToText if is_vlm(local) else AutoModelForCausalLM
    model = auto.from_pretrained(local, dtype=torch.float32)
    if path.startswith("builtin:") and seed != 0:
        torch.manual_seed(seed)
        fresh = type(model)(model.config)
        fresh.generation_config = model.generation_config
        model = fresh
    return model


def saved_chat_template(path: str) -> str | None:
    """The chat template ``AutoTokenizer`` would give a local model (builtins included), read from its files without
    importing transformers: ``chat_template.jinja``, else ``tokenizer_config.json``'s ``chat_template`` string.
    None when the files do not settle it (not local, several named templates, none saved): load the tokenizer then."""
    try:
        local = resolve_model_path(path)
    except ModelError:
        return None
    if (local / "additional_chat_templates").is_dir():
        return None
    if (local / "chat_template.jinja").is_file():
        return (local / "chat_template.jinja").read_text(encoding="utf-8")
    try:
        template = json.loads((local / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template")
    except (OSError, ValueError):
        return None
    return template if isinstance(template, str) else None


def load_tokenizer(path: str) -> Any:
    """``AutoTokenizer`` for a builtin name or local model directory."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model_path(path, download=True))
