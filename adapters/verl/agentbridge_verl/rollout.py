"""veRL ``AgentLoopBase`` that runs agentbridge's rollout driver, with ``server_manager.generate`` as its policy.

Selected by the job's agent-loop YAML (``_target_``) and the ``agent_name`` column. veRL builds one loop per
sample; the resolved ``Agent`` (plugins, environment factory, renderer) is built once per worker and reused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ConfigDict
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from agentbridge import adapter as kit
from agentbridge.adapter.episode import Episode, EpisodeRunner
from agentbridge.adapter.rollout import token_rewards
from agentbridge.spec import Spec, load_spec
from agentbridge_verl.reward import REWARD_INFO_KEY, reward_extra_info
from agentbridge_verl.reward_server import connect
from agentbridge_verl.server_policy import ServerPolicy

_RUNNERS: dict[tuple[str, int, int, int], EpisodeRunner] = {}


class DriverMetrics(AgentLoopMetrics):
    """veRL's per-sample timings plus every driver metric (``episode/turns``, ``tools/calls``, ...)."""

    model_config = ConfigDict(extra="allow")


class TurnCreditOutput(AgentLoopOutput):
    """An ``AgentLoopOutput`` whose reward reaches veRL per token (``algorithm.credit: turn``).

    veRL's V1 worker stores ``as_dict()`` in TransferQueue, where ``rm_scores`` (one value per response token,
    ``reward_score`` on the last by default) becomes the trainer's ``token_level_scores``: here it is
    ``token_rewards``, each turn's process reward on the turn's last token and the outcome on the last
    (:func:`agentbridge.rollout.training.token_rewards`), summing to ``reward_score``.
    """

    token_rewards: list[float]

    def as_dict(self) -> dict[str, Any]:
        import torch

        output = super().as_dict()
        output.pop("token_rewards", None)
        output["rm_scores"] = torch.tensor(self.token_rewards, dtype=torch.float32)
        return output


def runner_for(spec_path: str, tokenizer: Any, prompt_length: int, response_length: int) -> EpisodeRunner:
    """The spec's episode runner for this tokenizer, its budgets capped to veRL's prompt/response lengths, built
    once per worker process (veRL builds an agent loop per sample)."""
    key = (str(Path(spec_path).resolve()), id(tokenizer), prompt_length, response_length)
    if key not in _RUNNERS:
        _RUNNERS[key] = EpisodeRunner(load_spec(spec_path), tokenizer, "verl", max_prompt=prompt_length,
                                      max_response=response_length)
    return _RUNNERS[key]


def default_spec_path(trainer_config: Any) -> str:
    """``spec.yaml`` beside the agent-loop YAML: the job directory (or a Ray job's working_dir copy of it)."""
    path = trainer_config.actor_rollout_ref.rollout.agent.get("agent_loop_config_path") or "agent_loop.yaml"
    return os.path.join(os.path.dirname(str(path)), "spec.yaml")


def to_output(episode: Episode, spec: Spec, prompt_length: int, response_length: int, *,
              logprobs: bool, num_preempted: int = -1) -> AgentLoopOutput:
    """The episode as an ``AgentLoopOutput`` that already fits veRL's padded shapes (veRL does not truncate).

    An episode with no response token (its server failed on the first turn) is the core's fallback sample
    (:func:`agentbridge.rollout.training.episode_sample`: one EOS token with mask 0, after the task's prompt when it
    rendered none): veRL's V1 worker puts the reward on the last response token and fails the whole prompt group
    without one.
    """
    traj, seq = episode.trajectory, episode.sample
    prompt_ids = seq.prompt_ids[-prompt_length:]
    response_ids = seq.response_ids[:response_length]
    mask, token_logprobs = seq.response_mask[:response_length], seq.logprobs[:response_length]
    metrics = DriverMetrics(generate_sequences=traj.metrics.get("time/generate_s", 0.0),
                            tool_calls=traj.metrics.get("time/env_s", 0.0), num_preempted=num_preempted,
                            **episode.metrics)
    info = {**episode.info,
            "truncated": int(len(traj.prompt_ids) > prompt_length or len(traj.response_ids) > response_length)}
    fields: dict[str, Any] = {}
    cls = AgentLoopOutput
    if spec.algorithm.credit == "turn":
        cls, fields = TurnCreditOutput, {"token_rewards": token_rewards(traj, "turn")[:response_length]}
    return cls(
        **fields,
        prompt_ids=prompt_ids,
        response_ids=response_ids,
        response_mask=mask,
        response_logprobs=token_logprobs if logprobs else None,
        multi_modal_data={"images": list(traj.images)} if traj.images else None,
        reward_score=float(traj.reward),
        num_turns=episode.turns,
        metrics=metrics,
        extra_fields={REWARD_INFO_KEY: reward_extra_info(traj, spec), "agentbridge": info},
    )


class AgentBridgeAgentLoop(AgentLoopBase):
    """Runs one agentbridge episode per veRL sample: same tokens, masks, rewards and metrics as every backend."""

    def __init__(self, *args: Any, spec_path: str | None = None, **kwargs: Any) -> None:
        kwargs.pop("name", None)
        kwargs.pop("tools", None)  # agentbridge's environment owns the tools
        super().__init__(*args, **kwargs)
        self.spec_path = spec_path or default_spec_path(self.config)
        self.runner = runner_for(self.spec_path, self.tokenizer, self.rollout_config.prompt_length,
                                 self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Rebuild the task from ``extra_info``, run the driver with veRL's server as policy, convert."""
        await connect(self.config, self.runner.spec)  # a served reward model: through veRL's reward router
        task = kit.decode_task((kwargs.get("extra_info") or {}).get(kit.TASK_KEY), "verl")
        policy = ServerPolicy(self.server_manager, sampling_params)
        episode = await self.runner.run(task, policy)
        preempted = policy.num_preempted if policy.calls else -1
        return to_output(episode, self.runner.spec, self.rollout_config.prompt_length,
                         self.rollout_config.response_length, logprobs=bool(sampling_params.get("logprobs", True)),
                         num_preempted=preempted)
