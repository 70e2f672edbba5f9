"""ROLL env manager that runs agentbridge's rollout driver, with ROLL's ``llm_proxy.generate`` as its policy.

ROLL's agentic pipeline builds one env manager per environment slot (``custom_envs.<tag>.env_manager_cls``), in
threads of its ``EnvironmentWorker``\\ s, and calls :meth:`AgentBridgeEnvManager.run_rollout_loop`: play episodes
until stopped, each under an episode id from ROLL's ``GroupQueueManager``, each put back on that queue as one
trajectory (``DataProto``). Here each episode is the driver's (same tokens, masks, log-probs and rewards as on every
backend), generated through ROLL's ``llm_proxy`` (``policy``: ROLL's vLLM/SGLang router), and written in the layout
of ROLL's own ``TrajEnvManager.formulate_rollouts``: the whole sequence padded to ``sequence_length`` with
``response_mask`` 1 on generated tokens, ``prompt_mask``, ``scores`` (the episode's reward on its last token) and
``infer_logprobs`` (shifted by one, as ROLL's actor reads them).
"""

from __future__ import annotations

import asyncio
from threading import Lock
from typing import Any

import numpy as np
import ray
import torch
from roll.distributed.scheduler.protocol import DataProto
from roll.pipeline.agentic.env_manager.base_env_manager import BaseEnvManager
from roll.pipeline.agentic.llm_proxy import create_llm_proxy
from tensordict import TensorDict

from agentbridge import Task
from agentbridge.adapter.episode import Episode, EpisodeRunner
from agentbridge.adapter.rollout import Generation, SamplingParams, read_tasks_jsonl, token_rewards
from agentbridge.spec import load_spec
from agentbridge_roll import layout
from agentbridge_roll.data import task_index

TASK_KEY = "agentbridge_task_id"  # non-tensor field of each trajectory: the task it played
# the tensor types of ROLL's own rows (TrajEnvManager.formulate_rollouts)
DTYPES = {"input_ids": torch.long, "attention_mask": torch.long, "position_ids": torch.long,
          "response_mask": torch.bool, "prompt_mask": torch.bool, "scores": torch.float, "infer_logprobs": torch.float}


class Aborted(RuntimeError):
    """ROLL's proxy returned no generation: the pipeline suspended its engine; the episode is played again."""


class ProxyPolicy:
    """agentbridge's ``Policy`` over ROLL's ``llm_proxy.generate``: token in, token out.

    The request is a one-row ``DataProto`` (``input_ids``, ``attention_mask``, ``position_ids``) as
    ``TrajEnvManager.format_messages`` builds it; the generation config is the env manager's ``generating_args``
    with the turn's budget as ``max_new_tokens``. The reply holds ``responses`` and, from an engine that returns them,
    ``infer_logprobs`` (whose last entries are the response's).
    """

    def __init__(self, manager: AgentBridgeEnvManager) -> None:
        self.manager = manager
        self.aborted = False

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams,
                       images: list[Any] | None = None) -> Generation:
        m = self.manager
        input_ids = torch.tensor([list(prompt_ids)], dtype=torch.long)
        attention_mask = torch.ones_like(input_ids)
        lm_input = DataProto()
        lm_input.batch = TensorDict({"input_ids": input_ids, "attention_mask": attention_mask,
                                     "position_ids": attention_mask.cumsum(dim=-1) - 1}, batch_size=1)
        lm_input.meta_info["src_rank"] = m.env_config["env_id"]
        config = m.worker_config.generating_args.to_dict()
        config["max_new_tokens"] = int(sampling.max_tokens)
        out = m.llm_proxy.generate(messages=[], lm_input=lm_input, generation_config=config)
        if out is None:
            self.aborted = True
            raise Aborted("ROLL's engine aborted the request")
        ids = [int(t) for t in out.batch["responses"][0].tolist()]
        logprobs = None
        if "infer_logprobs" in out.batch.keys():
            logprobs = [float(x) for x in out.batch["infer_logprobs"][0][-len(ids):].tolist()] if ids else []
        eos = m.runner.agent.renderer.eos_token_id
        finish = "stop" if ids and ids[-1] == eos else ("length" if len(ids) >= sampling.max_tokens else "stop")
        return Generation(token_ids=ids, logprobs=logprobs, finish_reason=finish)


class AgentBridgeEnvManager(BaseEnvManager):
    """Plays agentbridge episodes in ROLL's env-manager slot: the driver's episodes, queued in ROLL's layout."""

    def __init__(self, worker_config: Any, pipeline_config: Any, env_config: Any, tokenizer: Any,
                 generate_scheduler: Any, output_queue: Any, thread_lock: Lock, mode: str = "train",
                 *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.worker_config = worker_config
        self.pipeline_config = pipeline_config
        self.env_config = env_config
        self.tokenizer = tokenizer
        self.output_queue = output_queue
        self.mode = mode
        settings = env_config["config"]
        # ROLL pads (and cuts) every trajectory to sequence_length: the driver keeps each episode within it
        self.runner = EpisodeRunner(load_spec(str(settings["spec_path"])), tokenizer, "roll",
                                    max_total=int(pipeline_config.sequence_length))
        self.tasks: list[Task] = read_tasks_jsonl(str(settings["data_path"]))
        self.llm_proxy = create_llm_proxy(generate_scheduler=generate_scheduler,
                                          llm_proxy_config=worker_config.llm_proxy, tokenizer=tokenizer, env=None)
        self.group_seed = 0
        self.episode_id: int | None = None

    def task_for(self, episode_id: int) -> Task:
        """The episode's task: shared by the group's episodes; shuffled per pass in training, in order otherwise."""
        seed = self.runner.spec.seed if self.mode == "train" else None
        return self.tasks[task_index(episode_id, int(self.env_config["group_id"]),
                                     int(self.worker_config.num_env_groups), len(self.tasks), seed)]

    def run_rollout_loop(self, data: DataProto) -> None:
        """ROLL's contract: episodes under the queue's episode ids until stopped (None ends the group's run)."""
        group_id, env_id = self.env_config["group_id"], self.env_config["env_id"]
        self.running = True
        self.group_seed = int(data.meta_info["seed"]) + int(self.env_config["group_seed"])
        start_step = self.current_step
        while self.running:
            self.episode_id = ray.get(self.output_queue.get_episode_id.remote(group_id, env_id))
            if self.episode_id is None:
                break
            start_step = self.current_step
            rollout = None
            while self.running and rollout is None:
                rollout = self.play(self.episode_id)
            if rollout is not None:
                ray.get(self.output_queue.put.remote(group_id, self.episode_id, start_step, rollout, env_id))
        ray.get(self.output_queue.put.remote(group_id, self.episode_id, start_step, None, env_id))

    def play(self, episode_id: int) -> DataProto | None:
        """One episode by the driver as ROLL's trajectory; None when ROLL's engine aborted it."""
        task = self.task_for(episode_id)
        policy = ProxyPolicy(self)
        traj = asyncio.run(self.runner.play(task, policy))
        if policy.aborted:
            return None
        return self.formulate(self.runner.finish(task, traj), episode_id)

    def formulate(self, episode: Episode, episode_id: int) -> DataProto:
        """The episode in the layout of ROLL's ``TrajEnvManager.formulate_rollouts``
        (:mod:`agentbridge_roll.layout`), padded to ``sequence_length``."""
        traj, task, seq = episode.trajectory, episode.task, episode.sample
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        # the reward on the last token (the one token of the empty-episode fallback)
        row = layout.rows(seq, token_rewards(traj), int(self.pipeline_config.sequence_length), int(pad_id))
        rollout = DataProto()
        rollout.batch = TensorDict({key: torch.tensor([row[key]], dtype=DTYPES[key]) for key in layout.FIELDS},
                                   batch_size=1)
        tag, group_id, env_id = self.env_config["tag"], self.env_config["group_id"], self.env_config["env_id"]
        traj_group_id = f"{tag}_{group_id}_{episode_id}_{self.group_seed}"
        rollout.non_tensor_batch.update({
            "env_ids": np.array([env_id], dtype=object),
            "group_ids": np.array([group_id], dtype=object),
            "tags": np.array([tag], dtype=object),
            "step_scores": np.array([[float(t.credit) for t in traj.turns] or [float(traj.reward)]], dtype=object),
            "episode_scores": np.array([float(traj.reward)], dtype=object),
            "traj_group_id": np.array([traj_group_id], dtype=object),
            "traj_id": np.array([f"{traj_group_id}_{env_id}"], dtype=object),
            TASK_KEY: np.array([task.id], dtype=object),
        })
        metrics = {f"env/{tag}/{k}": v for k, v in episode.metrics.items()}
        metrics[f"env/{tag}/finish/{traj.finish_reason}"] = 1.0
        metrics["env/response_length"] = float(sum(seq.response_mask))
        rollout.meta_info = {"metrics": metrics}
        return rollout
