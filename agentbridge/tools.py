"""Tools: the ``@tool`` decorator, ToolSpec (OpenAI function JSON schema), dispatch, ToolEnvironment."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin

from agentbridge.env import Message, StepResult, Task, ToolCall

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean",
                               dict: "object", list: "array"}


def _json_schema(tp: Any) -> dict[str, Any]:
    """JSON schema of a type hint (str, int, float, bool, list[X], dict, Literal, Optional)."""
    origin = get_origin(tp)
    if tp in _JSON_TYPES:
        return {"type": _JSON_TYPES[tp]}
    if origin is Literal:
        values = list(get_args(tp))
        return {"type": _JSON_TYPES.get(type(values[0]), "string"), "enum": values}
    if origin in (list, Sequence, tuple):
        args = get_args(tp)
        return {"type": "array", "items": _json_schema(args[0])} if args else {"type": "array"}
    if origin is dict:
        return {"type": "object"}
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(tp) if a is not type(None)]
        if len(members) == 1:
            return _json_schema(members[0])
        return {"anyOf": [_json_schema(a) for a in members]}
    return {}


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {arg: description})."""
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    desc: list[str] = []
    args: dict[str, str] = {}
    section = "desc"
    current = ""
    for line in lines:
        stripped = line.strip()
        if re.fullmatch(r"(Args|Arguments|Parameters):", stripped):
            section = "args"
            continue
        if re.fullmatch(r"(Returns|Raises|Yields|Examples?|Notes?):", stripped):
            section = "other"
            continue
        if section == "desc":
            desc.append(stripped)
        elif section == "args":
            m = re.match(r"(\w+)\s*(\([^)]*\))?\s*:\s*(.*)", stripped)
            if m and not line.startswith(" " * 8):
                current = m.group(1)
                args[current] = m.group(3)
            elif current and stripped:
                args[current] = f"{args[current]} {stripped}".strip()
    return " ".join(x for x in desc if x).strip(), args


@dataclass
class ToolSpec:
    """A callable tool with its OpenAI function schema."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    timeout_s: float | None = None
    hints: dict[str, Any] = field(default_factory=dict)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema (what chat templates render in the tools block)."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def check_arguments(self, arguments: Any) -> str | None:
        """Why ``arguments`` do not fit this tool's signature, or None when they do."""
        if not isinstance(arguments, dict):
            return f"arguments must be a JSON object, got {type(arguments).__name__}"
        props = self.parameters.get("properties", {})
        missing = [k for k in self.parameters.get("required", []) if k not in arguments]
        if missing:
            return f"missing required argument(s): {', '.join(missing)}"
        unknown = [k for k in arguments if k not in props]
        if unknown:
            return f"unknown argument(s): {', '.join(unknown)}; expected {', '.join(props) or 'none'}"
        for key, value in arguments.items():
            if not _matches(value, props[key]):
                return f"argument '{key}' must be {props[key].get('type', 'valid')}, got {type(value).__name__}"
        return None

    async def __call__(self, **kwargs: Any) -> Any:
        if self.is_async:
            return await self.fn(**kwargs)
        return await asyncio.to_thread(self.fn, **kwargs)


def _matches(value: Any, schema: dict[str, Any]) -> bool:
    if "enum" in schema and value not in schema["enum"]:
        return False
    if "anyOf" in schema:
        return any(_matches(value, s) for s in schema["anyOf"])
    kind = schema.get("type")
    checks: dict[str, Callable[[Any], bool]] = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
    }
    if kind is None:
        return True
    return checks.get(kind, lambda v: True)(value)


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None,
         timeout_s: float | None = None) -> Any:
    """Turn a sync or async function with type hints and a Google-style docstring into a ToolSpec.

    Use as ``@tool`` or ``@tool(name="calc", timeout_s=5)``.
    """

    def wrap(f: Callable[..., Any]) -> ToolSpec:
        description, arg_docs = _parse_docstring(f.__doc__ or "")
        hints = typing.get_type_hints(f)
        props: dict[str, Any] = {}
        required: list[str] = []
        for pname, param in inspect.signature(f).parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            prop = _json_schema(hints.get(pname, str))
            if pname in arg_docs:
                prop["description"] = arg_docs[pname]
            props[pname] = prop
            if param.default is inspect.Parameter.empty:
                required.append(pname)
        parameters = {"type": "object", "properties": props, "required": required}
        return ToolSpec(name=name or f.__name__, description=description or f.__name__,
                        parameters=parameters, fn=f, timeout_s=timeout_s)

    return wrap(fn) if fn is not None else wrap


def as_tool(obj: ToolSpec | Callable[..., Any]) -> ToolSpec:
    """A ToolSpec for ``obj``: itself when already one, else ``@tool`` applied to the function."""
    return obj if isinstance(obj, ToolSpec) else tool(obj)


def _render_result(result: Any) -> Any:
    """Tool return value → message content: text, or content blocks when images are involved."""
    if isinstance(result, str):
        return result
    if isinstance(result, list) and any(isinstance(b, dict) and b.get("type") in ("image", "text")
                                        for b in result):
        return result
    if hasattr(result, "save") and hasattr(result, "size"):  # a PIL image
        return [{"type": "image", "image": result}]
    try:
        return json.dumps(result, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(result)


def _truncate(content: Any, limit: int) -> tuple[Any, bool]:
    if isinstance(content, str) and len(content) > limit:
        return content[:limit] + f"\n... [truncated {len(content) - limit} characters]", True
    if isinstance(content, list):
        out, cut = [], False
        for block in content:
            if block.get("type") == "text" and len(block.get("text", "")) > limit:
                block = {**block, "text": block["text"][:limit] + " ... [truncated]"}
                cut = True
            out.append(block)
        return out, cut
    return content, False


class ToolEnvironment:
    """Runs the model's tool calls against ``@tool`` functions; ends when the model answers without one.

    A tool that raises, times out, gets bad arguments or an unknown name yields an error message to the
    model and a counted metric (``tools/failures``), never an exception. Tool output is truncated to
    ``max_output_chars``.
    """

    def __init__(self, tools: Sequence[ToolSpec | Callable[..., Any]] = (), *, timeout_s: float = 10.0,
                 max_output_chars: int = 4000) -> None:
        self.tools: dict[str, ToolSpec] = {t.name: t for t in map(as_tool, tools)}
        self.timeout_s = timeout_s
        self.max_output_chars = max_output_chars
        self.task: Task | None = None
        self.history: list[Message] = []

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self.tools.values()]

    async def reset(self, task: Task) -> list[Message]:
        self.task = task
        content: Any = task.prompt
        if task.images:
            content = [*({"type": "image", "image": im} for im in task.images), {"type": "text", "text": task.prompt}]
        self.history = [{"role": "user", "content": content}]
        return list(self.history)

    async def step(self, action: Message) -> StepResult:
        self.history.append(action)
        calls: list[ToolCall] = action.get("tool_calls") or []
        parse_errors: list[str] = action.get("tool_call_errors") or []  # type: ignore[assignment]
        if not calls and not parse_errors:
            return StepResult(observation=[], done=True, reward=await self.final_reward(action))
        results = await asyncio.gather(*(self.call(c) for c in calls))
        observation: list[Message] = [m for m, _ in results]
        failures = sum(not ok for _, ok in results) + len(parse_errors)
        observation += [{"role": "tool", "name": "error", "content": f"Error: {e}"} for e in parse_errors]
        truncated = 0
        for msg in observation:
            msg["content"], cut = _truncate(msg["content"], self.max_output_chars)
            truncated += cut
        self.history.extend(observation)
        metrics = {"tools/calls": float(len(calls) + len(parse_errors)), "tools/failures": float(failures),
                   "tools/truncated": float(truncated)}
        return StepResult(observation=observation, metrics=metrics)

    async def call(self, call: ToolCall) -> tuple[Message, bool]:
        """Run one tool call; returns the tool message and whether it succeeded."""
        name = call["function"].get("name", "")
        args = call["function"].get("arguments")
        msg: Message = {"role": "tool", "tool_call_id": call.get("id", ""), "name": name}
        spec = self.tools.get(name)
        if spec is None:
            known = ", ".join(self.tools) or "none"
            msg["content"] = f"Error: unknown tool '{name}'. Available tools: {known}."
            return msg, False
        problem = spec.check_arguments(args)
        if problem or not isinstance(args, dict):  # check_arguments names the problem of a non-object
            msg["content"] = f"Error: bad arguments for {name}: {problem}."
            return msg, False
        timeout = spec.timeout_s or self.timeout_s
        try:
            result = await asyncio.wait_for(spec(**args), timeout=timeout)
        except TimeoutError:
            msg["content"] = f"Error: tool '{name}' timed out after {timeout:g}s."
            return msg, False
        except Exception as e:  # noqa: BLE001 - a tool failure must reach the model, not crash the batch
            msg["content"] = f"Error: {name} failed: {type(e).__name__}: {e}"
            return msg, False
        msg["content"] = _render_result(result)
        return msg, True

    async def final_reward(self, action: Message) -> float:
        """Process reward for the final answer step; 0 unless a subclass says otherwise."""
        return 0.0

    def expert_action(self) -> str | None:
        """The text a scripted expert would emit next (used by the ``scripted`` policy); None if unknown."""
        return None

    async def close(self) -> None:
        return None
