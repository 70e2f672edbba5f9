"""Message-level environment types: Task, Message, StepResult, Environment (DESIGN §5)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
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
    """One problem instance. ``data`` holds whatever the environment and rewards need (answers, ids)."""

    id: str
    prompt: str
    data: dict[str, Any] = field(default_factory=dict)
    images: list[Any] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (images are not serialized)."""
        d = asdict(self)
        d.pop("images")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Task:
        return cls(id=str(d["id"]), prompt=str(d["prompt"]), data=dict(d.get("data") or {}))


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
