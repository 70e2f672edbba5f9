"""Small helpers for driving a MiniWoBEnv by hand in tests."""

from __future__ import annotations

import json
from typing import Any

from agentbridge.env import Message, StepResult, Task, text_of
from agentbridge_gui.env import MiniWoBEnv


def call(name: str, **arguments: Any) -> Message:
    """An assistant message with one parsed tool call."""
    return {"role": "assistant", "content": f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}"
            "</tool_call>", "tool_calls": [{"id": "c0", "type": "function",
                                            "function": {"name": name, "arguments": arguments}}]}


def task(name: str, seed: int = 1) -> Task:
    return Task(id=f"{name}-{seed}", prompt=name, data={"task": name, "seed": seed})


def result_text(result: StepResult) -> str:
    return "\n".join(text_of(m) for m in result.observation)


async def play_expert(env: MiniWoBEnv, limit: int = 8) -> StepResult:
    """Step the env with its own expert's tool calls until it ends."""
    from agentbridge.rollout.parsers import HermesParser

    parser = HermesParser()
    result = StepResult(observation=[])
    for _ in range(limit):
        text = env.expert_action() or ""
        parsed = parser.parse(text)
        action: Message = {"role": "assistant", "content": text}
        if parsed.tool_calls:
            action["tool_calls"] = parsed.tool_calls
        result = await env.step(action)
        if result.done:
            break
    return result
