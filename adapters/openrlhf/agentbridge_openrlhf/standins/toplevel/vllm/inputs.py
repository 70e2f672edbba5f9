"""Stand-in for ``vllm.inputs`` (see the package docstring)."""

from typing import Any


def TokensPrompt(**kwargs: Any) -> dict[str, Any]:  # noqa: N802 - vLLM's name (a TypedDict there)
    return dict(**kwargs)
