"""Models: the built-in tiny CPU models (``builtin``) and the Hugging Face loaders (``hf``); the cache they are
kept in is :mod:`agentbridge.cache` (its API is re-exported here for the plugins that import it from here)."""

from agentbridge.cache import cache_dir, cache_entries_used, cache_key, mark_built, no_cache_token, use_cache_entry
from agentbridge.models.builtin import (
    BUILTIN_MODELS,
    RECIPE_VERSION,
    TINY_SPECIALS,
    TINY_VL_MAX_PIXELS,
    TINY_VL_MIN_PIXELS,
    VISION_SPECIALS,
    VLM_BUILTINS,
    ModelError,
    builtin_dir,
    builtin_key,
    chat_template,
)
from agentbridge.models.hf import (
    images_only_processor,
    is_hub_id,
    is_vlm,
    load_image_processor,
    load_model,
    load_tokenizer,
    resolve_model_path,
    saved_chat_template,
)

__all__ = [
    "BUILTIN_MODELS", "RECIPE_VERSION", "TINY_SPECIALS", "TINY_VL_MAX_PIXELS", "TINY_VL_MIN_PIXELS", "VISION_SPECIALS",
    "VLM_BUILTINS", "ModelError", "builtin_dir", "builtin_key", "cache_dir", "cache_entries_used", "cache_key",
    "chat_template", "images_only_processor", "is_hub_id", "is_vlm", "load_image_processor", "load_model",
    "load_tokenizer", "mark_built", "no_cache_token", "resolve_model_path", "saved_chat_template",
    "use_cache_entry",
]
