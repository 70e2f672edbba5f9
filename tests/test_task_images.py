"""A task's first images travel as references in ``data["images"]`` (every backend serializes tasks as JSON)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from agentbridge.conformance import GoldenPolicy, golden_spec, image_digest
from agentbridge.conformance.golden import square
from agentbridge.env import Task, load_image
from agentbridge.rollout.agent import Agent


def test_images_round_trip_through_the_task_json(tmp_path: Path) -> None:
    blue = square("blue", (56, 56))
    task = Task(id="t", prompt="p", data={"answer": "blue"}, images=[blue])
    d = json.loads(json.dumps(task.to_dict()))
    assert d["data"]["images"][0].startswith("data:image/png;base64,")
    back = Task.from_dict(d)
    assert back.images == [] and image_digest(load_image(back.data["images"][0])) == image_digest(blue)
    blue.save(tmp_path / "blue.png")
    assert image_digest(load_image(str(tmp_path / "blue.png"))) == image_digest(blue)


def test_the_driver_shows_a_tasks_referenced_images_to_the_model() -> None:
    agent = Agent.from_spec(golden_spec("vlm"))
    blue = square("blue", (56, 56))
    task = Task.from_dict(Task(id="image", prompt="[golden:image] What colour?", data={"answer": "red"},
                               images=[blue]).to_dict())
    bad = Task(id="image", prompt="[golden:image] What colour?", data={"answer": "red", "images": ["nonsense!"]})
    good, broken = asyncio.run(agent.run([task, bad], GoldenPolicy(agent.tokenizer)))
    assert good.finish_reason == "done" and image_digest(good.images[0]) == image_digest(blue)
    assert len(good.images) == 2  # the task's image, then the tool's screenshot
    assert broken.finish_reason == "error"
    assert broken.error == "ValueError: task image 'nonsense!': not a data URI, base64 image or existing file"
