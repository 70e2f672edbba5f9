"""One training step's rollout through veRL 0.9.1's own code, in this process and on CPU (no Ray, no GPU).

What runs is veRL's: the job's composed trainer config, the trainer's dataset, sampler and collate function, the
trainer's generation step of ``RayPPOTrainer.fit`` (``_get_gen_batch``, the ``rollout.n`` repeat, ``union``,
``extract_reward``), ``AgentLoopManager.generate_sequences`` (chunking per worker, concatenation) and
``AgentLoopWorker`` (agent loop, padding, masks, rollout log-probs, ``rm_scores``, multimodal inputs, position ids).

Stand-ins replace only what needs Ray or a GPU, each named as one:

* ``ActorStandIn``: a Ray actor handle; ``handle.method.remote(...)`` calls the method of an object in this process.
* ``InProcessAgentLoopManager``: ``AgentLoopManager`` whose workers are created here instead of as Ray actors
  (``_init_agent_loop_workers``); its ``generate_sequences`` is veRL's.
* ``RewardLoopWorkerStandIn``: the reward-loop workers ``RayPPOTrainer`` hands the agent-loop workers when no reward
  model is configured; the driver scores every episode, so veRL never calls them (it raises if it does).
* the LLM client (vLLM servers) is the caller's: a test's scripted server, or the conformance suite's golden one.

This is the path of the trainer ``main_ppo`` runs with ``trainer.use_v1=false`` (``RayPPOTrainer``). veRL 0.9.1's
default V1 trainer runs the same agent loop under ``AgentLoopWorkerTQ``, which writes each episode to
TransferQueue instead of a padded ``DataProto``: see ``agentbridge_verl.inprocess_v1``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import numpy as np
from verl.experimental.agent_loop.agent_loop import AgentLoopManager, AgentLoopWorker

from agentbridge.spec import load_spec


def compose_worker_config(job_dir: Path) -> Any:
    """The job's composed and resolved trainer config, as ``main_ppo`` would build it from ``launch.sh``."""
    from omegaconf import OmegaConf

    from agentbridge.adapter.models import resolve_model_path
    from agentbridge_verl.validate import compose_job

    spec = load_spec(Path(job_dir) / "spec.yaml")
    cfg = compose_job(Path(job_dir), spec, str(resolve_model_path(spec.model.path)))
    OmegaConf.resolve(cfg)
    return cfg


@contextmanager
def verl_processor_in_model_config() -> Iterator[None]:
    """veRL's model config builds its processor with ``verl_processor``: veRL's ``hf_processor``, without the video
    processor where torchvision does not load (see ``agentbridge_verl.processor``)."""
    import verl.workers.config.model as model_config

    from agentbridge_verl.processor import verl_processor

    with mock.patch.object(model_config, "hf_processor", lambda path, **_: verl_processor(str(path))[0]):
        yield


def model_config(cfg: Any) -> Any:
    """veRL's ``HFModelConfig`` of the job: the tokenizer and processor the trainer and the workers use."""
    from verl.utils.config import omega_conf_to_dataclass

    return omega_conf_to_dataclass(cfg.actor_rollout_ref.model)


def first_train_batch(cfg: Any, tokenizer: Any, processor: Any = None) -> Any:
    """The first batch of the trainer's dataloader, with the trainer's group ``uid`` and temperature.

    veRL's ``create_rl_dataset``, ``create_rl_sampler`` (shuffled with ``data.seed``) and ``collate_fn``, as
    ``RayPPOTrainer._create_dataloader`` builds them; the loader runs in this process (no loader workers).
    """
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.protocol import DataProto
    from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
    from verl.utils.dataset.rl_dataset import collate_fn

    dataset = create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, processor,
                                max_samples=cfg.data.get("train_max_samples", -1))
    loader = StatefulDataLoader(dataset=dataset, batch_size=cfg.data.get("gen_batch_size", None)
                                or cfg.data.train_batch_size, num_workers=0, drop_last=True, collate_fn=collate_fn,
                                sampler=create_rl_sampler(cfg.data, dataset))
    batch = DataProto.from_single_dict(next(iter(loader)))
    batch.meta_info["temperature"] = cfg.actor_rollout_ref.rollout.temperature
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch.batch))], dtype=object)
    return batch


class ActorStandIn:
    """Stand-in for a Ray actor handle: ``handle.method.remote(*args)`` is ``obj.method(*args)`` in this process."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __getattr__(self, name: str) -> Any:
        return SimpleNamespace(remote=getattr(self.obj, name))


class RewardLoopWorkerStandIn:
    """Stand-in for veRL's reward-loop worker: never called, since the driver sets every episode's reward."""

    async def compute_score(self, data: Any) -> Any:
        raise RuntimeError("veRL asked its reward loop to score an episode: the agentbridge agent loop returned no "
                           "reward_score")


class InProcessAgentLoopManager(AgentLoopManager):
    """veRL's ``AgentLoopManager`` with its ``rollout.agent.num_workers`` workers created in this process."""

    agent_loop_workers_class = AgentLoopWorker  # set, so __init__ does not wrap it with ray.remote
    worker_class: type[AgentLoopWorker] = AgentLoopWorker

    async def _init_agent_loop_workers(self) -> None:
        self.workers = [self.worker_class(self.config, self.llm_client, self.teacher_client,
                                          self.reward_loop_worker_handles)
                        for _ in range(self.rollout_config.agent.num_workers)]
        self.agent_loop_workers = [ActorStandIn(w) for w in self.workers]


def rollout_step(cfg: Any, llm_client: Any, batch: Any,
                 worker_class: type[AgentLoopWorker] = AgentLoopWorker) -> tuple[Any, list[AgentLoopWorker]]:
    """``RayPPOTrainer.fit``'s generation step on ``batch`` (a dataloader batch with ``uid``), up to the reward.

    Returns the training batch (``token_level_scores`` set, as before the old-log-prob pass) and the workers, in
    the order the manager handed them chunks. ``trainer.balance_batch`` (a reordering) is left out.
    """
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer, compute_response_mask
    from verl.trainer.ppo.reward import extract_reward

    gen_batch = RayPPOTrainer._get_gen_batch(None, batch)  # uses no trainer state
    gen_batch.meta_info["global_steps"] = 1
    n = cfg.actor_rollout_ref.rollout.n
    gen_batch_output = gen_batch.repeat(repeat_times=n, interleave=True)

    class Manager(InProcessAgentLoopManager):
        pass

    Manager.worker_class = worker_class

    async def go() -> tuple[Any, list[AgentLoopWorker]]:
        manager = await Manager.create(config=cfg, llm_client=llm_client, teacher_client=None,
                                       reward_loop_worker_handles=[ActorStandIn(RewardLoopWorkerStandIn())])
        return await manager.generate_sequences(gen_batch_output), manager.workers

    output, workers = asyncio.run(go())
    output.meta_info.pop("timing", None)
    train = batch.repeat(repeat_times=n, interleave=True).union(output)
    if "response_mask" not in train.batch.keys():
        train.batch["response_mask"] = compute_response_mask(train)
    reward_tensor, reward_extra_infos = extract_reward(train)
    train.batch["token_level_scores"] = reward_tensor
    if reward_extra_infos:
        train.non_tensor_batch.update({k: np.array(v) for k, v in reward_extra_infos.items()})
    return train, workers


def input_batch(cfg: Any, tokenizer: Any, rows: int, processor: Any = None) -> Any:
    """The first ``rows`` dataset rows, repeated ``rollout.n`` times with a group ``uid`` (what one worker gets)."""
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    dataset = RLHFDataset(cfg.data.train_files, tokenizer, cfg.data, processor=processor)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(rows)]))
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(rows)], dtype=object)
    return batch.repeat(repeat_times=cfg.actor_rollout_ref.rollout.n, interleave=True)


def generate(cfg: Any, llm_client: Any, batch: Any) -> Any:
    """One veRL ``AgentLoopWorker.generate_sequences`` on ``batch`` with ``llm_client`` as its LLM client."""

    async def go() -> Any:
        worker = AgentLoopWorker(cfg, llm_client=llm_client)
        return await worker.generate_sequences(batch)

    return asyncio.run(go())


def unpadded_rows(gen: Any) -> list[dict[str, Any]]:
    """Each batch row without veRL's padding: prompt/response ids, mask, log-probs, reward (``rm_scores`` summed)."""
    b = gen.batch
    prompt_len = b["prompts"].shape[1]
    rows = []
    for i in range(len(gen)):
        attn = b["attention_mask"][i].bool()
        p_keep, r_keep = attn[:prompt_len], attn[prompt_len:]
        n_resp = int(r_keep.sum())
        rows.append({
            "prompt_ids": b["prompts"][i][p_keep].tolist(),
            "response_ids": b["responses"][i][r_keep].tolist(),
            "response_mask": b["response_mask"][i][:n_resp].tolist(),
            "logprobs": b["rollout_log_probs"][i][:n_resp].tolist(),
            "reward": float(b["rm_scores"][i].sum()),
            "reward_at": int(b["rm_scores"][i].nonzero()[0, 0]) if b["rm_scores"][i].any() else n_resp - 1,
            "n_resp": n_resp,
        })
    return rows
