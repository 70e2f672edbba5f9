"""veRL's side of the conformance suite: the golden episodes through veRL's own rollout step, read from its batch.

Real: ``VerlBackend.compile`` (the job a launch runs), the job's composed trainer config, veRL's dataset, sampler and
collate function over the job's parquet, ``RayPPOTrainer.fit``'s generation step, ``AgentLoopManager`` and
``AgentLoopWorker`` (agentbridge's agent loop inside them), veRL's processor for the vision-language kind, and
``extract_reward``: see ``agentbridge_verl.inprocess``. Stand-ins: ``GoldenLLMServerClientStandIn`` for veRL's
``LLMServerClient`` (the vLLM servers need a GPU); it answers with
:func:`agentbridge.conformance.golden.golden_turn`; and the Ray actor handles of ``agentbridge_verl.inprocess``.

Every field is read back from the training batch, without veRL's padding: prompt ids (``prompts`` where
``attention_mask`` is 1), response ids, ``response_mask``, ``rollout_log_probs``, the reward (``token_level_scores``,
i.e. ``rm_scores``, summed; the run fails unless it sits on the last response token, which a summed reward cannot
show) and the case (the task the row's ``extra_info`` carries).

Images: veRL keeps no raw images in its batch, only what its processor made of them (``multi_modal_inputs``:
``pixel_values``, ``image_grid_thw``). The digests are therefore those of the images the agent loop handed veRL's
worker for the row (``AgentLoopOutput.multi_modal_data``), and each row is checked against the batch: its
``pixel_values`` and ``image_grid_thw`` must equal veRL's image processor's output on exactly those images, in order,
and its sequence must hold one image token per visual token of them; otherwise the run fails with a
``ConformanceError`` naming the row. Reconstructing images from ``pixel_values`` instead would depend on one processor
family's patch layout and resizing, and a resized image could never match the driver's digest; the check says the
same thing (the batch carries exactly those pixels) for any processor veRL binds.

The step is ``RayPPOTrainer``'s (``main_ppo`` with ``trainer.use_v1=false``); veRL 0.9.1's default V1 trainer hands
the same agent-loop outputs to TransferQueue through ``AgentLoopWorkerTQ`` instead, which this run does not cover.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

from agentbridge.conformance.records import EpisodeRecord, image_digest
from agentbridge.conformance.suite import ConformanceError

TASK_KEY = "agentbridge_task"
# agent-loop workers of the conformance job (the default is 8): each is built in this process, and a worker's
# tokenizer and processor take seconds to load; two still split the batch into chunks that veRL concatenates
AGENT_WORKERS = 2


class GoldenLLMServerClientStandIn:
    """Stand-in for veRL's ``LLMServerClient`` (the vLLM servers): same ``generate`` contract, golden turns.

    Returns veRL's ``TokenOutput`` as veRL's vLLM server does: log-probs only when the request asks for them
    (``rollout.calculate_log_probs``), ``stop_reason`` "completed" for a stopped and for a cut turn alike.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.requests: list[dict[str, Any]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       image_data: list[Any] | None = None, video_data: Any = None, audio_data: Any = None,
                       mm_processor_kwargs: Any = None, **kwargs: Any) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        from agentbridge.conformance.golden import golden_turn

        self.requests.append({"request_id": request_id, "prompt_tokens": len(prompt_ids),
                              "images": len(image_data or [])})
        ids, logprobs = golden_turn(self.tokenizer, list(prompt_ids), int(sampling_params["max_tokens"]))
        return TokenOutput(token_ids=ids, log_probs=logprobs if sampling_params.get("logprobs") else None,
                           stop_reason="completed")


class HandedImagesWorker(AgentLoopWorker):
    """veRL's ``AgentLoopWorker``, keeping the multimodal data of each output it batches (in batch order)."""

    def _postprocess(self, inputs: list[Any], *args: Any, **kwargs: Any) -> Any:
        self.handed = [i.multi_modal_data for i in inputs]
        return super()._postprocess(inputs, *args, **kwargs)


def case_of(extra_info: Any) -> str:
    """The golden case of a batch row: the id of the task its ``extra_info`` carries."""
    raw = (extra_info or {}).get(TASK_KEY)
    if raw is None:
        raise ConformanceError(f"a veRL batch row has no extra_info.{TASK_KEY}")
    return str(json.loads(raw)["id"])


def row_images(row: int, case: str, handed: dict[str, Any] | None, mm_inputs: dict[str, Any] | None,
               input_ids: list[int], processor: Any) -> list[str]:
    """Digests of the images handed to veRL for a row, after checking that the batch carries exactly their pixels."""
    import torch

    images = list((handed or {}).get("images") or [])
    mm_inputs = dict(mm_inputs or {})
    where = f"veRL batch row {row} (case {case})"
    if not images:
        if mm_inputs.get("pixel_values") is not None:
            raise ConformanceError(f"{where}: the batch carries pixel_values, but the agent loop handed veRL no "
                                   "images")
        return []
    if processor is None:
        raise ConformanceError(f"{where}: the agent loop handed veRL {len(images)} images, but veRL built no "
                               "processor for the model: no pixel_values reach the batch")
    want = processor.image_processor(images=images, return_tensors="pt")
    pixels, grid = mm_inputs.get("pixel_values"), mm_inputs.get("image_grid_thw")
    if pixels is None or grid is None:
        raise ConformanceError(f"{where}: the batch carries no pixel_values/image_grid_thw for the {len(images)} "
                               "images the agent loop handed veRL")
    if not (torch.equal(grid, want["image_grid_thw"]) and torch.equal(pixels, want["pixel_values"])):
        raise ConformanceError(f"{where}: the batch's pixel_values/image_grid_thw are not veRL's processor output "
                               f"on the {len(images)} images the agent loop handed veRL")
    merge = getattr(processor.image_processor, "merge_size", None)
    image_token = getattr(processor, "image_token_id", None)
    if merge and image_token is not None:
        tokens = int(grid.prod(-1).sum()) // (merge * merge)
        if input_ids.count(image_token) != tokens:
            raise ConformanceError(f"{where}: the sequence holds {input_ids.count(image_token)} image tokens, "
                                   f"the batch's images have {tokens} visual tokens")
    return [image_digest(im) for im in images]


def reward_position(row: int, case: str, scores: Any, n_response: int) -> None:
    """The episode's reward must sit on its last response token (where veRL's GAE and returns read an outcome)."""
    at = [int(k) for k in scores.nonzero().flatten().tolist()]
    if at and at != [n_response - 1]:
        raise ConformanceError(f"veRL batch row {row} (case {case}): the reward sits on response token(s) "
                               f"{', '.join(map(str, at))}, not on the last one ({n_response - 1})")


def golden_records(kind: str, workdir: Path) -> list[EpisodeRecord]:
    """Run the golden ``kind`` episodes through veRL's rollout step and read each one back from veRL's batch.

    The golden spec names backend trl; it is compiled with ``backend.name=verl``, since veRL applies
    ``backend.options`` and ``backend.overrides`` only when it is the spec's backend, and with ``AGENT_WORKERS``
    agent-loop workers.
    """
    from agentbridge.conformance.suite import golden_spec
    from agentbridge_verl.backend import VerlBackend
    from agentbridge_verl.inprocess import (
        compose_worker_config,
        first_train_batch,
        model_config,
        rollout_step,
        verl_processor_in_model_config,
    )

    spec = golden_spec(kind, ["backend.name=verl", f"backend.options={{agent_workers: {AGENT_WORKERS}}}"])
    job = VerlBackend().compile(spec, Path(workdir) / "verl")
    with verl_processor_in_model_config():
        cfg = compose_worker_config(job.path)
        model = model_config(cfg)
        tokenizer, processor = model.tokenizer, model.processor
        batch = first_train_batch(cfg, tokenizer, processor)
        train, workers = rollout_step(cfg, GoldenLLMServerClientStandIn(tokenizer), batch,
                                      worker_class=HandedImagesWorker)
    handed = [data for worker in workers for data in getattr(worker, "handed", [])]
    b, extra = train.batch, train.non_tensor_batch
    if len(handed) != len(train):
        raise ConformanceError(f"veRL's workers batched {len(handed)} episodes, the training batch has {len(train)} "
                               "rows")
    mm_inputs = extra.get("multi_modal_inputs")
    prompt_len = b["prompts"].shape[1]
    logprobs = "rollout_log_probs" in b.keys()  # absent when rollout.calculate_log_probs is off
    records = []
    for i in range(len(train)):
        attn = b["attention_mask"][i].bool()
        n = int(attn[prompt_len:].sum())
        case = case_of(extra["extra_info"][i])
        reward_position(i, case, b["token_level_scores"][i], n)
        records.append(EpisodeRecord(
            case=case,
            prompt_ids=b["prompts"][i][attn[:prompt_len]].tolist(),
            response_ids=b["responses"][i][attn[prompt_len:]].tolist(),
            response_mask=[int(x) for x in b["response_mask"][i][:n].tolist()],
            logprobs=[float(x) for x in b["rollout_log_probs"][i][:n].tolist()] if logprobs else [],
            reward=float(b["token_level_scores"][i].sum()),
            images=row_images(i, case, handed[i], mm_inputs[i] if mm_inputs is not None else None,
                              b["input_ids"][i][attn].tolist(), processor)))
    return records
