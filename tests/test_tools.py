"""@tool: JSON schema from type hints and docstrings, sync and async functions, argument checks."""

from __future__ import annotations

import asyncio
from typing import Literal

from agentbridge.env import Task
from agentbridge.tools import ToolEnvironment, tool


@tool
def search(query: str, topk: int = 3, mode: Literal["bm25", "dense"] = "bm25", tags: list[str] | None = None) -> str:
    """Search the corpus.

    Args:
        query: What to look for.
        topk: How many passages
            to return.
        mode: Retriever to use.
        tags: Optional filters.

    Returns:
        Passages.
    """
    return f"{query}:{topk}:{mode}"


@tool(name="add", timeout_s=2.0)
async def add_async(a: float, b: float) -> float:
    """Add two numbers."""
    await asyncio.sleep(0)
    return a + b


def test_schema_from_hints_and_docstring() -> None:
    fn = search.schema()["function"]
    assert fn["name"] == "search" and fn["description"] == "Search the corpus."
    props = fn["parameters"]["properties"]
    assert props["query"] == {"type": "string", "description": "What to look for."}
    assert props["topk"] == {"type": "integer", "description": "How many passages to return."}
    assert props["mode"]["enum"] == ["bm25", "dense"]
    assert props["tags"]["type"] == "array" and props["tags"]["items"] == {"type": "string"}
    assert fn["parameters"]["required"] == ["query"]


def test_async_tool_and_name_override() -> None:
    assert add_async.name == "add" and add_async.is_async and add_async.timeout_s == 2.0
    env = ToolEnvironment([search, add_async])
    asyncio.run(env.reset(Task("t", "q")))
    call = {"id": "c", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2.5}}}
    msg, ok = asyncio.run(env.call(call))  # type: ignore[arg-type]
    assert ok and msg["content"] == "3.5"


def test_argument_checks() -> None:
    assert search.check_arguments({"query": "x"}) is None
    assert search.parse_arguments({"query": "x", "topk": "3"}) == {"query": "x", "topk": 3}  # coerced, as pydantic does
    assert "must be integer" in (search.check_arguments({"query": "x", "topk": "three"}) or "")
    assert "must be integer" in (search.check_arguments({"query": "x", "topk": True}) or "")
    assert "unknown argument" in (search.check_arguments({"query": "x", "k": 1}) or "")
    assert "JSON object" in (search.check_arguments(["x"]) or "")
    assert search.check_arguments({"query": "x", "mode": "grep"}) is not None


def test_step_without_tool_call_ends_episode() -> None:
    env = ToolEnvironment([search])
    asyncio.run(env.reset(Task("t", "q")))
    result = asyncio.run(env.step({"role": "assistant", "content": "<answer>x</answer>"}))
    assert result.done and result.observation == []
