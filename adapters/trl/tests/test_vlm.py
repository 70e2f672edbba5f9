"""A tiny random-init Qwen2-VL trains for 2 GRPO steps on CPU, with a screenshot in the prompt and a tool that
returns a new one: the images reach the forward pass, and ids, masks and rewards are the driver's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("PIL")

import click_env  # noqa: E402
from expert_mix import mix_in_expert

from agentbridge.models import (
    load_model,  # noqa: E402
    load_tokenizer,  # noqa: E402
)
from agentbridge.plugins import Plugins  # noqa: E402
from agentbridge.rollout.agent import Agent  # noqa: E402
from agentbridge.spec import load_spec  # noqa: E402
from agentbridge_trl.config import grpo_config_kwargs  # noqa: E402
from agentbridge_trl.trainer import build_trainer  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory: Any) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("vlm")
    (tmp / "spec.yaml").write_text(click_env.SPEC)
    spec = load_spec(tmp / "spec.yaml")
    agent = Agent(spec, load_tokenizer(spec.model.path), plugins=Plugins(extra=[("click-test", click_env)]))
    model = load_model(spec.model.path)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer, rollout = build_trainer(agent, model, grpo_config_kwargs(spec, str(tmp / "out")), agent.tasks("train"))

    mix_in_expert(rollout, agent.tokenizer)  # every other episode plays the expert
    seen: list[dict[str, Any]] = []
    original_loss = trainer._compute_loss

    def spy_loss(model: Any, inputs: dict[str, Any]) -> Any:
        seen.append({"inputs": {k: v.detach().clone() if isinstance(v, torch.Tensor) else v
                                for k, v in inputs.items()}, "trajs": list(rollout.last)})
        return original_loss(model, inputs)

    trainer._compute_loss = spy_loss  # type: ignore[method-assign]
    trainer.train()
    changed = {n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())}
    return {"seen": seen, "changed": changed, "agent": agent, "trainer": trainer, "tmp": Path(tmp)}


def rows(step: dict[str, Any]) -> list[dict[str, Any]]:
    """Each training row with its trajectory (TRL shuffles rows), ids, loss mask and its own vision inputs."""
    inputs, trajs = step["inputs"], step["trajs"]
    out, pixel_start, image_start = [], 0, 0
    grid = inputs.get("image_grid_thw")
    for i, n in enumerate(inputs.get("num_images") or [0] * inputs["completion_ids"].shape[0]):
        comp = inputs["completion_ids"][i].tolist()
        traj = next(t for t in trajs if comp[: len(t.response_ids)] == t.response_ids)
        g = grid[image_start: image_start + n] if n else torch.zeros(0, 3, dtype=torch.long)
        patches = int(g.prod(-1).sum()) if n else 0
        prompt = inputs["prompt_ids"][i][inputs["prompt_mask"][i].bool()].tolist()
        out.append({"traj": traj, "grid": g, "pixels": inputs["pixel_values"][pixel_start: pixel_start + patches],
                    "ids": prompt + comp[: len(traj.response_ids)], "prompt": prompt,
                    "mask": (inputs["completion_mask"][i] * inputs["tool_mask"][i]).tolist(),
                    "mm": inputs["mm_token_type_ids"][i].tolist() if "mm_token_type_ids" in inputs else None,
                    "full_ids": torch.cat([inputs["prompt_ids"][i], inputs["completion_ids"][i]]).tolist()})
        pixel_start, image_start = pixel_start + patches, image_start + n
    assert pixel_start == inputs["pixel_values"].shape[0] and image_start == grid.shape[0]
    return out


def test_trainer_is_the_vlm_subclass(run: dict[str, Any]) -> None:
    trainer = run["trainer"]
    assert type(trainer).__name__ == "AgentVLMGRPOTrainer" and trainer._is_vlm
    assert type(trainer.model).__name__ == "Qwen2VLForConditionalGeneration"
    assert not trainer.tools  # the image-path switch never outlives a generation batch


def test_two_steps_change_weights_including_the_vision_tower(run: dict[str, Any]) -> None:
    assert len(run["seen"]) == 2
    assert any(n.startswith("model.language_model") for n in run["changed"])
    assert any(".visual." in f".{n}" for n in run["changed"])  # gradients flowed through the images


def test_forward_pass_gets_each_samples_own_images(run: dict[str, Any]) -> None:
    image_processor = run["agent"].renderer.image_processor
    tool_images = 0
    for step in run["seen"]:
        for row in rows(step):
            traj = row["traj"]
            assert len(row["grid"]) == len(traj.images) >= 1  # count: every image the episode saw
            want = image_processor(images=traj.images, return_tensors="pt")
            assert torch.equal(row["grid"], want["image_grid_thw"])
            assert torch.equal(row["pixels"], want["pixel_values"])  # pixel equality, image by image
            # ... and they are the env's images for this sample's task: its screen, then the click screenshot
            task = next(t for t in run["agent"].tasks("train") if t.id == traj.task_id)
            x, y = task.data["x"], task.data["y"]
            assert traj.images[0].tobytes() == click_env.screen(x, y).tobytes()
            if len(traj.images) > 1:
                tool_images += 1
                clicked = traj.turns[0].tool_calls[0]["function"]["arguments"]
                shot = click_env.screen(x, y, click=(clicked["x"], clicked["y"]), size=click_env.SHOT)
                assert traj.images[1].size == shot.size and traj.images[1].tobytes() == shot.tobytes()
    assert tool_images >= 4  # the experts' click screenshots were trained on


def test_expanded_image_tokens_match_grid(run: dict[str, Any]) -> None:
    pad = run["agent"].renderer.image_token_id
    for step in run["seen"]:
        for row in rows(step):
            assert row["ids"].count(pad) == int(row["grid"].prod(-1).sum()) // 4
            in_prompt = row["prompt"].count(pad)
            assert in_prompt == int(row["grid"][0].prod()) // 4  # the prompt's screenshot
            assert row["mm"] is not None and row["mm"] == [int(t == pad) for t in row["full_ids"]]


def test_loss_mask_equals_driver_response_mask(run: dict[str, Any]) -> None:
    masked_images = 0
    for step in run["seen"]:
        for row in rows(step):
            want = row["traj"].response_mask
            assert row["mask"][: len(want)] == want and not any(row["mask"][len(want):])
            assert row["ids"] == row["traj"].prompt_ids + row["traj"].response_ids
            pad = run["agent"].renderer.image_token_id
            masked_images += sum(1 for t, m in zip(row["traj"].response_ids, want, strict=True) if t == pad and not m)
    assert masked_images > 0  # tool screenshots are in the completion and out of the loss


def test_checkpoint_loads_as_the_vlm(run: dict[str, Any]) -> None:
    from agentbridge.models import is_vlm, load_image_processor

    checkpoint = run["tmp"] / "out" / "checkpoint-2"  # the last step's, what --resume continues from
    assert is_vlm(checkpoint) and load_image_processor(checkpoint) is not None
    assert type(load_model(str(checkpoint))).__name__ == "Qwen2VLForConditionalGeneration"


def test_capabilities_are_honest() -> None:
    from agentbridge_trl.backend import TrlBackend

    caps = TrlBackend().capabilities()
    assert caps.multimodal and caps.tool_images
