"""The ``wordplay/reverse`` environment and the scripted expert that solves it."""

from __future__ import annotations

import json
from collections.abc import Sequence

from agentbridge import ToolEnvironment, ToolSpec, text_of
from agentbridge_wordplay.tools import reverse_text


class ReverseEnv(ToolEnvironment):
    """Tool environment with ``reverse_text``; the episode ends when the model answers without a tool call.

    The spec's ``environment.args`` become keyword arguments here; ``tools`` comes from the spec's
    ``tools:`` list when it has one.
    """

    def __init__(self, tools: Sequence[ToolSpec] | None = None, timeout_s: float = 5.0,
                 max_output_chars: int = 1000) -> None:
        super().__init__(tools or [reverse_text], timeout_s=timeout_s, max_output_chars=max_output_chars)

    def expert_action(self) -> str:
        """First call the tool on the task's word, then answer with what it returned."""
        assert self.task is not None, "expert_action() before reset()"
        results = [text_of(m) for m in self.history if m.get("role") == "tool"]
        if not results:
            call = {"name": "reverse_text", "arguments": {"text": self.task.data["word"]}}
            return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        return f"<answer>{results[-1]}</answer>"
