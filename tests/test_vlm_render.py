"""Images in the driver: placeholders expanded to visual tokens in the prompt and in tool observations."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
PIL = pytest.importorskip("PIL.Image")

from agentbridge.env import Task  # noqa: E402
from agentbridge.rollout import Limits, Renderer, ScriptedPolicy, TemplateError, run_episode  # noqa: E402
from agentbridge.tools import ToolEnvironment, tool  # noqa: E402


@tool
def screenshot(zoom: int) -> list[dict[str, Any]]:
    """Take a screenshot.

    Args:
        zoom: Zoom level (1-3).
    """
    return [{"type": "text", "text": f"zoom {zoom}"},
            {"type": "image", "image": PIL.new("RGB", (28 * (zoom + 1), 56), "green")}]


def call(name: str, args: dict[str, Any]) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


@pytest.fixture(scope="module")
def vl_tokenizer() -> Any:
    from agentbridge.models import load_tokenizer

    return load_tokenizer("builtin:tiny-vl")


@pytest.fixture(scope="module")
def image_processor() -> Any:
    from agentbridge.models import load_image_processor

    return load_image_processor("builtin:tiny-vl")


def run(tokenizer: Any, script: list[str], **limits: Any) -> Any:
    env = ToolEnvironment([screenshot])
    task = Task(id="t", prompt="Look.", images=[PIL.new("RGB", (56, 56), "red"), PIL.new("RGB", (112, 56), "blue")])
    renderer = Renderer(tokenizer, tools=env.tool_schemas())
    return asyncio.run(run_episode(ScriptedPolicy(tokenizer, script), env, task, renderer, Limits(**limits))), renderer


def test_prompt_and_response_equal_processor_expanded_conversation(vl_tokenizer: Any, image_processor: Any) -> None:
    script = [call("screenshot", {"zoom": 1}), call("screenshot", {"zoom": 3}), "<answer>ok</answer>"]
    traj, renderer = run(vl_tokenizer, script)
    assert traj.finish_reason == "done", traj.error
    assert [im.size for im in traj.images] == [(56, 56), (112, 56), (56, 56), (112, 56)]  # prompt, then tools
    # independent reference: the whole conversation rendered once, each placeholder expanded by the processor's grid
    text = vl_tokenizer.apply_chat_template(traj.messages, tokenize=False).rstrip("\n")
    grid = image_processor(images=traj.images, return_tensors="pt")["image_grid_thw"]
    counts = iter((grid.prod(-1) // image_processor.merge_size ** 2).tolist())
    pad = vl_tokenizer.convert_tokens_to_ids("<|image_pad|>")
    expected: list[int] = []
    for t in vl_tokenizer.encode(text, add_special_tokens=False):
        expected += [t] * next(counts) if t == pad else [t]
    assert traj.prompt_ids + traj.response_ids == expected
    assert next(counts, None) is None
    # the tool screenshots are in the response, masked out; the prompt holds the task's two images
    assert traj.prompt_ids.count(pad) == sum((grid[:2].prod(-1) // 4).tolist())
    in_response = [t for t, m in zip(traj.response_ids, traj.response_mask, strict=True) if t == pad]
    assert len(in_response) == sum((grid[2:].prod(-1) // 4).tolist())
    assert all(m == 0 for t, m in zip(traj.response_ids, traj.response_mask, strict=True) if t == pad)
    assert renderer.image_tokens(traj.images[1]) == int(grid[1].prod()) // 4


def test_images_need_a_vision_template(vl_tokenizer: Any, tiny_tokenizer: Any) -> None:
    assert Renderer(tiny_tokenizer).image_token_id is None
    drops_images = ("{% for m in messages %}{% if m['content'] is string %}{{ m['content'] }}{% else %}"
                    "{% for c in m['content'] %}{% if c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}"
                    "{% endif %}<|im_end|>{% endfor %}")
    renderer = Renderer(vl_tokenizer, chat_template=drops_images)
    with pytest.raises(TemplateError, match="0 image placeholders for 1 images"):
        renderer.render_prompt([{"role": "user", "content": [{"type": "image", "image": PIL.new("RGB", (56, 56))},
                                                             {"type": "text", "text": "hi"}]}])


def test_text_only_rendering_is_unchanged(vl_tokenizer: Any) -> None:
    renderer = Renderer(vl_tokenizer)
    messages = [{"role": "user", "content": "hello"}]
    assert renderer.render_prompt(messages) == renderer.encode(renderer.render_text(messages,
                                                                                    add_generation_prompt=True))
    assert renderer._image_processor is None  # nothing image-related was loaded for text


def test_vlm_policy_generates_with_images(vl_tokenizer: Any) -> None:
    from agentbridge.rollout.hf_vlm_policy import HFVLMPolicy
    from agentbridge.trajectory import SamplingParams

    policy = HFVLMPolicy.from_pretrained("builtin:tiny-vl", seed=0)
    renderer = Renderer(vl_tokenizer)
    image = PIL.new("RGB", (56, 56), "red")
    prompt = renderer.render_prompt([{"role": "user", "content": [{"type": "image", "image": image},
                                                                  {"type": "text", "text": "What is it?"}]}])

    async def both() -> Any:
        return await asyncio.gather(policy.generate(prompt, SamplingParams(max_tokens=4), images=[image]),
                                    policy.generate(renderer.render_prompt([{"role": "user", "content": "hi"}]),
                                                    SamplingParams(max_tokens=4)))

    with_image, text_only = asyncio.run(both())
    assert 1 <= len(with_image.token_ids) <= 4 and 1 <= len(text_only.token_ids) <= 4
    assert policy.batches == [2]  # one generate call served both
    with pytest.raises(ValueError, match="image tokens"):
        asyncio.run(policy.generate([1, 2, 3], SamplingParams(max_tokens=2), images=[image]))
