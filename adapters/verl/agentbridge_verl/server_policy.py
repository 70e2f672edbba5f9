"""agentbridge's ``Policy`` over veRL's LLM server client (``server_manager.generate``): token in, token out."""

from __future__ import annotations

import uuid
from typing import Any

from agentbridge.adapter.rollout import Generation, SamplingParams


class ServerPolicy:
    """One episode's generator. Every call uses the same request id, so veRL keeps it on one server (prefix cache).

    ``sampling_params`` are veRL's (rollout or validation settings); the driver only adds each turn's budget.
    """

    def __init__(self, server_manager: Any, sampling_params: dict[str, Any], request_id: str | None = None) -> None:
        self.server_manager = server_manager
        self.sampling_params = dict(sampling_params)
        self.request_id = request_id or uuid.uuid4().hex
        self.calls = 0
        self.num_preempted = 0

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams,
                       images: list[Any] | None = None) -> Generation:
        params = {**self.sampling_params, "max_tokens": sampling.max_tokens}  # the server pops max_tokens
        out = await self.server_manager.generate(self.request_id, prompt_ids=list(prompt_ids), sampling_params=params,
                                                 image_data=list(images) if images else None)
        self.calls += 1
        self.num_preempted += max(0, out.num_preempted or 0)
        ids = list(out.token_ids)
        finish = "length" if len(ids) >= sampling.max_tokens and out.stop_reason != "completed" else "stop"
        return Generation(token_ids=ids, logprobs=list(out.log_probs) if out.log_probs else None,
                          finish_reason=finish)
