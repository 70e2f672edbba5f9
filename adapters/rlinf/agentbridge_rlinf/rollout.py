"""RLinf ``AgentLoopWorker`` that runs agentbridge's rollout driver, with RLinf's ``self.generate`` as its policy.

RLinf hands an agent-loop worker each request's prompt ids and answer; the job's dataset puts the task (as JSON) in
the answer column (``agentbridge_rlinf.data``), so each group rebuilds its task and runs ``group_size`` episodes of
it through :meth:`AgentBridgeAgentLoopWorker.run_one_query`, RLinf's per-episode hook. Each episode is the driver's
(same tokens, masks, log-probs and rewards as on every backend); :meth:`get_rollout_result` packs the group with
RLinf's own code and fills ``RolloutResult.rewards`` with the driver's rewards (the job launches no reward worker).
"""

from __future__ import annotations

import asyncio
import copy
from statistics import fmean
from typing import Any

import torch
from omegaconf import DictConfig
from rlinf.data.io_struct import RolloutResult
from rlinf.workers.agent.agent_loop import AgentLoopOutput, AgentLoopWorker

from agentbridge import Task
from agentbridge import adapter as kit
from agentbridge.adapter.episode import EpisodeRunner
from agentbridge.adapter.rollout import Generation, SamplingParams
from agentbridge.spec import load_spec


class ChannelPolicy:
    """agentbridge's ``Policy`` over RLinf's engine channels (``AgentLoopWorker.generate``): token in, token out.

    The engine samples with the job's ``algorithm.sampling_params`` (compiled from the spec); each request only sets
    the turn's budget (``max_new_tokens``). Its reply is ``{"output_ids", "finish_reason", "logprobs"}``.
    """

    def __init__(self, worker: AgentLoopWorker) -> None:
        self.worker = worker
        self.calls = 0

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams,
                       images: list[Any] | None = None) -> Generation:
        out = await self.worker.generate(list(prompt_ids), {"max_new_tokens": sampling.max_tokens})
        self.calls += 1
        ids = [int(t) for t in out["output_ids"]]
        logprobs = out.get("logprobs")
        finish = "length" if out.get("finish_reason") == "length" else "stop"
        return Generation(token_ids=ids, logprobs=[float(x) for x in logprobs] if logprobs is not None else None,
                          finish_reason=finish)


class AgentBridgeAgentLoopWorker(AgentLoopWorker):
    """Runs one agentbridge episode per RLinf sample: the driver's episodes, packed by RLinf."""

    def __init__(self, cfg: DictConfig, placement: Any) -> None:
        super().__init__(cfg, placement)
        # RLinf's AgentLoopWorker keeps the engine's log-probs only without recompute_logprobs, which
        # importance_sampling_fix turns on; its correction weighs exactly those against the recomputed ones
        # (FSDPActor.training_step: rollout_logprobs and recomputed_logprobs), so the group keeps them
        if cfg.runner.task_type != "reasoning_eval" and cfg.algorithm.get("importance_sampling_fix", False):
            self.return_logprobs = True
        self.spec_path = str(cfg.agentbridge.spec_path)
        # RLinf keeps data.max_prompt_length prompt tokens and runner.seq_length in all: the driver cuts to them
        self.runner = EpisodeRunner(load_spec(self.spec_path), self.tokenizer, "rlinf",
                                    max_prompt=int(cfg.data.max_prompt_length), max_total=int(cfg.runner.seq_length))
        self.step_metrics: list[dict[str, float]] = []

    async def run_one_query(self, prompt_ids: list[int], task: Task | None = None) -> AgentLoopOutput:
        """One episode of ``task`` by the driver, RLinf's engine as its policy (``prompt_ids``: RLinf's rendering
        of the dataset row; the driver renders the task's prompt itself)."""
        if task is None:
            raise ValueError("agentbridge's agent loop runs a task: RLinf's request carried none")
        episode = await self.runner.run(task, ChannelPolicy(self))
        seq = episode.sample
        self.step_metrics.append(episode.metrics)
        return AgentLoopOutput(
            prompt_ids=seq.prompt_ids, response_ids=seq.response_ids, response_mask=seq.response_mask,
            response_logprobs=seq.logprobs, num_turns=episode.turns, is_end=True,
            reward_score=float(episode.trajectory.reward),
            extra_fields={"agentbridge": {**episode.info, **episode.metrics}})

    async def run_agentloop_rollout_group(self, input_ids: list[int], answer: Any, group_size: int,
                                          output_channel: Any) -> None:
        """``group_size`` episodes of the task the request's answer carries, packed into one ``RolloutResult``."""
        task = kit.decode_task(answer, "rlinf")
        outputs = await asyncio.gather(*(self.run_one_query(copy.deepcopy(input_ids), task=task)
                                         for _ in range(group_size)))
        await output_channel.put(self.get_rollout_result(list(outputs), answer), async_op=True).async_wait()

    async def run_agentloop_rollout(self, input_channel: Any, output_channel: Any) -> dict[str, float]:
        """RLinf's rollout of one request; returns the step's mean episode metrics (RLinf logs them)."""
        self.step_metrics = []
        await super().run_agentloop_rollout(input_channel, output_channel)
        rows, self.step_metrics = self.step_metrics, []
        return {key: fmean(r[key] for r in rows) for key in rows[0]} if rows else {}

    def get_rollout_result(self, task_results: list[AgentLoopOutput], answer: Any) -> RolloutResult:
        """RLinf's packing of the group, with the driver's reward of each episode in ``rewards``."""
        result = super().get_rollout_result(task_results, answer)
        result.rewards = torch.tensor([float(r.reward_score or 0.0) for r in task_results], dtype=torch.float32)
        return result
