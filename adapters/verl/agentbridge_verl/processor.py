"""The multimodal processor veRL's ``AgentLoopWorker`` and trainer use for a vision-language model.

veRL 0.9.1 loads it with ``verl.utils.tokenizer.hf_processor`` (``AutoProcessor`` plus ``get_rope_index`` bound for
M-RoPE position ids) and computes ``multi_modal_inputs`` (``pixel_values``, ``image_grid_thw``) and the position ids
of every sample with it. transformers 5 builds Qwen-VL processors with a video processor that needs torchvision; on
a GPU node vLLM brings torchvision, but PyPI's torchvision does not load beside the CPU build of torch
("operator torchvision::nms does not exist"). ``verl_processor`` then builds the same processor without its video
processor (agentbridge sends images only), still through veRL's own ``hf_processor``.
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

# processor classes veRL 0.9.1's hf_processor binds (any other silently becomes None)
VERL_PROCESSORS = ("Qwen2VLProcessor", "Qwen2_5_VLProcessor", "Qwen3VLProcessor", "Glm4vProcessor",
                   "Glm46VProcessor", "MllamaProcessor", "Gemma4Processor")
NO_TORCHVISION = ("torchvision is not installed in this environment (its PyPI wheel does not load beside the CPU "
                  "torch build): veRL's processor was built without its video processor; images are unaffected")


def processor_class(model: str) -> str | None:
    """The processor class ``AutoProcessor`` picks for the model directory ``model`` (None if it has none)."""
    from transformers import AutoConfig
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    return PROCESSOR_MAPPING_NAMES.get(AutoConfig.from_pretrained(model).model_type)


def image_only_processor(model: str) -> Any:
    """The model's processor as ``AutoProcessor`` loads it, but with no video processor (needs no torchvision):
    the core's :func:`agentbridge.models.images_only_processor` with the model directory's tokenizer and the PIL
    image processor transformers falls back to without torchvision."""
    from transformers import AutoConfig, AutoTokenizer

    from agentbridge.adapter.models import images_only_processor, load_image_processor

    return images_only_processor(AutoConfig.from_pretrained(model).model_type, AutoTokenizer.from_pretrained(model),
                                 load_image_processor(model))


# the files that give a model directory a processor of its own, whatever its model type
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json", "video_preprocessor_config.json")


def text_only(model: str) -> bool:
    """Whether ``AutoProcessor`` would answer the local model directory ``model`` with its tokenizer (which veRL's
    ``hf_processor`` then drops): no processor files, no ``processor_class`` in its tokenizer config and a model type
    with no processor. False for anything else (a hub id, a directory that might have a processor)."""
    path = Path(model)
    if not path.is_dir() or any((path / name).exists() for name in PROCESSOR_FILES):
        return False
    tokenizer_config = path / "tokenizer_config.json"
    if tokenizer_config.is_file() and "processor_class" in json.loads(tokenizer_config.read_text("utf-8")):
        return False
    return processor_class(model) is None


def verl_processor(model: str) -> tuple[Any, str | None]:
    """veRL's processor for ``model`` (``hf_processor``), and a note when it had to be built without torchvision.

    Returns ``(None, None)`` for a text-only model and for a processor veRL does not bind. A text-only model directory
    (:func:`text_only`) is answered without asking ``AutoProcessor``, which would load its whole tokenizer for veRL to
    drop it.
    """
    from verl.utils.tokenizer import hf_processor

    if text_only(model):
        return None, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        processor = hf_processor(model)
        if processor is not None or importlib.util.find_spec("torchvision") is not None:
            return processor, None
        if processor_class(model) not in VERL_PROCESSORS:
            return None, None
        import transformers

        def load(name_or_path: str, **_: Any) -> Any:
            return image_only_processor(str(name_or_path))

        with mock.patch.object(transformers.AutoProcessor, "from_pretrained", load):
            processor = hf_processor(model)
    return processor, NO_TORCHVISION if processor is not None else None
