"""RLinf's side of the conformance suite: the golden episodes through RLinf's agent-loop path, read from RLinf.

What runs is RLinf's own code: its reasoning dataset (``create_rl_dataset``, ``collate_fn``) over the job's rows,
the request RLinf's runner builds from a batch (``RolloutRequest``, as ``ReasoningRunner._put_batch`` does), a local
Ray ``Cluster``, ``Channel``\\ s and worker groups, agentbridge's ``AgentLoopWorker`` subclass run by RLinf's
``run_agentloop_rollout``, RLinf's ``get_rollout_result`` packing each group, and ``RolloutResult.to_actor_batch``:
the padded batch RLinf's actor trains on, from which each episode is read back without its padding.

One stand-in: :class:`GoldenRolloutStandIn` for RLinf's SGLang rollout worker (SGLang needs a GPU). It serves the
same channel protocol as ``SGLangWorker.rollout_serverless`` (``{"channel_key", "prompt_ids", "sampling_params"}``
in; ``{"output_ids", "finish_reason", "logprobs"}`` out under the request's key, log-probs only with
``rollout.return_logprobs``), answering with :func:`agentbridge.conformance.golden.golden_turn` cut to the request's
``max_new_tokens`` (the job's ``algorithm.sampling_params`` otherwise) as SGLang cuts. One local Ray cluster and
one stand-in serve every kind run in a process; each kind gets its own agent-loop worker group built from its job.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlinf.scheduler import Worker

from agentbridge import adapter as kit
from agentbridge.adapter.conformance import ConformanceError, EpisodeRecord, episode_record, golden_job

STOP = "agentbridge_stop"
_RUNS = itertools.count()  # worker-group and channel names are cluster-wide: one set per run in a process


class GoldenRolloutStandIn(Worker):
    """Stand-in for RLinf's ``SGLangWorker`` on the agent loop's generate channels: golden turns, same protocol."""

    def __init__(self, model_path: str, return_logprobs: bool, max_new_tokens: int) -> None:
        super().__init__()
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.return_logprobs = return_logprobs
        self.max_new_tokens = max_new_tokens

    async def rollout_serverless(self, input_channel: Any, output_channel: Any) -> None:
        from agentbridge.adapter.conformance import golden_reply

        while True:
            request = await input_channel.get(async_op=True).async_wait()
            if request.get(STOP):  # the conformance run is over (killing a serving worker fails RLinf's driver)
                return
            params = request.get("sampling_params") or {}
            ids, logprobs, finish = golden_reply(self.tokenizer, request["prompt_ids"],
                                                 int(params.get("max_new_tokens", self.max_new_tokens)))
            reply: dict[str, Any] = {"output_ids": ids, "finish_reason": finish}
            if self.return_logprobs:
                reply["logprobs"] = logprobs
            await output_channel.put(reply, key=request["channel_key"], async_op=True).async_wait()


def golden_config(kind: str, workdir: Path, sets: tuple[str, ...] = ()) -> tuple[Any, Any]:
    """The golden spec with ``sets`` compiled into an RLinf job (for the ``lengths`` kind with RLinf's own lengths,
    ``data.max_prompt_length`` and ``runner.seq_length``), composed as its entry composes it and passed through
    ``validate_reasoning_cfg``; returns ``(cfg, spec)``."""
    from rlinf.config import validate_reasoning_cfg

    from agentbridge.adapter.models import resolve_model_path
    from agentbridge_rlinf.backend import RlinfBackend
    from agentbridge_rlinf.validate import compose_job

    spec, job = golden_job(RlinfBackend(), kind, workdir, "data.max_prompt_length: {max_prompt}, "
                           "runner.seq_length: {total}", sets)
    level = logging.getLogger().level
    cfg = validate_reasoning_cfg(compose_job(job, str(resolve_model_path(spec.model.path))))
    logging.getLogger().setLevel(level)
    return cfg, spec


def first_request(cfg: Any, tokenizer: Any) -> Any:
    """The rollout request RLinf's runner puts on the agent loop's channel for the job's first batch (all rows)."""
    from rlinf.data.datasets import collate_fn, create_rl_dataset
    from rlinf.data.io_struct import RolloutRequest

    train, _ = create_rl_dataset(cfg, tokenizer)
    batch = collate_fn([train[i] for i in range(len(train))])
    prompt_ids = [ids[-n:] for ids, n in zip(batch["prompt"].tolist(), batch["length"].tolist(), strict=True)]
    return RolloutRequest(n=int(cfg.algorithm.group_size), input_ids=prompt_ids, answers=batch["answer"],
                          image_data=batch["image_data"], multi_modal_inputs=batch["multi_modal_inputs"])


@dataclass
class _Engine:
    """The stand-in engine group serving one pair of generate channels; shared by every run in this process."""

    group: Any
    generate_input: Any
    generate_output: Any
    serving: Any

    def stop(self) -> None:
        self.generate_input.put({STOP: True})
        self.serving.wait()
        self.group._close()


_ENGINES: dict[tuple[str, bool, int], _Engine] = {}


def engine_for(cfg: Any) -> _Engine:
    """The stand-in engine for the job's model, serving on its channels: started once per process (with the local
    Ray ``Cluster``, which RLinf keeps as a singleton) and stopped at exit, so the kinds of one suite share it."""
    from rlinf.scheduler import Channel, Cluster, NodePlacementStrategy

    key = (str(cfg.rollout.model.model_path), bool(cfg.rollout.return_logprobs),
           int(cfg.algorithm.sampling_params.max_new_tokens))
    if key not in _ENGINES:
        n = len(_ENGINES)
        # a Ray of this process alone: RLinf's Cluster first joins any Ray it finds running on the machine ("auto")
        os.environ["RAY_ADDRESS"] = "local"
        cluster = Cluster(num_nodes=1)
        group = GoldenRolloutStandIn.create_group(*key).launch(
            cluster, name=f"GoldenRollout{n}", placement_strategy=NodePlacementStrategy([0]))
        gen_in, gen_out = Channel.create(f"GenerateInput{n}"), Channel.create(f"GenerateOutput{n}")
        engine = _Engine(group, gen_in, gen_out, group.rollout_serverless(gen_in, gen_out))
        if not _ENGINES:
            atexit.register(_stop_engines)  # before Ray's own exit handler (atexit runs the last registered first)
        _ENGINES[key] = engine
    return _ENGINES[key]


def _stop_engines() -> None:
    while _ENGINES:
        _ENGINES.popitem()[1].stop()


def rollout_results(cfg: Any, tokenizer: Any) -> list[Any]:
    """The golden episodes through RLinf's agent-loop worker on local Ray: one ``RolloutResult`` per task."""
    from rlinf.scheduler import Channel, Cluster, NodePlacementStrategy

    from agentbridge_rlinf.rollout import AgentBridgeAgentLoopWorker

    run = next(_RUNS)
    request = first_request(cfg, tokenizer)
    engine = engine_for(cfg)
    loop = AgentBridgeAgentLoopWorker.create_group(cfg, None).launch(
        Cluster(num_nodes=1), name=f"{cfg.agentloop.group_name}{run}", placement_strategy=NodePlacementStrategy([0]))
    requests, rollouts = Channel.create(f"Requests{run}"), Channel.create(f"Rollouts{run}")
    try:
        loop.init_worker(engine.generate_input, engine.generate_output, {}, {}, Channel.create(f"ToolOutput{run}")
                         ).wait()
        requests.put(request)
        loop.run_agentloop_rollout(input_channel=requests, output_channel=rollouts).wait()
        return [rollouts.get() for _ in request.input_ids]
    finally:
        loop._close()


def records_of(results: list[Any], cfg: Any, pad_token: int) -> list[EpisodeRecord]:
    """Each episode read back from RLinf's actor batch (``RolloutResult.to_actor_batch``), padding dropped."""
    prompt_len, total = int(cfg.data.max_prompt_length), int(cfg.runner.seq_length)
    records = []
    for result in results:
        batch = result.to_actor_batch(prompt_len, total, pad_token)
        if "rewards" not in batch:
            raise ConformanceError("RLinf's actor batch carries no rewards")
        logprobs = batch.get("rollout_logprobs")
        for i in range(result.num_sequence):
            case = kit.decode_task(result.answers[i], "rlinf").id
            p, n = int(batch["prompt_lengths"][i]), int(batch["response_lengths"][i])
            attn = batch["attention_mask"][i].bool()
            if int(attn[:prompt_len].sum()) != p or int(attn[prompt_len:].sum()) != n:
                raise ConformanceError(f"RLinf batch row {i} (case {case}): its attention mask does not cover "
                                       "exactly the prompt and the response")
            ids = batch["input_ids"][i]
            records.append(episode_record(
                case, ids[prompt_len - p:prompt_len], ids[prompt_len:prompt_len + n],
                batch["response_mask"][i][prompt_len:prompt_len + n],
                logprobs[i][:n] if logprobs is not None else None, batch["rewards"][i]))
    return records


def golden_records(kind: str, workdir: Path) -> list[EpisodeRecord]:
    """Run the golden ``kind`` episodes through RLinf's agent-loop path and read each back from its actor batch.

    RLinf trains on one reward per sequence (``rewards``, broadcast over the response by its advantage): the
    records hold no per-token rewards (``token_rewards`` None), as for a backend without turn credit."""
    from transformers import AutoTokenizer

    cfg, _ = golden_config(kind, workdir)
    tokenizer = AutoTokenizer.from_pretrained(str(cfg.rollout.model.model_path))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return records_of(rollout_results(cfg, tokenizer), cfg, int(pad))
