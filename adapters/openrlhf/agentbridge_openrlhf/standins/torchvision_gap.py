"""Bridges the one gap torchvision's absence leaves on CPU (conformance and tests): a VLM processor without videos.

OpenRLHF's ``get_tokenizer`` loads a VLM's ``AutoProcessor``. transformers 5 builds Qwen2-VL's processor with a
video processor that requires torchvision; PyPI's torchvision does not import beside the CPU build of torch this
environment pins (``operator torchvision::nms does not exist``), and on a GPU cluster vLLM brings it anyway.
``install()`` lets ``AutoVideoProcessor`` yield ``None`` and the processor accept that ``None``: everything else
(tokenizer, PIL image processor, chat template, ``image_token_id``) is what ``AutoProcessor`` loads. No test
here and no golden episode has videos.
"""

from __future__ import annotations

import importlib.util
from typing import Any


def install() -> bool:
    """Patch transformers in this process (idempotent); False, patching nothing, when torchvision is present."""
    if importlib.util.find_spec("torchvision") is not None:
        return False
    from transformers import processing_utils

    mapping = processing_utils._LazyAutoProcessorMapping
    if getattr(mapping, "_agentbridge_gap", False):
        return True
    get, check = mapping.__getitem__, processing_utils.ProcessorMixin.check_argument_for_proper_class

    class NoVideoProcessor:
        """What ``AutoVideoProcessor`` stands for here: no video processor."""

        @classmethod
        def from_pretrained(cls, *args: Any, **kwargs: Any) -> None:
            return None

    def get_but_video(self: Any, key: str) -> Any:
        return NoVideoProcessor if key == "video_processor" else get(self, key)

    def check_but_video(self: Any, name: str, argument: Any) -> Any:
        return None if name == "video_processor" and argument is None else check(self, name, argument)

    mapping.__getitem__ = get_but_video
    mapping._agentbridge_gap = True
    processing_utils.ProcessorMixin.check_argument_for_proper_class = check_but_video
    return True
