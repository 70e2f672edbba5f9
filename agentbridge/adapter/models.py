"""Models, tokenizers and reward models, as an adapter loads them (``from agentbridge.adapter.models import ...``):

- :func:`resolve_model_path`, :func:`is_hub_id`, :func:`load_tokenizer`, :func:`load_model`, :func:`is_vlm`,
  :func:`load_image_processor`, :func:`images_only_processor`, :class:`ModelError`, :func:`cache_entries_used`;
- the spec's reward models a backend serves itself: :class:`RewardModelArgs`, :func:`backend_served`,
  :func:`use_backend_server`.

Each name is imported from ``agentbridge.models`` or ``agentbridge.reward_model`` on first use (torch and
transformers only when a model loads).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentbridge.adapter import _lazy

if TYPE_CHECKING:
    from agentbridge.models import (
        ModelError,
        cache_entries_used,
        images_only_processor,
        is_hub_id,
        is_vlm,
        load_image_processor,
        load_model,
        load_tokenizer,
        resolve_model_path,
    )
    from agentbridge.reward_model import RewardModelArgs, backend_served, use_backend_server

# name -> the core module that defines it
_CORE = {
    "ModelError": "agentbridge.models",
    "cache_entries_used": "agentbridge.models",
    "images_only_processor": "agentbridge.models",
    "is_hub_id": "agentbridge.models",
    "is_vlm": "agentbridge.models",
    "load_image_processor": "agentbridge.models",
    "load_model": "agentbridge.models",
    "load_tokenizer": "agentbridge.models",
    "resolve_model_path": "agentbridge.models",
    "RewardModelArgs": "agentbridge.reward_model",
    "backend_served": "agentbridge.reward_model",
    "use_backend_server": "agentbridge.reward_model",
}

__all__ = [
    "ModelError", "RewardModelArgs", "backend_served", "cache_entries_used", "images_only_processor", "is_hub_id",
    "is_vlm", "load_image_processor", "load_model", "load_tokenizer", "resolve_model_path", "use_backend_server",
]


def __getattr__(name: str) -> Any:
    return _lazy.load(_CORE, __name__, name)
