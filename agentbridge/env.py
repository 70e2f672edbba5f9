"""Message-level environment types: Task, Message, StepResult, Environment."""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypedDict, runtime_checkable


class ToolCall(TypedDict):
    """One parsed tool call, in the OpenAI/Hugging Face shape chat templates render."""

    id: str
    type: str  # always "function"
    function: dict[str, Any]  # {"name": str, "arguments": dict}


class Message(TypedDict, total=False):
    """A chat message. ``content`` is text, or a list of blocks (``{"type": "text"|"image", ...}``)."""

    role: str  # system | user | assistant | tool
    content: Any
    tool_calls: list[ToolCall]
    tool_call_id: str
    name: str


@dataclass
class Task:
    """One problem instance. ``data`` holds whatever the environment and rewards need (answers, ids).

    An optional ``data["group"]`` names the task's kind (e.g. ``"2-step"``): evaluations report success per group,
    and a warm start can require a floor in every group.
    """

    id: str
    prompt: str
    data: dict[str, Any] = field(default_factory=dict)
    images: list[Any] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form. Images travel as PNG data URIs in ``data["images"]`` (unless that is already set)."""
        d = asdict(self)
        d.pop("images")
        if self.images and not d["data"].get("images"):
            d["data"]["images"] = [image_to_data_uri(im) for im in self.images]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Task:
        return cls(id=str(d["id"]), prompt=str(d["prompt"]), data=dict(d.get("data") or {}))


def image_to_data_uri(image: Any) -> str:
    """A PIL image as a ``data:image/png;base64,...`` string."""
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def load_image(ref: Any) -> Any:
    """An image from a reference: a PIL image, a data URI, raw base64 PNG/JPEG, or a local file path."""
    from PIL import Image

    if hasattr(ref, "convert"):
        return ref
    text = str(ref)
    if text.startswith("data:"):
        text = text.split(",", 1)[1]
    elif Path(text).is_file():
        with Image.open(text) as im:
            return im.convert("RGB")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"task image {str(ref)[:40]!r}: not a data URI, base64 image or existing file") from None
    with Image.open(io.BytesIO(raw)) as im:
        return im.convert("RGB")


def task_images(task: Task) -> list[Any]:
    """The task's first images: ``task.images``, else those referenced by ``task.data["images"]``."""
    if task.images:
        return task.images
    refs = task.data.get("images") or []
    return [load_image(r) for r in (refs if isinstance(refs, list) else [refs])]


@dataclass
class StepResult:
    """What an environment returns for one assistant action."""

    observation: list[Message]
    reward: float = 0.0
    done: bool = False
    metrics: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class Environment(Protocol):
    """An episode's world. ``reset`` gives the initial messages; ``step`` answers one assistant action."""

    async def reset(self, task: Task) -> list[Message]: ...

    async def step(self, action: Message) -> StepResult: ...

    async def close(self) -> None: ...


def user(content: Any) -> Message:
    return {"role": "user", "content": content}


def system(content: str) -> Message:
    return {"role": "system", "content": content}


def text_of(message: Message) -> str:
    """The text of a message, joining text blocks when the content is a list."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def images_of(message: Message) -> list[Any]:
    """The images carried by a message's content blocks, in order."""
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b["image"] for b in content if isinstance(b, dict) and b.get("type") == "image" and "image" in b]
