"""Render conversations to token ids with a Hugging Face chat template, turn by turn.

The prompt is rendered once. Each later observation is appended as the template's *continuation* tokens:
the rendering of the new messages after a fixed short conversation, computed once per turn from that
constant-size stub, never by re-tokenizing the growing conversation.

Images: a vision-language template renders each image block as one placeholder (``<|image_pad|>`` for Qwen-VL).
The model consumes that placeholder repeated once per visual token, a number the image processor decides from
the image's size. The renderer expands each placeholder, in image order, so the ids it returns are exactly the
ids the model's forward pass sees. Text-only messages skip all of this.
"""

from __future__ import annotations

from typing import Any

from agentbridge.env import Message, images_of

IMAGE_PLACEHOLDERS = ("<|image_pad|>", "<|image|>")  # Qwen-VL, then Llama-3.2-Vision style
_STUB: list[Message] = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "!"}]


class TemplateError(ValueError):
    """The chat template cannot be used by the driver (one clear line)."""


class Renderer:
    """Token-level view of a chat template for one tool set."""

    def __init__(self, tokenizer: Any, tools: list[dict[str, Any]] | None = None,
                 chat_template: str | None = None, image_processor: Any = None) -> None:
        self.tokenizer = tokenizer
        self._image_processor = image_processor
        self.image_token_id: int | None = image_token_id_of(tokenizer)
        self.tools = tools or None
        template: str | None = chat_template or getattr(tokenizer, "chat_template", None)
        if not template:
            raise TemplateError("the tokenizer has no chat template; set model.chat_template in the spec")
        self.chat_template: str = template
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
        """The prompt ids, ending with the assistant generation header (image placeholders expanded)."""
        ids = self.encode(self.render_text(messages, add_generation_prompt=True))
        return self.expand_images(ids, [im for m in messages for im in images_of(m)])

    def continuation(self, messages: list[Message]) -> list[int]:
        """Ids that follow an assistant turn's eos token: ``messages`` plus the next generation header."""
        full = self.encode(self.render_text([*_STUB, *messages], add_generation_prompt=True, tools=self._stub_tools))
        if full[: len(self._stub_ids)] != self._stub_ids:
            raise TemplateError("the chat template is not prefix-preserving: appending messages changed "
                                "earlier tokens; use a *_training template or another model.chat_template")
        return self.expand_images(full[self._cut:], [im for m in messages for im in images_of(m)])

    @property
    def image_processor(self) -> Any:
        """The image processor that sizes each image's placeholder run (loaded from the tokenizer's model
        directory on first use when none was given)."""
        if self._image_processor is None:
            source = getattr(self.tokenizer, "name_or_path", "") or ""
            try:
                from agentbridge.models import load_image_processor

                self._image_processor = load_image_processor(source) if source else None
            except Exception:  # noqa: BLE001 - reported below as the missing processor it means
                self._image_processor = None
            if self._image_processor is None:
                raise TemplateError("the conversation has images but no image processor was found next to the "
                                    f"tokenizer ({source or 'unknown path'}); use a vision-language model")
        return self._image_processor

    def image_tokens(self, image: Any) -> int:
        """How many placeholder tokens the model consumes for ``image`` (its visual tokens)."""
        proc = self.image_processor
        merge = int(getattr(proc, "merge_size", 1) or 1) ** 2
        count = getattr(proc, "get_number_of_image_patches", None)
        if count is not None:
            width, height = image.size
            return int(count(height, width, {})) // merge
        grid = proc(images=[image], return_tensors="pt")["image_grid_thw"]
        return int(grid.prod()) // merge

    def expand_images(self, ids: list[int], images: list[Any]) -> list[int]:
        """Repeat the i-th image placeholder in ``ids`` once per visual token of ``images[i]``."""
        if not images:
            return ids
        pad = self.image_token_id
        found = ids.count(pad) if pad is not None else 0
        if found != len(images):
            raise TemplateError(f"the chat template rendered {found} image placeholders for {len(images)} images; "
                                "use a vision-language chat template (e.g. model.chat_template: qwen2_5_vl)")
        out: list[int] = []
        queue = iter(images)
        for token in ids:
            out += [token] * self.image_tokens(next(queue)) if token == pad else [token]
        return out

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


def image_token_id_of(tokenizer: Any) -> int | None:
    """The id of the template's image placeholder token, or None for a text-only tokenizer."""
    added = tokenizer.get_added_vocab() if hasattr(tokenizer, "get_added_vocab") else {}
    return next((int(added[t]) for t in IMAGE_PLACEHOLDERS if t in added), None)
