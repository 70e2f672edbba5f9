"""veRL's side of the conformance suite: the golden episodes through both of veRL's trainer paths, read from veRL.

``main_ppo`` runs one of two trainers, chosen by ``trainer.use_v1``; the compiled job keeps veRL 0.9.1's default,
the V1 trainer. Both run here, and the records of the one the job launches are what the suite compares with the
driver; the other's must equal them (see ``golden_records``), except in the ``credit`` kind, whose per-turn rewards
only the V1 trainer takes (the compile refuses ``algorithm.credit: turn`` with ``trainer.use_v1=false``).

* V1 (``agentbridge_verl.inprocess_v1``): the V1 trainer's ``prepare_step`` and replay-buffer sample,
  ``AgentLoopManagerTQ`` and ``AgentLoopWorkerTQ`` storing each episode unpadded in a real TransferQueue (local
  Ray); fields are read back with ``tq.kv_batch_get``: ``prompts``, ``responses``, ``response_mask``,
  ``rollout_log_probs``, ``rm_scores`` (per token, and summed) and ``input_ids``, which must be the prompt then
  the response.
* legacy (``agentbridge_verl.inprocess``): ``RayPPOTrainer.fit``'s generation step, ``AgentLoopManager`` and
  ``AgentLoopWorker``, ``extract_reward``; fields are read from the padded training batch without its padding
  (``prompts`` where ``attention_mask`` is 1, ...; the reward is ``token_level_scores``, per token and summed).

Both: veRL's dataset, sampler and collate function over the job's parquet, the job's composed trainer config,
agentbridge's agent loop, veRL's processor for the vision-language kind. Stand-ins: ``GoldenLLMServerClientStandIn``
for veRL's ``LLMServerClient`` (the vLLM servers need a GPU), answering with
:func:`agentbridge.conformance.golden.golden_turn`, and the Ray actors of veRL's own named in the two modules. The case
is the task each row's ``extra_info`` carries.

Images: veRL keeps no raw images, only what its processor made of them (``multi_modal_inputs``). The digests are
those of the images the agent loop handed veRL's worker for the row (``AgentLoopOutput.multi_modal_data``), once
the row is checked to carry exactly veRL's processor output on them
(:func:`~agentbridge.conformance.images.handed_image_digests`); else the run fails, naming the row.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

from agentbridge import adapter as kit
from agentbridge.adapter.conformance import (
    CREDIT,
    ConformanceError,
    EpisodeRecord,
    episode_record,
    golden_job,
    handed_image_digests,
)

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

        from agentbridge.adapter.conformance import golden_turn

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
    try:
        return kit.decode_task((extra_info or {}).get(kit.TASK_KEY), "verl").id
    except ValueError as e:
        raise ConformanceError(str(e)) from None


def legacy_records(cfg: Any, tokenizer: Any, processor: Any) -> list[EpisodeRecord]:
    """The golden episodes through ``RayPPOTrainer``'s step (``trainer.use_v1=false``), read from its padded
    training batch (``agentbridge_verl.inprocess``)."""
    from agentbridge_verl.inprocess import first_train_batch, rollout_step

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
        images = handed_image_digests(f"veRL batch row {i} (case {case})", (handed[i] or {}).get("images"),
                                      mm_inputs[i] if mm_inputs is not None else None, b["input_ids"][i][attn],
                                      processor, "veRL")
        records.append(episode_record(
            case, b["prompts"][i][attn[:prompt_len]], b["responses"][i][attn[prompt_len:]], b["response_mask"][i][:n],
            b["rollout_log_probs"][i][:n] if logprobs else [], b["token_level_scores"][i].sum(),
            token_rewards=b["token_level_scores"][i][:n], images=images))
    return records


def v1_records(cfg: Any, tokenizer: Any, processor: Any) -> list[EpisodeRecord]:
    """The golden episodes through the V1 trainer's step (``trainer.use_v1=true``), read back from TransferQueue
    as its sample holds them (``agentbridge_verl.inprocess_v1``): unpadded, one trajectory per key.

    ``input_ids`` (what the actor trains on) must be the prompt followed by the response."""
    from agentbridge_verl.inprocess import ActorStandIn, RewardLoopWorkerStandIn
    from agentbridge_verl.inprocess_v1 import V1RolloutError, v1_rollout_step

    try:
        batch, data, workers, _ = v1_rollout_step(cfg, GoldenLLMServerClientStandIn(tokenizer),
                                               [ActorStandIn(RewardLoopWorkerStandIn())])
    except V1RolloutError as e:
        raise ConformanceError(f"veRL's V1 trainer: {e}") from e
    handed = {key: mm for worker in workers for key, mm in worker.handed.items()}
    if "rm_scores" not in data.keys():
        raise ConformanceError("veRL's V1 trainer: its trajectories carry no rm_scores")
    prompts, responses = data["prompts"].unbind(), data["responses"].unbind()
    masks, scores, input_ids = data["response_mask"].unbind(), data["rm_scores"].unbind(), data["input_ids"].unbind()
    logprobs = data["rollout_log_probs"].unbind() if "rollout_log_probs" in data.keys() else None
    extra_info, mm_inputs = list(data["extra_info"]), list(data["multi_modal_inputs"])
    records = []
    for i, key in enumerate(batch.keys):
        case = case_of(extra_info[i])
        where = f"veRL V1 trajectory {i} (case {case})"
        prompt, response = prompts[i].tolist(), responses[i].tolist()
        if input_ids[i].tolist() != prompt + response:
            raise ConformanceError(f"{where}: input_ids are not the prompt followed by the response")
        if key not in handed:
            raise ConformanceError(f"{where}: no agent-loop output was handed to veRL under key {key}")
        images = handed_image_digests(where, (handed[key] or {}).get("images"), mm_inputs[i], input_ids[i],
                                      processor, "veRL")
        records.append(episode_record(case, prompt, response, masks[i],
                                      logprobs[i] if logprobs is not None else [], scores[i].sum(),
                                      token_rewards=scores[i], images=images))
    return records


def _same(a: list[EpisodeRecord], b: list[EpisodeRecord]) -> bool:
    return sorted(json.dumps(r.to_dict()) for r in a) == sorted(json.dumps(r.to_dict()) for r in b)


def golden_records(kind: str, workdir: Path) -> list[EpisodeRecord]:
    """Run the golden ``kind`` episodes through both of veRL's trainer paths and read each back from veRL.

    Returns the records of the path the job launches (``trainer.use_v1``: the V1 trainer unless
    ``backend.overrides`` turns it off). The other path must agree: where its records differ, they are compared
    with the driver's, and any difference fails the run with a ``ConformanceError`` naming that path.

    The job (:func:`~agentbridge.conformance.kit.golden_job`) has ``AGENT_WORKERS`` agent-loop workers and, for
    the ``lengths`` kind, veRL's ``data.max_prompt_length`` / ``data.max_response_length`` at ``BACKEND_LENGTHS``.
    """
    from agentbridge.adapter.conformance import compare, reference_records
    from agentbridge_verl.backend import VerlBackend
    from agentbridge_verl.inprocess import compose_worker_config, model_config, verl_processor_in_model_config

    # veRL's own lengths: the rollout's prompt_length and response_length follow them
    spec, job = golden_job(VerlBackend(), kind, workdir, "data.max_prompt_length: {max_prompt}, "
                           "data.max_response_length: {max_response}",
                           [f"backend.options={{agent_workers: {AGENT_WORKERS}}}"])
    with verl_processor_in_model_config():
        cfg = compose_worker_config(job)
        model = model_config(cfg)
        tokenizer, processor = model.tokenizer, model.processor
        v1 = v1_records(cfg, tokenizer, processor)
        if kind == CREDIT:  # turn credit runs on the V1 trainer only (the compile refuses the legacy one)
            return v1
        legacy = legacy_records(cfg, tokenizer, processor)
    paths = {True: ("V1 trainer (trainer.use_v1=true)", v1), False: ("legacy trainer (trainer.use_v1=false)", legacy)}
    launched = bool(cfg.trainer.use_v1)
    other_name, other = paths[not launched]
    if not _same(v1, legacy):
        problems = compare(reference_records(kind), other, f"veRL's {other_name}", samples=spec.algorithm.group_size)
        if problems:
            raise ConformanceError(f"the job runs veRL's {paths[launched][0]}, but its other path differs from the "
                                   f"driver: {'; '.join(problems)}")
    return paths[launched][1]
