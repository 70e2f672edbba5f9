"""Tool-call parsers: read tool calls out of generated text."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Protocol

from agentbridge.env import ToolCall


@dataclass
class ParsedAction:
    """The assistant's text split into plain content, well-formed tool calls and malformed ones."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class ToolCallParser(Protocol):
    def parse(self, text: str) -> ParsedAction: ...


class HermesParser:
    """Hermes / Qwen2.5 format: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``."""

    pattern = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)

    def parse(self, text: str) -> ParsedAction:
        calls: list[ToolCall] = []
        errors: list[str] = []
        for i, m in enumerate(self.pattern.finditer(text)):
            raw = m.group(1).strip()
            if not m.group(0).endswith("</tool_call>"):
                errors.append(f"tool call {i + 1} is not closed with </tool_call>")
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as e:
                errors.append(f"tool call {i + 1} is not valid JSON ({e.msg} at column {e.colno})")
                continue
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                errors.append(f'tool call {i + 1} must be an object with a "name" string and "arguments"')
                continue
            args = obj.get("arguments", {})
            if isinstance(args, str):  # some models emit arguments as a JSON string
                try:
                    args = json.loads(args)
                except json.JSONDecodeError:
                    errors.append(f"tool call {i + 1}: arguments is a string that is not JSON")
                    continue
            calls.append({"id": f"call_{i}", "type": "function",
                          "function": {"name": obj["name"], "arguments": args}})
        content = self.pattern.sub("", text).strip()
        return ParsedAction(content=content, tool_calls=calls, errors=errors)
