"""A tiny GUI-style agent for the VLM tests: a screenshot in the prompt, a ``click`` tool that returns a new one.

Registered in-process as a plugin (``Plugins(extra=[("click-test", click_env)])``): environment ``vlm/click``,
dataset ``vlm/click``, reward ``vlm/hit``. The scripted expert clicks the red square's cell, then answers.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from PIL import Image, ImageDraw

from agentbridge.env import Message, Task
from agentbridge.hooks import hookimpl
from agentbridge.tools import ToolEnvironment, tool

CELL = 14
SCREEN = (56, 56)  # 4 x 4 cells; 16 patches -> 4 visual tokens for builtin:tiny-vl
SHOT = (84, 56)  # the tool's screenshot is wider: 24 patches -> 6 visual tokens


def screen(x: int, y: int, click: tuple[int, int] | None = None, size: tuple[int, int] = SCREEN) -> Image.Image:
    """White screen, red square in cell (x, y); a blue dot where the agent clicked."""
    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    draw.rectangle([x * CELL + 2, y * CELL + 2, x * CELL + CELL - 3, y * CELL + CELL - 3], fill="red")
    if click is not None:
        cx, cy = click[0] * CELL + CELL // 2, click[1] * CELL + CELL // 2
        draw.ellipse([cx - 3, cy - 3, cx + 3, cy + 3], fill="blue")
    return img


class ClickEnv(ToolEnvironment):
    """Click the red square: the prompt shows the screen, ``click(x, y)`` shows the screen after the click."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__([tool(self.click)], **kwargs)
        self.target = (0, 0)
        self.clicks: list[tuple[int, int]] = []

    async def reset(self, task: Task) -> list[Message]:
        self.target = (int(task.data["x"]), int(task.data["y"]))
        self.clicks = []
        task.images = [screen(*self.target)]  # images are drawn from the task's data (tasks travel as JSON)
        return await super().reset(task)

    def click(self, x: int, y: int) -> list[dict[str, Any]]:
        """Click a cell of the screen.

        Args:
            x: Column of the cell (0-3).
            y: Row of the cell (0-3).
        """
        self.clicks.append((x, y))
        hit = (x, y) == self.target
        return [{"type": "image", "image": screen(*self.target, click=(x, y), size=SHOT)},
                {"type": "text", "text": "hit" if hit else "miss"}]

    def expert_action(self) -> str:
        if not self.clicks:
            call = {"name": "click", "arguments": {"x": self.target[0], "y": self.target[1]}}
            return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        return "<answer>done</answer>"


def click_tasks(split: str = "train", size: int = 8, seed: int = 0, **_: Any) -> list[Task]:
    rng = random.Random(f"{split}-{seed}")
    return [Task(id=f"click-{split}-{i}", prompt="Click the red square with the click tool, then answer.",
                 data={"x": rng.randrange(4), "y": rng.randrange(4)}) for i in range(size)]


def hit(trajectory: Any, task: Task) -> float:
    """1 when the last click hit the red square."""
    calls = [c for turn in trajectory.turns for c in turn.tool_calls if c["function"]["name"] == "click"]
    if not calls:
        return 0.0
    args = calls[-1]["function"].get("arguments") or {}
    return float((args.get("x"), args.get("y")) == (task.data["x"], task.data["y"]))


@hookimpl
def register_environments(register: Callable[[str, Any], None]) -> None:
    register("vlm/click", ClickEnv)


@hookimpl
def register_datasets(register: Callable[[str, Any], None]) -> None:
    register("vlm/click", click_tasks)


@hookimpl
def register_rewards(register: Callable[[str, Any], None]) -> None:
    register("vlm/hit", hit)


SPEC = """
name: click-vlm
model: {path: "builtin:tiny-vl", tool_call_format: hermes}
agent:
  max_turns: 3
  max_prompt_tokens: 256
  max_response_tokens: 160
  max_tokens_per_turn: 32
  sampling: {temperature: 1.0, top_p: 1.0}
environment: {id: vlm/click}
tools: []
reward: [{id: vlm/hit, weight: 1.0}]
data:
  train: {id: vlm/click, split: train, size: 8, seed: 0}
algorithm: {name: grpo, group_size: 4, batch_size: 2, lr: 1.0e-3, warmup_steps: 0, kl_coef: 0.0, steps: 2}
resources: {nodes: 1, gpus_per_node: 0}
backend: {name: trl, options: {}}
seed: 0
"""
