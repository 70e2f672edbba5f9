"""Test-only agentbridge plugin: a GUI-style task that starts with a screenshot and a tool that returns new ones.

Found by entry point (the ``*.dist-info`` folder beside it) once this folder is on ``sys.path`` / ``PYTHONPATH``,
so OpenRLHF's Ray engine actors load it like any installed plugin. Registers environment, dataset and reward
``openrlhf-test/screens``:

- each task carries its first screenshot in ``data["images"]`` (a PNG data URI), which the OpenRLHF job moves to
  the dataset's image key; the environment never draws it, so a prompt image can only come from OpenRLHF;
- ``click(x, y)`` returns the screen after the click (a wider image: another visual-token count) and hit/miss.
"""

from __future__ import annotations

import base64
import io
import json
import random
from collections.abc import Callable
from typing import Any

from PIL import Image, ImageDraw

from agentbridge.env import Message, Task
from agentbridge.hooks import hookimpl
from agentbridge.tools import ToolEnvironment, tool

ID = "openrlhf-test/screens"
CELL = 14
SCREEN = (56, 56)  # 4 x 4 cells: 16 patches, 4 visual tokens for builtin:tiny-vl
AFTER_CLICK = (84, 56)  # 24 patches, 6 visual tokens


def screen(target: tuple[int, int], click: tuple[int, int] | None = None, size: tuple[int, int] = SCREEN) -> Any:
    """White screen, red square in cell ``target``; a blue dot where the agent clicked."""
    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    x, y = target
    draw.rectangle([x * CELL + 2, y * CELL + 2, x * CELL + CELL - 3, y * CELL + CELL - 3], fill="red")
    if click is not None:
        cx, cy = click[0] * CELL + CELL // 2, click[1] * CELL + CELL // 2
        draw.ellipse([cx - 3, cy - 3, cx + 3, cy + 3], fill="blue")
    return img


def data_uri(img: Any) -> str:
    """A PNG data URI (one of the image references OpenRLHF's ``load_images`` reads)."""
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def call(x: int, y: int) -> str:
    """The hermes tool call the scripted engine plays."""
    return f'<tool_call>\n{json.dumps({"name": "click", "arguments": {"x": x, "y": y}})}\n</tool_call>'


class ScreensEnv(ToolEnvironment):
    """Click the red square; the first screenshot must arrive with the task (``task.images``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__([tool(self.click)], **kwargs)
        self.target = (0, 0)

    async def reset(self, task: Task) -> list[Message]:
        if not task.images:
            raise ValueError(f"task {task.id} came without its screenshot")
        self.target = (int(task.data["x"]), int(task.data["y"]))
        return await super().reset(task)

    def click(self, x: int, y: int) -> list[dict[str, Any]]:
        """Click a cell of the screen.

        Args:
            x: Column of the cell (0-3).
            y: Row of the cell (0-3).
        """
        hit = (x, y) == self.target
        return [{"type": "image", "image": screen(self.target, (x, y), AFTER_CLICK)},
                {"type": "text", "text": "hit" if hit else "miss"}]


def screens_tasks(split: str = "train", size: int = 4, seed: int = 0, **_: Any) -> list[Task]:
    rng = random.Random(f"{split}-{seed}")
    tasks = []
    for i in range(size):
        x, y = rng.randrange(4), rng.randrange(4)
        tasks.append(Task(id=f"screens-{split}-{i}", prompt="Click the red square with the click tool, then answer.",
                          data={"x": x, "y": y, "images": [data_uri(screen((x, y)))]}))
    return tasks


def hit(trajectory: Any, task: Task) -> float:
    """1 when the last click hit the red square."""
    calls = [c for turn in trajectory.turns for c in turn.tool_calls if c["function"]["name"] == "click"]
    if not calls:
        return 0.0
    args = calls[-1]["function"].get("arguments") or {}
    return float((args.get("x"), args.get("y")) == (task.data["x"], task.data["y"]))


@hookimpl
def register_environments(register: Callable[[str, Any], None]) -> None:
    register(ID, ScreensEnv)


@hookimpl
def register_datasets(register: Callable[[str, Any], None]) -> None:
    register(ID, screens_tasks)


@hookimpl
def register_rewards(register: Callable[[str, Any], None]) -> None:
    register(ID, hit)
