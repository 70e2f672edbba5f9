"""The ``reverse_text`` tool. ``@tool`` builds its JSON schema from the type hints and docstring."""

from __future__ import annotations

from agentbridge import tool


@tool
def reverse_text(text: str) -> str:
    """Reverse a piece of text, character by character.

    Args:
        text: The text to reverse, e.g. "stressed".
    """
    return text[::-1]
