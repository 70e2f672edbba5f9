"""Stand-in for ``vllm.utils`` (CPU tests only)."""

import uuid


def random_uuid() -> str:
    return uuid.uuid4().hex
