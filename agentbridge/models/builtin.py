"""The built-in tiny CPU models (``builtin:tiny``, ``builtin:tiny-qwen2.5``, ``builtin:tiny-rm``,
``builtin:tiny-vl``): random-init Qwen2 / Qwen2-VL with their tokenizers, built offline once and cached under a key
of this module's code, its templates and the building libraries' versions.

Heavy libraries (torch, transformers, tokenizers, tiktoken) are imported lazily inside functions.
"""

from __future__ import annotations

import ast
import fcntl
import importlib.resources
import importlib.util
import json
import os
import random
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from agentbridge.cache import cache_dir, cache_key, mark_built, use_cache_entry

RECIPE_VERSION = 2
BUILTIN_MODELS: dict[str, str] = {
    "builtin:tiny": "4-layer 128-wide random-init Qwen2, 4096-token byte-level BPE; fastest smoke tests",
    "builtin:tiny-qwen2.5": "2-layer 64-wide Qwen2 (random init) with the real 151k Qwen2.5 tokenizer",
    "builtin:tiny-rm": "builtin:tiny as a random-init reward model (Qwen2 sequence classification, one score)",
    "builtin:tiny-vl": "2-layer 64-wide random-init Qwen2-VL (vision depth 1), 4096-token BPE with the vision "
                       "tokens, Qwen2.5-VL chat template, small-image Qwen2VLImageProcessor",
}
VLM_BUILTINS = ("builtin:tiny-vl",)
VISION_SPECIALS = ["<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]
# builtin:tiny-vl images are resized to 4..16 units of 28x28 pixels: 16..64 patches, 4..16 visual tokens each
TINY_VL_MIN_PIXELS, TINY_VL_MAX_PIXELS = 28 * 28 * 4, 28 * 28 * 16
TINY_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
                 "<tool_response>", "</tool_response>", "<think>", "</think>"]
QWEN_PAT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
            r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                 "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                 "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
                 "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
                 "<|repo_name|>", "<|file_sep|>"]
_STDLIB_FILES = ["argparse.py", "contextlib.py", "dataclasses.py", "functools.py", "json/__init__.py",
                 "logging/__init__.py", "pathlib.py", "random.py", "string.py", "textwrap.py"]


class ModelError(ValueError):
    """A model could not be resolved or built; the message is one line saying what, where and how to fix."""


def chat_template(name: str = "qwen2_5") -> str:
    """A vendored chat template (``qwen2_5`` by default, or ``qwen2_5_vl``)."""
    template = importlib.resources.files("agentbridge") / "templates" / f"{name}.jinja"
    return template.read_text(encoding="utf-8")


def _corpus() -> list[str]:
    """Deterministic training text: template, stdlib docstrings, arithmetic problems, tool calls, answers."""
    texts = [chat_template()]
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for rel in _STDLIB_FILES:
        try:
            tree = ast.parse((stdlib / rel).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                if doc := ast.get_docstring(node):
                    texts.append(doc)
    rng = random.Random(0)
    for _ in range(3000):
        a, b, c = rng.randint(1, 99), rng.randint(1, 99), rng.randint(2, 9)
        op, sym = rng.choice([("Add", "+"), ("Multiply", "*"), ("Subtract", "-")])
        if op == "Subtract":
            q, expr, ans = f"Subtract {a} from {b}.", f"{b} - {a}", b - a
        else:
            ans = (a + b if op == "Add" else a * b) * c
            q, expr = f"{op} {a} and {b}, then multiply by {c}.", f"({a} {sym} {b}) * {c}"
        call = json.dumps({"name": "calculator", "arguments": {"expression": expr}})
        texts.append(f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n<think>\nI will use the "
                     f"calculator.\n</think>\n<tool_call>\n{call}\n</tool_call><|im_end|>\n<|im_start|>user\n"
                     f"<tool_response>\n{ans}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
                     f"The answer is {ans}.\n<answer>{ans}</answer><|im_end|>\n<|endoftext|>")
    return texts


def _qwen_pipeline(tok: Any) -> Any:
    """Give ``tok`` Qwen2.5's exact normalizer/pre-tokenizer/post-processor/decoder.

    transformers 5 loads every ``qwen2`` checkpoint through ``Qwen2Tokenizer``, which rebuilds the pipeline
    from vocab+merges with this recipe; using it at train time keeps tokenizer.json and AutoTokenizer in sync.
    Its one-digit number alternative makes every digit a single token, as in Qwen2.5.
    """
    from tokenizers import Regex, decoders, normalizers, pre_tokenizers, processors

    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def _wrap(tok_obj: Any, extra: list[str]) -> Any:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tok_obj, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", extra_special_tokens=extra, padding_side="left",
                                   model_max_length=4096, chat_template=chat_template())


def _tiny_tokenizer(extra: list[str] | None = None) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    specials = TINY_SPECIALS + (extra or [])
    tok = _qwen_pipeline(Tokenizer(models.BPE()))
    trainer = trainers.BpeTrainer(vocab_size=4096, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return _wrap(tok, specials[3:])


def _qwen_tokenizer() -> Any:
    from transformers.convert_slow_tokenizer import TikTokenConverter

    spec = importlib.util.find_spec("dashscope")  # locates without importing (its deps are absent)
    roots = list(spec.submodule_search_locations or []) if spec else []
    vocab = next((Path(r) / "resources" / "qwen.tiktoken" for r in roots
                  if (Path(r) / "resources" / "qwen.tiktoken").is_file()), None)
    if vocab is None:
        raise ModelError("builtin:tiny-qwen2.5: qwen.tiktoken not found (dashscope/resources/qwen.tiktoken); "
                         "install it with `pip install --no-deps dashscope`")
    conv = TikTokenConverter(vocab_file=str(vocab), pattern=QWEN_PAT, extra_special_tokens=QWEN_SPECIALS)
    tok = conv.converted()
    return _wrap(_qwen_pipeline(tok), QWEN_SPECIALS[3:])


def _vl_model(tok: Any) -> Any:
    """A random-init Qwen2-VL sized like builtin:tiny-qwen2.5, with a one-block vision tower."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    ids = {t: tok.convert_tokens_to_ids(t) for t in VISION_SPECIALS}
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2VLConfig(
        text_config={"vocab_size": len(tok), "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
                     "eos_token_id": eos, "pad_token_id": pad, "bos_token_id": None, "tie_word_embeddings": True},
        vision_config={"depth": 1, "embed_dim": 32, "hidden_size": 64, "num_heads": 2, "mlp_ratio": 2,
                       "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True, eos_token_id=eos, pad_token_id=pad)
    return Qwen2VLForConditionalGeneration(config)


def _build(name: str, out: Path) -> None:
    """Build tokenizer + random-init Qwen2 (or Qwen2-VL) for builtin ``name`` into directory ``out``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if name == "builtin:tiny-vl":
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        tok = _tiny_tokenizer(VISION_SPECIALS)
        tok.chat_template = chat_template("qwen2_5_vl")
        torch.manual_seed(0)
        model = _vl_model(tok)
        size = {"shortest_edge": TINY_VL_MIN_PIXELS, "longest_edge": TINY_VL_MAX_PIXELS}
        Qwen2VLImageProcessorPil(size=size).save_pretrained(out)
        _save(name, out, tok, model)
        return
    if name in ("builtin:tiny", "builtin:tiny-rm"):
        tok, dims = _tiny_tokenizer(), {"hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 4}
    else:
        tok, dims = _qwen_tokenizer(), {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(vocab_size=len(tok), num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, tie_word_embeddings=True, eos_token_id=eos,
                         pad_token_id=pad, bos_token_id=None, **dims)
    torch.manual_seed(0)
    if name == "builtin:tiny-rm":
        from transformers import Qwen2ForSequenceClassification

        config.num_labels = 1
        _save(name, out, tok, Qwen2ForSequenceClassification(config))
        return
    _save(name, out, tok, Qwen2ForCausalLM(config))


def _declare_added_tokens(out: Path) -> None:
    """Write ``tokenizer.json``'s added tokens into ``tokenizer_config.json`` as ``added_tokens_decoder`` (as the Hub's
    Qwen2.5 files do). Without it transformers 5 parses the whole ``tokenizer.json`` once more on every load, only to
    find them: for the 151k-token vocabulary a third to a half of each tokenizer load. The tokens are the same."""
    config_path, tokenizer = out / "tokenizer_config.json", json.loads((out / "tokenizer.json").read_text("utf-8"))
    config = json.loads(config_path.read_text("utf-8"))
    config.setdefault("added_tokens_decoder", {
        str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in tokenizer["added_tokens"]})
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _save(name: str, out: Path, tok: Any, model: Any) -> None:
    from transformers import GenerationConfig
    from transformers.utils import logging as hf_logging

    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(out, safe_serialization=True)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    tok.save_pretrained(out)
    _declare_added_tokens(out)
    meta = {"name": name, "recipe_version": RECIPE_VERSION, "vocab_size": len(tok),
            "parameters": sum(p.numel() for p in model.parameters())}
    (out / "agentbridge.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def builtin_key(name: str) -> str:
    """The cache key of builtin ``name``: this module's code, its templates, the Python standard library's
    version (the tokenizer's corpus) and the versions of the libraries that build it."""
    templates = importlib.resources.files("agentbridge") / "templates"
    code = (Path(__file__), *(Path(str(templates / f)) for f in ("qwen2_5.jinja", "qwen2_5_vl.jinja")))
    return cache_key(name, RECIPE_VERSION, sys.version_info[:3], code=code,
                     packages=("torch", "transformers", "tokenizers", "tiktoken"))


def builtin_dir(name: str) -> Path:
    """Return the cached build of builtin ``name``, building it under a file lock if absent."""
    root = cache_dir() / "models"
    target = root / f"{name.removeprefix('builtin:')}-{builtin_key(name)}"
    if use_cache_entry(name, target) and (target / "agentbridge.json").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            # another process (of this --no-cache run, if it is one) may have built it meanwhile
            if use_cache_entry(name, target) and (target / "agentbridge.json").is_file():
                return target
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
            try:
                tmp.chmod(0o755)
                _build(name, tmp)
                mark_built(tmp)
                shutil.rmtree(target, ignore_errors=True)  # stale partial dir, if any
                os.replace(tmp, target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target
