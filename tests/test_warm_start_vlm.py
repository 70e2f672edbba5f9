"""The warm start carries pixels: a VLM's SFT rows keep the episode's images and the loss sees them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
PIL = pytest.importorskip("PIL.Image")

import torch  # noqa: E402

from agentbridge.env import Task  # noqa: E402
from agentbridge.rollout import Limits, Renderer, ScriptedPolicy, run_episode  # noqa: E402
from agentbridge.tools import ToolEnvironment, tool  # noqa: E402
from agentbridge.training.warm_start import SFTRun, prefix_shared_loss, sft_rows  # noqa: E402


@tool
def look(x: int) -> list[dict[str, Any]]:
    """Look again.

    Args:
        x: Where.
    """
    return [{"type": "text", "text": f"at {x}"}, {"type": "image", "image": PIL.new("RGB", (56, 28), "blue")}]


@pytest.fixture(scope="module")
def vlm() -> tuple[Any, Any, Any]:
    from agentbridge.models import load_image_processor, load_model, load_tokenizer

    return load_model("builtin:tiny-vl"), load_tokenizer("builtin:tiny-vl"), load_image_processor("builtin:tiny-vl")


def _episode(tokenizer: Any, color: str) -> Any:
    """One scripted episode: a prompt screenshot of ``color``, a tool call returning a second image, an answer."""
    env = ToolEnvironment([look])
    task = Task(id="t", prompt="Click the square.", images=[PIL.new("RGB", (56, 56), color)])
    script = ['<tool_call>\n{"name": "look", "arguments": {"x": 3}}\n</tool_call>', "<answer>17</answer>"]
    traj = asyncio.run(run_episode(ScriptedPolicy(tokenizer, script), env, task,
                                   Renderer(tokenizer, tools=env.tool_schemas()), Limits(max_turns=3)))
    assert traj.finish_reason == "done", traj.error
    return traj


def test_rows_keep_the_episodes_images_in_placeholder_order(vlm: tuple[Any, Any, Any], tmp_path: Path) -> None:
    _, tokenizer, _ = vlm
    traj = _episode(tokenizer, "red")
    (row,) = sft_rows([traj])
    assert [tuple(im.shape) for im in row["images"]] == [(56, 56, 3), (28, 56, 3)]
    assert row["images"][0][0, 0].tolist() == [255, 0, 0] and row["images"][1][0, 0].tolist() == [0, 0, 255]
    assert row["input_ids"] == traj.prompt_ids + traj.response_ids
    assert "images" not in sft_rows([_text_only(traj)])[0]
    saved = tmp_path / "rows.pt"   # the SFT-only control's start is saved and read back with weights_only=True
    torch.save({"rows": [row]}, saved)
    assert torch.equal(torch.load(saved, weights_only=True)["rows"][0]["images"][1], row["images"][1])


def _text_only(traj: Any) -> Any:
    from dataclasses import replace

    return replace(traj, images=[])


def test_the_sft_loss_depends_on_the_rows_pixels(vlm: tuple[Any, Any, Any]) -> None:
    model, tokenizer, processor = vlm
    torch.manual_seed(0)
    rows = sft_rows([_episode(tokenizer, "red"), _episode(tokenizer, "green")])
    assert rows[0]["input_ids"] == rows[1]["input_ids"]   # same tokens: only the pixels differ
    pad = tokenizer.pad_token_id or 0
    run = SFTRun(model, rows, lr=1e-3, batch_size=2, pad_id=pad, image_processor=processor)
    batch = run._batch()
    assert batch["pixel_values"].shape[0] == int(batch["image_grid_thw"].prod(-1).sum())
    model.eval()
    with torch.no_grad():
        both = prefix_shared_loss(model, batch)
        swapped = prefix_shared_loss(model, {**batch, "pixel_values": torch.zeros_like(batch["pixel_values"])})
        red = prefix_shared_loss(model, SFTRun(model, rows[:1], lr=1e-3, batch_size=1, pad_id=pad,
                                               image_processor=processor)._batch())
        green = prefix_shared_loss(model, SFTRun(model, rows[1:], lr=1e-3, batch_size=1, pad_id=pad,
                                                 image_processor=processor)._batch())
    assert abs(float(both) - float(swapped)) > 1e-6     # other pixels, other loss: the images reach the model
    assert abs(float(red) - float(green)) > 1e-6        # same ids, different screenshot: different loss
    # a training step sends gradient into the vision tower
    model.train()
    loss = prefix_shared_loss(model, batch)
    loss.backward()
    grads = [p.grad for n, p in model.named_parameters() if "visual" in n and p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    model.zero_grad(set_to_none=True)


def test_image_rows_need_a_vision_model_and_matching_placeholders(vlm: tuple[Any, Any, Any]) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    model, tokenizer, processor = vlm
    rows = sft_rows([_episode(tokenizer, "red")])
    text_lm = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                           num_attention_heads=2, num_key_value_heads=1))
    with pytest.raises(ValueError, match="not a vision-language model"):
        SFTRun(text_lm, rows, lr=1e-3, batch_size=1, pad_id=0)
    broken = [{**rows[0], "images": rows[0]["images"][:1]}]
    with pytest.raises(ValueError, match="image tokens but its 1 images need"):
        SFTRun(model, broken, lr=1e-3, batch_size=1, pad_id=0, image_processor=processor)._batch()
