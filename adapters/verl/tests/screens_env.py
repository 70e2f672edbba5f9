"""A GUI-style environment for the VLM tests: a screenshot in the prompt, a ``click`` tool that returns a new one.

``register()`` adds environment and dataset ``verl-test/screens`` to this process's plugin registries. Every
image is a pure function of the task and the click, so a test can redraw the exact pixels the policy must have seen.
"""

from __future__ import annotations

import json
from typing import Any

from PIL import Image, ImageDraw

from agentbridge.env import Message, Task
from agentbridge.plugins import get_plugins
from agentbridge.tools import ToolEnvironment, tool

ENV_ID = "verl-test/screens"
CELL = 14
SCREEN = (56, 56)  # 16 patches: 4 visual tokens with builtin:tiny-vl
SHOT = (84, 56)  # 24 patches: 6 visual tokens
COLOURS = ["red", "green", "blue", "orange", "purple", "teal"]

SPEC = f"""
name: screens-vlm
model: {{path: "builtin:tiny-vl", chat_template: qwen2_5_vl_tools, tool_call_format: hermes}}
agent:
  system_prompt: Click the square twice, then name its colour as <answer>colour</answer>.
  max_turns: 4
  max_prompt_tokens: 512
  max_response_tokens: 256
  max_tokens_per_turn: 48
  sampling: {{temperature: 1.0, top_p: 1.0}}
environment: {{id: {ENV_ID}}}
tools: []
reward:
  - {{id: core/exact_answer, weight: 1.0}}
  - {{id: core/format, weight: 0.1}}
data:
  train: {{id: {ENV_ID}, split: train, size: 4, seed: 0}}
algorithm: {{name: grpo, group_size: 2, batch_size: 2, lr: 1.0e-5, warmup_steps: 0, steps: 1}}
resources: {{nodes: 1, gpus_per_node: 0}}
backend: {{name: verl}}
seed: 0
"""


def screen(colour: str, size: tuple[int, int] = SCREEN, click: tuple[int, int] | None = None) -> Image.Image:
    """White screen with a coloured square in cell (1, 1); a black dot in the clicked cell."""
    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    draw.rectangle([CELL + 2, CELL + 2, 2 * CELL - 3, 2 * CELL - 3], fill=colour)
    if click is not None:
        cx, cy = click[0] * CELL + CELL // 2, click[1] * CELL + CELL // 2
        draw.ellipse([cx - 2, cy - 2, cx + 2, cy + 2], fill="black")
    return img


def clicks(task: Task) -> list[tuple[int, int]]:
    """The two cells the scripted policy clicks for ``task``."""
    return [tuple(c) for c in task.data["clicks"]]


def expected_images(task: Task) -> list[Image.Image]:
    """Every image an episode of ``task`` shows the policy: the prompt's screen, then one screenshot per click."""
    colour = task.data["answer"]
    return [screen(colour), *(screen(colour, SHOT, c) for c in clicks(task))]


class ScreensEnv(ToolEnvironment):
    """The prompt shows the screen; ``click(x, y)`` answers with the screenshot after the click."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__([tool(self.click)], **kwargs)

    async def reset(self, task: Task) -> list[Message]:
        task.images = [screen(task.data["answer"])]  # tasks travel as JSON: images are drawn from their data
        return await super().reset(task)

    def click(self, x: int, y: int) -> list[dict[str, Any]]:
        """Click a cell of the screen.

        Args:
            x: Column of the cell (0-3).
            y: Row of the cell (0-3).
        """
        assert self.task is not None
        shot = screen(self.task.data["answer"], SHOT, (x, y))
        return [{"type": "image", "image": shot}, {"type": "text", "text": f"clicked ({x}, {y})"}]


def screens_tasks(split: str = "train", size: int = 4, seed: int = 0, **_: Any) -> list[Task]:
    """``size`` tasks, each its own colour and click cells; the prompt carries a ``[screens:i]`` marker."""
    return [Task(id=f"screens-{split}-{i}", prompt=f"[screens:{i}] What colour is the square?",
                 data={"answer": COLOURS[(i + seed) % len(COLOURS)], "clicks": [[i % 4, 0], [3, (i + 1) % 4]]})
            for i in range(size)]


def script(tasks: list[Task]) -> Any:
    """The scripted policy: click each of the task's cells, then answer (wrong for every second episode)."""
    episodes: dict[str, list[str]] = {}

    def play(request_id: str, text: str) -> str:
        task = next(t for t in tasks if t.prompt in text)
        seen = episodes.setdefault(task.id, [])
        if request_id not in seen:
            seen.append(request_id)
        turn = text.count("<|im_start|>assistant") - 1
        if turn < len(clicks(task)):
            x, y = clicks(task)[turn]
            return f'<tool_call>\n{json.dumps({"name": "click", "arguments": {"x": x, "y": y}})}\n</tool_call>'
        wrong = seen.index(request_id) % 2 == 1
        return f"<answer>{'black' if wrong else task.data['answer']}</answer>"

    return play


def register() -> None:
    """Add ``verl-test/screens`` (environment and dataset) to this process's registries (idempotent)."""
    plugins = get_plugins()
    if ENV_ID not in plugins.environments:
        plugins.environments.add(ENV_ID, ScreensEnv, "verl-tests")
        plugins.datasets.add(ENV_ID, screens_tasks, "verl-tests")
