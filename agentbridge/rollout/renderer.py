"""Render conversations to token ids with a Hugging Face chat template, turn by turn.

The prompt is rendered once. Each later observation is appended as the template's *continuation* tokens:
the rendering of the new messages after a fixed short conversation, computed once per turn from that
constant-size stub, never by re-tokenizing the growing conversation.
"""

from __future__ import annotations

from typing import Any

from agentbridge.env import Message

_STUB: list[Message] = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "!"}]


class TemplateError(ValueError):
    """The chat template cannot be used by the driver (one clear line)."""


class Renderer:
    """Token-level view of a chat template for one tool set."""

    def __init__(self, tokenizer: Any, tools: list[dict[str, Any]] | None = None,
                 chat_template: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.tools = tools or None
        self.chat_template = chat_template or getattr(tokenizer, "chat_template", None)
        if not self.chat_template:
            raise TemplateError("the tokenizer has no chat template; set model.chat_template in the spec")
        eos = tokenizer.eos_token_id
        if eos is None:
            raise TemplateError("the tokenizer has no eos token; the driver needs it to end a turn")
        self.eos_token_id: int = int(eos)
        # The stub is rendered without the tools block when the template renders observations the same
        # either way (most do): that keeps each turn's cost small and constant.
        self._stub_tools: list[dict[str, Any]] | None = self.tools
        self._stub_ids, self._cut = self._stub()
        if self.tools:
            probe: list[Message] = [{"role": "tool", "name": "t", "content": "probe"}, {"role": "user", "content": "u"}]
            with_tools = self.continuation(probe)
            self._stub_tools = None
            self._stub_ids, self._cut = self._stub()
            if self.continuation(probe) != with_tools:
                self._stub_tools = self.tools
                self._stub_ids, self._cut = self._stub()

    def _stub(self) -> tuple[list[int], int]:
        ids = self.encode(self.render_text(_STUB, add_generation_prompt=False, tools=self._stub_tools))
        if self.eos_token_id not in ids:
            raise TemplateError("the chat template does not end assistant turns with the eos token "
                                f"{self.tokenizer.eos_token!r}")
        return ids, len(ids) - ids[::-1].index(self.eos_token_id)

    def render_text(self, messages: list[Message], *, add_generation_prompt: bool,
                    tools: list[dict[str, Any]] | None | bool = True) -> str:
        """The template's text; ``tools=True`` means this renderer's tools."""
        return self.tokenizer.apply_chat_template(
            messages, tools=self.tools if tools is True else tools, chat_template=self.chat_template, tokenize=False,
            add_generation_prompt=add_generation_prompt)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def render_prompt(self, messages: list[Message]) -> list[int]:
        """The prompt ids, ending with the assistant generation header."""
        return self.encode(self.render_text(messages, add_generation_prompt=True))

    def continuation(self, messages: list[Message]) -> list[int]:
        """Ids that follow an assistant turn's eos token: ``messages`` plus the next generation header."""
        full = self.encode(self.render_text([*_STUB, *messages], add_generation_prompt=True, tools=self._stub_tools))
        if full[: len(self._stub_ids)] != self._stub_ids:
            raise TemplateError("the chat template is not prefix-preserving: appending messages changed "
                                "earlier tokens; use a *_training template or another model.chat_template")
        return full[self._cut:]

    def check(self) -> list[str]:
        """Problems that make this template unusable for multi-turn tool use (empty when fine)."""
        problems: list[str] = []
        probe_call = {"id": "c0", "type": "function", "function": {"name": "probe_tool", "arguments": {"x": 1}}}
        convo: list[Message] = [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "", "tool_calls": [probe_call]},  # type: ignore[list-item]
            {"role": "tool", "name": "probe_tool", "content": "r"},
        ]
        try:
            head = self.render_text(convo[:2], add_generation_prompt=False)
            whole = self.render_text(convo, add_generation_prompt=True)
        except Exception as e:  # noqa: BLE001 - a template error is a user problem, reported as one line
            return [f"the chat template cannot render tool calls: {type(e).__name__}: {e}"]
        if "probe_tool" not in head:
            problems.append("the chat template does not render tool calls (no tool_calls in assistant turns)")
        if self.tools and not any(t["function"]["name"] in self.render_text(convo[:1], add_generation_prompt=True)
                                  for t in self.tools):
            problems.append("the chat template does not render the tools list in the prompt")
        if not whole.startswith(head.rstrip("\n")):
            problems.append("the chat template is not prefix-preserving (earlier turns change when a turn "
                            "is added); use a *_training template")
        return problems
