"""What the slime adapter speaks, with no slime imported: SGLang's ``/generate`` request and reply (through slime's
router), and the ``Sample`` fields one agentbridge episode becomes.

slime's default per-sample ``generate`` (``slime/rollout/sglang_rollout.py``) posts ``{"input_ids",
"sampling_params", "return_logprob": true}`` to ``http://{sglang_router_ip}:{sglang_router_port}/generate`` and reads
``meta_info.output_token_logprobs`` (``[[logprob, token_id, _], ...]``) and ``meta_info.finish_reason.type``; the
driver's policy does the same, one request per turn. A finished episode fills the ``Sample`` fields slime trains on
(``RolloutManager._convert_samples_to_train_data``): ``tokens`` (prompt + response), ``response_length``,
``loss_mask`` and ``rollout_log_probs`` (one per response token), ``reward`` and ``status``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agentbridge.adapter.rollout import Generation, SamplingParams, TrainingSequence, Trajectory

Post = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
# the driver's finish reason -> slime's Sample.Status value
STATUS = {"length": "truncated", "error": "failed"}


class EngineAborted(RuntimeError):
    """SGLang aborted the request (slime aborts the engines when a rollout has enough samples)."""


def request_payload(prompt_ids: list[int], sampling_params: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """The ``/generate`` request for one turn: slime's sampling params with the turn's budget."""
    return {"input_ids": [int(t) for t in prompt_ids],
            "sampling_params": {**sampling_params, "max_new_tokens": int(max_tokens)}, "return_logprob": True}


def generation_of(reply: dict[str, Any]) -> Generation:
    """The driver's ``Generation`` from SGLang's reply (token ids and log-probs from ``output_token_logprobs``)."""
    meta = reply.get("meta_info") or {}
    finish = (meta.get("finish_reason") or {}).get("type")
    if finish == "abort":
        raise EngineAborted("the SGLang engine aborted the request")
    pairs = meta.get("output_token_logprobs") or []
    return Generation(token_ids=[int(p[1]) for p in pairs], logprobs=[float(p[0]) for p in pairs],
                      finish_reason="length" if finish == "length" else "stop")


class RouterPolicy:
    """agentbridge's ``Policy`` over slime's SGLang router: one ``/generate`` per turn, token in, token out.

    ``sampling_params``: the ones slime hands the generate function (the job's temperature, top-p, top-k, stop
    settings); each request sets only the turn's ``max_new_tokens``. ``post``: slime's ``http_utils.post``.
    """

    def __init__(self, url: str, sampling_params: dict[str, Any], post: Post) -> None:
        self.url = url
        self.sampling_params = {k: v for k, v in sampling_params.items() if k != "max_new_tokens"}
        self.post = post
        self.calls = 0

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams,
                       images: list[Any] | None = None) -> Generation:
        reply = await self.post(self.url, request_payload(prompt_ids, self.sampling_params, sampling.max_tokens))
        self.calls += 1
        return generation_of(reply)


def status_of(traj: Trajectory) -> str:
    """slime's ``Sample.Status`` value for an episode: ``truncated`` when a budget cut it, ``failed`` when it ended in
    error (it still trains: on the fallback sample, loss mask 0), else ``completed``."""
    return STATUS.get(traj.finish_reason, "completed")


def sample_fields(traj: Trajectory, seq: TrainingSequence) -> dict[str, Any]:
    """The ``Sample`` fields slime trains on for one episode (``seq``: what every backend trains on for it)."""
    return {"tokens": [*seq.prompt_ids, *seq.response_ids], "response_length": len(seq.response_ids),
            "loss_mask": list(seq.response_mask), "rollout_log_probs": [float(x) for x in seq.logprobs],
            "reward": float(traj.reward), "status": status_of(traj)}


def spans(seq: TrainingSequence) -> list[tuple[int, int, bool]]:
    """The response as ``(start, end, trainable)`` runs of equal loss mask: how the episode is appended to a
    ``Sample`` with slime's ``append_response_tokens`` (trainable runs with their log-probs, the rest without)."""
    out: list[tuple[int, int, bool]] = []
    start = 0
    for i in range(1, len(seq.response_mask) + 1):
        if i == len(seq.response_mask) or seq.response_mask[i] != seq.response_mask[start]:
            out.append((start, i, bool(seq.response_mask[start])))
            start = i
    return out
