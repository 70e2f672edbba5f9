"""ROLL's side of the conformance suite: the golden episodes through ROLL's env-manager path, read from ROLL.

What runs is ROLL's own code: the job's config composed and built into ROLL's ``AgenticConfig`` (``dacite``, its
``__post_init__`` making the env slots), ROLL's ``GroupQueueManager`` Ray actor (episode ids per group, groups
completed and batched by ``get_batch``), agentbridge's env manager built with the keyword arguments ROLL's
``EnvironmentWorker`` passes and run in threads as it runs them (``run_rollout_loop``), ROLL's ``create_llm_proxy``
and ``PolicyProxy`` (request ``DataProto``, ``postprocess_generate``), and ``DataProto.concat`` of the batch as ROLL's
``RolloutScheduler.get_batch`` does: the batch ROLL's pipeline trains on, from which each episode is read back without
its padding.

One stand-in: :class:`GoldenRouterClient`, ROLL's ``RouterClient`` with the engine behind its router (vLLM or
SGLang, which need a GPU) replaced. ROLL's own ``PolicyProxy`` calls it (``generate_request_sync``) and
post-processes its reply; it answers with :func:`agentbridge.conformance.golden.golden_turn` cut to the request's
``max_new_tokens`` as an engine cuts, in the reply format of ROLL's vLLM strategy (``output_token_ids``,
``finish_reasons``, ``output_logprobs``), passed through ROLL's own ``RouterClient._postprocess_generate``. The
proxy holding it is registered with ROLL's ``register_llm_proxy`` as :data:`GOLDEN_PROXY`, the job's
``llm_proxy.proxy_type`` under the conformance run.
"""

from __future__ import annotations

import copy
import logging
import threading
from pathlib import Path
from typing import Any

from roll.distributed.scheduler.protocol import DataProto
from roll.distributed.scheduler.router import RouterClient
from roll.pipeline.agentic.llm_proxy import BaseLLMProxy, register_llm_proxy
from roll.pipeline.agentic.llm_proxy.policy_proxy import PolicyProxy
from roll.utils.functionals import gather_unpadded_input_ids

from agentbridge.adapter.conformance import ConformanceError, EpisodeRecord, golden_job

GOLDEN_PROXY = "agentbridge_golden"


class GoldenRouterClient(RouterClient):
    """ROLL's ``RouterClient`` with golden turns in place of the engine behind its router: the request is read as
    ``_preprocess_generate`` reads it (unpadded ``input_ids``, ``max_new_tokens`` from the generation config, capped
    by the request's own) and the reply goes through ROLL's own ``_postprocess_generate``."""

    def __init__(self, tokenizer: Any) -> None:
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        super().__init__(proxy=None, meta={"strategy_name": "golden", "eos_token_id": tokenizer.eos_token_id,
                                           "pad_token_id": pad})
        self.tokenizer = tokenizer

    def generate_request_sync(self, req: DataProto, request_id: Any, uid: Any) -> DataProto:
        from agentbridge.adapter.conformance import golden_reply

        config = req.meta_info["generation_config"]
        budget = min(int(req.meta_info.get("max_new_tokens", config["max_new_tokens"])), int(config["max_new_tokens"]))
        prompt = gather_unpadded_input_ids(input_ids=req.batch["input_ids"], attention_mask=req.batch["attention_mask"])
        ids, logprobs, finish = golden_reply(self.tokenizer, prompt[0], budget)
        response = {"output_token_ids": [ids], "output_logprobs": [logprobs], "finish_reasons": [finish]}
        out: DataProto = self._postprocess_generate(req, response)
        return out


@register_llm_proxy(GOLDEN_PROXY)
class GoldenEngineProxy(PolicyProxy):
    """ROLL's ``PolicyProxy`` with :class:`GoldenRouterClient` in place of its router client."""

    def __init__(self, generate_scheduler: Any, llm_proxy_config: Any, tokenizer: Any, env: Any) -> None:
        BaseLLMProxy.__init__(self, generate_scheduler, llm_proxy_config, tokenizer, env)
        self.router_client = GoldenRouterClient(tokenizer)


def golden_config(kind: str, workdir: Path) -> tuple[Any, Any]:
    """The golden spec compiled into a ROLL job (for the ``lengths`` kind with ROLL's one length,
    ``sequence_length``, at prompt plus response), composed as its entry composes it with the stand-in proxy, and
    built into ROLL's ``AgenticConfig``; returns ``(config, spec)``."""
    from agentbridge.adapter.models import resolve_model_path
    from agentbridge_roll.backend import RollBackend
    from agentbridge_roll.validate import build_config, compose_job

    spec, job = golden_job(RollBackend(), kind, workdir, "sequence_length: {total}")
    cfg = compose_job(job, str(resolve_model_path(spec.model.path)),
                      extra=[f"train_env_manager.llm_proxy.proxy_type={GOLDEN_PROXY}"])
    return build_config(cfg), spec


def _ray() -> None:
    """A Ray of this process alone (never one running elsewhere on the machine)."""
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.ERROR)


def rollout_batch(config: Any) -> DataProto:
    """The golden episodes through ROLL's queue: one env manager per env slot of the job, in threads; returns the
    step's batch as ROLL's ``RolloutScheduler`` concatenates it."""
    import ray
    from roll.distributed.scheduler.rollout_scheduler import GroupQueueManager
    from roll.models.model_providers import default_tokenizer_provider

    from agentbridge_roll.rollout import AgentBridgeEnvManager

    _ray()
    workers = config.train_env_manager
    tokenizer = default_tokenizer_provider(model_args=workers.model_args)
    queue = GroupQueueManager.remote(config=config, env_manager_config=workers, mode="train")
    ray.get(queue.advance_step.remote(0))
    lock = threading.Lock()
    managers = [AgentBridgeEnvManager(worker_config=workers, pipeline_config=config, env_config=env_config,
                                      tokenizer=copy.deepcopy(tokenizer), processor=None, generate_scheduler=None,
                                      output_queue=queue, thread_lock=lock, mode="train", extra_data_provider=None)
                for slots in workers.env_configs.values() for env_config in slots.values()]
    errors: list[BaseException] = []

    def run(manager: AgentBridgeEnvManager) -> None:
        try:
            manager.run_rollout_loop(DataProto(meta_info={"seed": 0}))
        except BaseException as e:  # noqa: BLE001 - reported by the caller, one line
            errors.append(e)

    threads = []
    for manager in managers:
        manager.update_step(0)
        threads.append(threading.Thread(target=run, args=(manager,), daemon=True))
        threads[-1].start()
    try:
        batch = ray.get(queue.get_batch.remote(batch_size=config.rollout_batch_size, current_step=0), timeout=600)
    finally:
        for manager in managers:
            manager.stop()
        ray.get(queue.shutdown.remote())
        for thread in threads:
            thread.join(timeout=60)
        ray.kill(queue)
    if errors:
        raise ConformanceError(f"ROLL env manager failed: {type(errors[0]).__name__}: {errors[0]}")
    if not batch:
        raise ConformanceError("ROLL's queue returned no trajectories")
    return DataProto.concat(batch)


def records_of(batch: DataProto) -> list[EpisodeRecord]:
    """Each trajectory read back from ROLL's batch without its padding (:func:`agentbridge_roll.layout.record`)."""
    from agentbridge_roll.layout import FIELDS, LayoutError, record
    from agentbridge_roll.rollout import TASK_KEY

    missing = [key for key in FIELDS if key not in batch.batch.keys()]
    if missing:
        raise ConformanceError(f"ROLL's batch carries no {', '.join(missing)}")
    records = []
    for i in range(len(batch)):
        case = str(batch.non_tensor_batch[TASK_KEY][i])
        try:
            records.append(record({key: batch.batch[key][i].tolist() for key in FIELDS}, case))
        except LayoutError as e:
            raise ConformanceError(f"ROLL batch row {i}: {e}") from None
    return records


def golden_records(kind: str, workdir: Path) -> list[EpisodeRecord]:
    """Run the golden ``kind`` episodes through ROLL's env-manager path and read each back from its batch."""
    config, _ = golden_config(kind, workdir)
    return records_of(rollout_batch(config))
