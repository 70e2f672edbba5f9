"""One training step's rollout through veRL 0.9.1's V1 trainer (``trainer.use_v1=true``, the default), on CPU.

What runs is veRL's and TransferQueue's: the job's composed trainer config, ``tq.init`` with the job's
``transfer_queue`` settings (a real controller and storage unit, as Ray actors of a local Ray), the V1 trainer
(``PPOTrainerSync``: its tokenizer, dataloader and ``ReplayBuffer``; its ``prepare_step``, which draws the step's
prompts, registers them in TransferQueue and hands them to the agent-loop manager; its ``replay_buffer.sample``),
``AgentLoopManagerTQ`` (chunking per worker) and ``AgentLoopWorkerTQ`` (``rollout.n`` sessions per prompt, the agent
loop, ``_compute_score``, multimodal inputs, position ids, the unpadded ``tq.async_kv_batch_put``). The rows are then
read back with ``tq.kv_batch_get``, as the trainer's later stages read them.

Stand-ins replace only what needs a GPU or a Ray actor of veRL's own, each named as one:

* ``RolloutActorLoop``: the event loop of an async Ray actor; the agent-loop workers are built and run on it (a
  thread of this process), and ``ThreadedActorStandIn`` turns ``handle.method.remote(...)`` into a call on it.
* the trainer's ``init()`` is not run (it places FSDP workers and vLLM servers on GPUs); of what it sets up only
  the tokenizer and dataloader are needed before sampling, and those are veRL's (``_init_tokenizer``,
  ``_init_dataloader``).
* the reward-loop worker handles and the LLM client are the caller's (``agentbridge_verl.inprocess``).
* the replay buffer polls every 0.05 s instead of 2 s, and fails instead of waiting forever or refilling when an
  episode fails (``guard_sampling``).

Ray and TransferQueue start once per process (Ray alone takes ~20 s on two cores) and stay up until exit; each
step starts from an empty TransferQueue. Left out: ``_balance_batch`` (a reordering that pads the batch to the
data-parallel size) and the log-prob, advantage and update stages that follow the sample.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
import time
from typing import Any, NamedTuple

import ray
import transfer_queue as tq
from omegaconf import OmegaConf
from verl.trainer.ppo.v1 import AgentLoopManagerTQ, AgentLoopWorkerTQ, PPOTrainerSync

# the class behind veRL's @ray.remote AgentLoopWorkerTQ
WorkerTQ: type = AgentLoopWorkerTQ.__ray_actor_class__
# what the conformance run reads of each trajectory
FIELDS = ["uid", "prompts", "responses", "response_mask", "rollout_log_probs", "rm_scores", "input_ids",
          "multi_modal_inputs", "extra_info"]


class RolloutActorLoop:
    """Stand-in for an async Ray actor's event loop: a thread running one asyncio loop until ``close``."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="agent-loop-workers", daemon=True)
        self.thread.start()

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on the loop (awaited when it is a coroutine function); its result."""

        async def go() -> Any:
            out = fn(*args, **kwargs)
            return await out if asyncio.iscoroutine(out) else out

        return asyncio.run_coroutine_threadsafe(go(), self.loop).result()

    def close(self) -> None:
        """Cancel what still runs on the loop, then stop it."""

        async def cancel() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class ThreadedActorStandIn:
    """Stand-in for a Ray actor handle: ``handle.method.remote(*args)`` runs the method on the actor loop and
    returns a Ray object reference to its result (what ``ray.get`` in veRL's manager waits on)."""

    def __init__(self, obj: Any, actor_loop: RolloutActorLoop) -> None:
        self.obj, self.actor_loop = obj, actor_loop

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.obj, name)

        class Remote:
            @staticmethod
            def remote(*args: Any, **kwargs: Any) -> Any:
                return ray.put(self.actor_loop.call(method, *args, **kwargs))

        return Remote


class V1RolloutError(RuntimeError):
    """An episode failed in veRL's V1 agent-loop worker, or the step's trajectories never all arrived."""


class ObservedWorkerTQ(WorkerTQ):
    """veRL's ``AgentLoopWorkerTQ``, keeping what it was handed: each trajectory's multimodal data by its
    TransferQueue key (``{uid}_{session}_{index}``; veRL stores no raw images) and the agent loops' errors (veRL
    only logs them)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handed: dict[str, Any] = {}
        self.errors: list[BaseException] = []

    async def _run_agent_loop(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super()._run_agent_loop(*args, **kwargs)
        except Exception as e:
            self.errors.append(e)
            raise

    async def _agent_loop_postprocess(self, output: Any, validate: bool, **kwargs: Any) -> Any:
        for i, out in enumerate(output if isinstance(output, list) else [output]):
            self.handed[f"{kwargs['uid']}_{kwargs['session_id']}_{i}"] = out.multi_modal_data
        return await super()._agent_loop_postprocess(output, validate, **kwargs)


def tq_config(cfg: Any) -> Any:
    """The job's ``transfer_queue`` config, with one storage unit (more do not start on two CPUs)."""
    conf = OmegaConf.create(OmegaConf.to_container(cfg.transfer_queue, resolve=True))
    conf.enable = True
    conf.backend.SimpleStorage.num_data_storage_units = 1
    return conf


_SESSION: list[bool] = []  # [started Ray] once TransferQueue is up in this process


def transfer_queue(cfg: Any) -> None:
    """TransferQueue up in this process, empty: the first call starts a local Ray (unless one is up) and
    ``tq.init(tq_config(cfg))``, kept until exit (Ray takes ~20 s to start); later calls clear what is stored."""
    if _SESSION:
        for partition, items in (tq.kv_list() or {}).items():
            if items:
                tq.kv_clear(keys=list(items), partition_id=partition)
        return
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    tq.init(tq_config(cfg))
    _SESSION.append(started)
    atexit.register(close_transfer_queue)


def close_transfer_queue() -> None:
    """Close TransferQueue, and the Ray ``transfer_queue`` started."""
    if _SESSION:
        started = _SESSION.pop()
        tq.close()
        if started:
            ray.shutdown()


def sync_trainer(cfg: Any) -> Any:
    """veRL's V1 sync trainer with its tokenizer and dataloader (``init()`` would place GPU workers)."""
    trainer = PPOTrainerSync(config=cfg)
    trainer._init_tokenizer()
    trainer._init_dataloader()
    trainer.global_steps = 1
    return trainer


def guard_sampling(replay_buffer: Any, workers: list[Any], timeout_s: float) -> Any:
    """Make the replay buffer's wait fail instead of hang: on a worker's error, on a refill (sync sampling refills
    only failed groups) and after ``timeout_s``; it polls every 0.05 s (veRL: 2 s). Returns the error check."""
    deadline = time.monotonic() + timeout_s
    poll = type(replay_buffer)._wait_for_next_poll

    def failed() -> None:
        errors = [e for w in workers for e in getattr(w, "errors", [])]
        if errors:
            raise V1RolloutError(f"{len(errors)} episode(s) failed in veRL's AgentLoopWorkerTQ; the first: "
                                 f"{type(errors[0]).__name__}: {errors[0]}") from errors[0]

    def wait(partition_id: str, last_debug_time: float) -> float:
        failed()
        if time.monotonic() > deadline:
            raise V1RolloutError(f"the step's trajectories did not all reach TransferQueue in {timeout_s:g} s")
        return poll(replay_buffer, partition_id, last_debug_time)

    def refill(count: int) -> int:
        failed()
        raise V1RolloutError(f"{count} prompt group(s) failed in veRL's AgentLoopWorkerTQ")

    replay_buffer.poll_interval = 0.05
    replay_buffer._wait_for_next_poll = wait
    replay_buffer.refill_fn = refill
    return failed


class V1Step(NamedTuple):
    """One V1 rollout step: the sampled ``KVBatchMeta``, its trajectories read back from TransferQueue (the
    ``FIELDS`` they have: a ``TensorDict`` of nested tensors, in the batch's key order), the agent-loop workers
    (chunk order) and the trainer. The trajectories stay in TransferQueue until the next step."""

    batch: Any
    data: Any
    workers: list[Any]
    trainer: Any


def v1_rollout_step(cfg: Any, llm_client: Any, reward_handles: list[Any] | None,
                    worker_class: type = ObservedWorkerTQ, timeout_s: float = 600) -> V1Step:
    """The V1 trainer's first step up to its sample: ``prepare_step`` then ``replay_buffer.sample``."""
    transfer_queue(cfg)
    actor_loop = RolloutActorLoop()
    workers: list[Any] = []

    class Manager(AgentLoopManagerTQ):
        async def _init_agent_loop_workers(self) -> None:
            for _ in range(self.rollout_config.agent.num_workers):
                workers.append(actor_loop.call(worker_class, self.config, self.llm_client, self.teacher_client,
                                               self.reward_loop_worker_handles))
            self.agent_loop_workers = [ThreadedActorStandIn(w, actor_loop) for w in workers]

    try:
        trainer = sync_trainer(cfg)
        trainer.agent_loop_manager = Manager.create(config=cfg, llm_client=llm_client, teacher_client=None,
                                                    reward_loop_worker_handles=reward_handles)
        failed = guard_sampling(trainer.replay_buffer, workers, timeout_s)
        trainer.prepare_step()
        try:
            batch, _ = trainer.replay_buffer.sample(global_steps=trainer.global_steps, partition_id="train",
                                                    batch_size=cfg.data.train_batch_size)
        finally:
            failed()  # failed groups stay sampleable: the sample would lack their episodes
        fields = [f for f in FIELDS if f != "rollout_log_probs" or cfg.actor_rollout_ref.rollout.calculate_log_probs]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        return V1Step(batch, data, workers, trainer)
    finally:
        actor_loop.close()
