"""Tests for agentbridge.models: builtin tiny models, caching, determinism and errors."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentbridge import models
from agentbridge.models import BUILTIN_MODELS, ModelError, builtin, cache_dir, load_tokenizer, resolve_model_path

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
TOOLS = [{"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                   "required": ["expression"]}}}]


def _dashscope_vocab() -> Path | None:
    spec = importlib.util.find_spec("dashscope")
    for root in (spec.submodule_search_locations or []) if spec else []:
        if (Path(root) / "resources" / "qwen.tiktoken").is_file():
            return Path(root) / "resources" / "qwen.tiktoken"
    return None


@pytest.fixture(scope="module")
def tiny_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cache dir with builtin:tiny built once for this module; AGENTBRIDGE_CACHE points at it."""
    cache = tmp_path_factory.mktemp("cache_a")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENTBRIDGE_CACHE", str(cache))
        resolve_model_path("builtin:tiny")
        yield cache


def test_tiny_builds_and_loads(tiny_cache: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path("builtin:tiny")
    assert path.parent == tiny_cache / "models" and path.name == f"tiny-{models.builtin_key('builtin:tiny')}"
    meta = json.loads((path / "agentbridge.json").read_text())
    assert meta["name"] == "builtin:tiny" and meta["vocab_size"] == 4096
    built = [p.name for p in (tiny_cache / "models").iterdir() if not p.name.endswith(".lock")]
    assert built == [path.name]  # no temp dirs left behind
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert len(tok) == 4096 == model.config.vocab_size
    assert meta["parameters"] == sum(p.numel() for p in model.parameters())
    assert model.config.tie_word_embeddings and model.config.hidden_size == 128
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>" and tok.padding_side == "left"
    assert model.config.eos_token_id == tok.eos_token_id == model.generation_config.eos_token_id
    assert model.config.pad_token_id == tok.pad_token_id == model.generation_config.pad_token_id
    for special in models.TINY_SPECIALS:
        ids = tok.encode(special, add_special_tokens=False)
        assert len(ids) == 1 and tok.decode(ids) == special
    ids = tok.encode("12345", add_special_tokens=False)
    assert [tok.decode([i]) for i in ids] == list("12345")
    text = tok.apply_chat_template([{"role": "user", "content": "Add 15 and 27."}], tools=TOOLS,
                                   tokenize=False, add_generation_prompt=True)
    assert "<tools>" in text and '"calculator"' in text and text.endswith("<|im_start|>assistant\n")
    enc = tok(["Add 1 and 2.", "Subtract 19 from 83, then multiply by 3."], padding=True, return_tensors="pt")
    out = model.generate(**enc, max_new_tokens=3, do_sample=False)
    assert out.shape[0] == 2 and out.shape[1] <= enc["input_ids"].shape[1] + 3


def test_tokenizer_json_matches_autotokenizer(tiny_cache: Path) -> None:
    """transformers rebuilds qwen2 tokenizers from vocab+merges; the saved tokenizer.json must agree."""
    from tokenizers import Tokenizer

    path = resolve_model_path("builtin:tiny")
    raw, tok = Tokenizer.from_file(str(path / "tokenizer.json")), load_tokenizer("builtin:tiny")
    text = ('<|im_start|>user\nAdd 15 and 27, then multiply by 3. Café\n\n  "x":1<|im_end|>\n<tool_call>\n'
            '{"name": "calculator", "arguments": {"expression": "15 + 27"}}\n</tool_call><answer>42</answer>')
    assert tok(text)["input_ids"] == raw.encode(text).ids
    assert tok.decode(raw.encode(text).ids) == text


def test_cached_build_is_reused(tiny_cache: Path) -> None:
    weights = resolve_model_path("builtin:tiny") / "model.safetensors"
    mtime = weights.stat().st_mtime_ns
    assert resolve_model_path("builtin:tiny") / "model.safetensors" == weights
    assert weights.stat().st_mtime_ns == mtime


def test_build_is_deterministic(tiny_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from safetensors.torch import load_file

    first = resolve_model_path("builtin:tiny")
    monkeypatch.setenv("AGENTBRIDGE_CACHE", str(tmp_path / "cache_b"))
    second = resolve_model_path("builtin:tiny")
    assert first != second
    assert load_tokenizer(str(first)).get_vocab() == load_tokenizer(str(second)).get_vocab()
    assert (first / "tokenizer.json").read_bytes() == (second / "tokenizer.json").read_bytes()
    w1, w2 = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert w1.keys() == w2.keys()
    for key in ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight"):
        assert w1[key].equal(w2[key])


def test_concurrent_builds_share_one_result(tiny_cache: Path, tmp_path: Path) -> None:
    """Two processes race to build; the lock makes them share one (byte-identical) build."""
    code = "from agentbridge.models import resolve_model_path; print(resolve_model_path('builtin:tiny'))"
    env = {**_env(), "AGENTBRIDGE_CACHE": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs) and outs[0] == outs[1]
    dirs = [p.name for p in (tmp_path / "models").iterdir() if p.is_dir()]
    assert dirs == [Path(outs[0]).name]
    for name in ("tokenizer.json", "model.safetensors"):  # cross-process determinism too
        assert (Path(outs[0]) / name).read_bytes() == (tiny_cache / "models" / Path(outs[0]).name / name).read_bytes()


@pytest.mark.skipif(_dashscope_vocab() is None, reason="needs `pip install --no-deps dashscope`")
def test_tiny_qwen25_matches_qwen_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("AGENTBRIDGE_CACHE", str(tmp_path))
    tok = load_tokenizer("builtin:tiny-qwen2.5")
    assert len(tok) == 151665
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>"]) == [
        151643, 151644, 151645, 151657]
    assert tok.encode("Hello, world!", add_special_tokens=False) == [9707, 11, 1879, 0]
    assert len(tok.encode("<tool_response>", add_special_tokens=False)) > 1  # not special in Qwen2.5
    assert [tok.decode([i]) for i in tok.encode("2024", add_special_tokens=False)] == list("2024")
    assert tok.eos_token_id == 151645 and tok.pad_token_id == 151643
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tools=TOOLS, tokenize=False)
    assert "<tools>" in chat and chat.startswith("<|im_start|>system\nYou are Qwen")
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path("builtin:tiny-qwen2.5"))
    assert model.config.vocab_size == 151665 and model.config.num_hidden_layers == 2
    assert model.config.eos_token_id == 151645 and model.config.pad_token_id == 151643


@pytest.mark.skipif(_dashscope_vocab() is None, reason="needs `pip install --no-deps dashscope`")
def test_declared_added_tokens_spare_a_parse_of_tokenizer_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The builtin's tokenizer_config.json declares tokenizer.json's added tokens (``added_tokens_decoder``), so that
    transformers reads the 151k-token tokenizer.json once less per load; without the declaration it loads the same
    tokenizer."""
    import shutil

    from transformers import AutoTokenizer

    built = Path(resolve_model_path("builtin:tiny-qwen2.5"))
    declared = json.loads((built / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    added = json.loads((built / "tokenizer.json").read_text())["added_tokens"]
    assert {int(i): t for i, t in declared.items()} == {t["id"]: {k: v for k, v in t.items() if k != "id"}
                                                        for t in added}
    bare = tmp_path / "bare"
    shutil.copytree(built, bare)
    config = json.loads((bare / "tokenizer_config.json").read_text())
    del config["added_tokens_decoder"]
    (bare / "tokenizer_config.json").write_text(json.dumps(config))

    reads: list[str] = []
    honest = json.load

    def counted(f: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append(Path(getattr(f, "name", "")).name)
        return honest(f, *args, **kwargs)

    monkeypatch.setattr(json, "load", counted)
    tok = AutoTokenizer.from_pretrained(built)
    once, reads[:] = reads.count("tokenizer.json"), []
    plain = AutoTokenizer.from_pretrained(bare)
    assert once < reads.count("tokenizer.json"), (once, reads)
    text = "<|im_start|>user\n12+7 <tool_call>\n{\"name\": \"add\"}</tool_call> ü 你好<|im_end|>"
    assert tok(text)["input_ids"] == plain(text)["input_ids"] and len(tok) == len(plain) == 151665
    assert tok.added_tokens_decoder == plain.added_tokens_decoder and tok.all_special_ids == plain.all_special_ids
    assert (tok.eos_token_id, tok.pad_token_id) == (plain.eos_token_id, plain.pad_token_id) == (151645, 151643)


def test_missing_dashscope_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builtin.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelError, match=r"pip install --no-deps dashscope"):
        builtin._qwen_tokenizer()


def test_errors_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTBRIDGE_CACHE", str(tmp_path))
    with pytest.raises(ModelError) as unknown:
        resolve_model_path("builtin:foo")
    assert "builtin:foo" in str(unknown.value) and all(n in str(unknown.value) for n in BUILTIN_MODELS)
    with pytest.raises(ModelError) as missing:
        resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct")
    msg = str(missing.value)
    assert msg.startswith("model.path: 'Qwen/Qwen2.5-0.5B-Instruct' is not a local model directory")
    assert "builtin:tiny, builtin:tiny-qwen2.5" in msg
    for err in (unknown.value, missing.value):
        assert "\n" not in str(err)
    assert not (tmp_path / "models").exists()


def test_local_directory_and_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model_path(str(tmp_path)) == tmp_path
    monkeypatch.setenv("AGENTBRIDGE_CACHE", str(tmp_path / "ab"))
    assert cache_dir() == tmp_path / "ab"
    monkeypatch.delenv("AGENTBRIDGE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "agentbridge"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "agentbridge"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def test_import_is_light() -> None:
    code = ("import sys, agentbridge.models as m; assert m.BUILTIN_MODELS; "
            "heavy = [x for x in ('torch', 'transformers', 'tokenizers', 'tiktoken') if x in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], env=_env(), check=True)


def test_tiny_vl_builds_deterministically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """builtin:tiny-vl: a random-init Qwen2-VL, the vision tokens, the vendored Qwen2.5-VL template, an image
    processor config beside it; two builds are byte-identical."""
    from transformers import AutoModelForImageTextToText

    first = resolve_model_path("builtin:tiny-vl")
    monkeypatch.setenv("AGENTBRIDGE_CACHE", str(tmp_path))
    second = resolve_model_path("builtin:tiny-vl")
    assert first != second
    for name in ("tokenizer.json", "model.safetensors", "preprocessor_config.json", "config.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    tok = load_tokenizer(str(second))
    assert len(tok) == 4096 and tok.chat_template == models.chat_template("qwen2_5_vl")
    for special in models.VISION_SPECIALS + models.TINY_SPECIALS:
        assert len(tok.encode(special, add_special_tokens=False)) == 1, special
    model = AutoModelForImageTextToText.from_pretrained(second)
    assert type(model).__name__ == "Qwen2VLForConditionalGeneration" and models.is_vlm(str(second))
    assert model.config.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
    assert model.config.vision_config.depth == 1 and model.config.text_config.hidden_size == 64
    assert json.loads((second / "agentbridge.json").read_text())["parameters"] == sum(
        p.numel() for p in model.parameters())
    processor = models.load_image_processor(str(second))
    assert processor.size["longest_edge"] == models.TINY_VL_MAX_PIXELS and processor.merge_size == 2
    assert models.load_image_processor("builtin:tiny") is None and not models.is_vlm("builtin:tiny")


def test_cache_key_covers_inputs_code_and_packages(tmp_path: Path) -> None:
    code = tmp_path / "builder.py"
    code.write_text("def build(): return 1\n")
    key = models.cache_key("builtin:tiny", 2, code=(code,), packages=("torch",))
    assert key == models.cache_key("builtin:tiny", 2, code=(code,), packages=("torch",))
    assert key != models.cache_key("builtin:tiny", 3, code=(code,), packages=("torch",))
    assert key != models.cache_key("builtin:tiny", 2, code=(code,), packages=("torch", "transformers"))
    code.write_text("def build(): return 2\n")  # the building code changed: a new entry
    assert key != models.cache_key("builtin:tiny", 2, code=(code,), packages=("torch",))
    assert models.builtin_key("builtin:tiny") != models.builtin_key("builtin:tiny-qwen2.5")


def test_no_cache_rebuilds_each_entry_once_per_run(tiny_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = resolve_model_path("builtin:tiny")
    built = (path / "agentbridge.json").stat().st_mtime_ns
    monkeypatch.setenv("AGENTBRIDGE_NO_CACHE", "run-1")
    assert resolve_model_path("builtin:tiny") == path
    rebuilt = (path / "agentbridge.json").stat().st_mtime_ns
    assert rebuilt != built and (path / ".no-cache-token").read_text() == "run-1"
    assert resolve_model_path("builtin:tiny") == path  # the same run (any of its processes) reuses its rebuild
    assert (path / "agentbridge.json").stat().st_mtime_ns == rebuilt
    assert models.cache_entries_used()["builtin:tiny"] == str(path)
    monkeypatch.delenv("AGENTBRIDGE_NO_CACHE")
    assert resolve_model_path("builtin:tiny") == path and (path / "agentbridge.json").stat().st_mtime_ns == rebuilt


def test_a_hub_id_in_the_hugging_face_cache_resolves_without_download(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    """A GPU user's hub id: found in the local Hugging Face cache (never downloaded by a check)."""
    snapshot = tmp_path / "models--org--tiny" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "models--org--tiny" / "refs").mkdir()
    (tmp_path / "models--org--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    assert resolve_model_path("org/tiny") == snapshot
    with pytest.raises(ModelError, match="'org/other' is not a local model directory"):
        resolve_model_path("org/other")


def test_a_bf16_checkpoint_trains_in_float32(tmp_path: Path) -> None:
    """transformers 5 keeps a checkpoint's dtype; the trainable model must hold fp32 master weights."""
    import torch

    model = models.load_model("builtin:tiny")
    model.to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["dtype"] == "bfloat16"
    loaded = models.load_model(str(tmp_path / "bf16"))
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}


@pytest.mark.parametrize("name", ["builtin:tiny", "builtin:tiny-qwen2.5", "builtin:tiny-vl", "builtin:tiny-rm"])
def test_the_saved_chat_template_is_the_tokenizers(name: str) -> None:
    """What compile hashes without transformers is what AutoTokenizer gives, for every builtin."""
    from agentbridge.models import saved_chat_template

    template = saved_chat_template(name)
    assert template and template == load_tokenizer(name).chat_template


def test_the_saved_chat_template_of_a_saved_tokenizer(tmp_path: Path) -> None:
    """A tokenizer as transformers saves it (chat_template.jinja), a model that keeps its template in
    tokenizer_config.json, and several named templates, which are left to the tokenizer (None)."""
    from transformers import AutoTokenizer

    from agentbridge.models import saved_chat_template

    template = saved_chat_template("builtin:tiny")
    local = tmp_path / "model"
    AutoTokenizer.from_pretrained(resolve_model_path("builtin:tiny")).save_pretrained(local)
    (local / "config.json").write_text("{}")
    assert saved_chat_template(str(local)) == template  # chat_template.jinja, as transformers saves it
    (local / "chat_template.jinja").unlink()
    config = json.loads((local / "tokenizer_config.json").read_text())
    (local / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": "{{ messages }}"}))
    assert saved_chat_template(str(local)) == "{{ messages }}" == AutoTokenizer.from_pretrained(local).chat_template
    (local / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": [
        {"name": "default", "template": "{{ messages }}"}, {"name": "tool_use", "template": "{{ tools }}"}]}))
    assert saved_chat_template(str(local)) is None and isinstance(AutoTokenizer.from_pretrained(local).chat_template,
                                                                    dict)
    assert saved_chat_template(str(tmp_path / "absent")) is None
