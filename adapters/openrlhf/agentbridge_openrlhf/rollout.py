"""The agent executor OpenRLHF loads: one agentbridge episode per ``execute()``, OpenRLHF's vLLM engine as policy.

Imported only inside OpenRLHF's rollout actors (it imports OpenRLHF); the job's thin agent file subclasses
``AgentbridgeExecutor`` as ``AgentExecutor``. What ``execute`` returns is exactly what OpenRLHF 0.11.2's
``SamplesGenerator._process_response_into_experience`` reads.
"""

from __future__ import annotations

import json
import os
from collections import deque
from copy import deepcopy
from pathlib import Path
from typing import Any

from openrlhf.utils.agent import AgentExecutorBase

from agentbridge import Task
from agentbridge.adapter.episode import EpisodeRunner
from agentbridge.adapter.rollout import (
    FINISH_REASONS,
    Generation,
    Renderer,
    SamplingParams,
    TrainingSequence,
    Trajectory,
    component_values,
    episode_metrics,
    reward_components,
)
from agentbridge.spec import Spec, load_spec


class EnginePolicy:
    """agentbridge's ``Policy`` over OpenRLHF's engine actor (``RolloutRayActor.generate``).

    The engine's vLLM ``SamplingParams`` (temperature, top_p, logprobs, ... from OpenRLHF's command line) are
    copied per call; only ``max_tokens`` comes from the driver, which owns every token budget.
    """

    def __init__(self, llm_engine: Any, sampling_params: Any) -> None:
        self.engine = llm_engine
        self.sampling_params = sampling_params
        self.calls = 0

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams,
                       images: list[Any] | None = None) -> Generation:
        params = deepcopy(self.sampling_params)
        params.max_tokens = sampling.max_tokens
        self.calls += 1
        out = await self.engine.generate(list(prompt_ids), params,
                                         multi_modal_data={"image": list(images)} if images else None)
        o = out.outputs[0]
        ids = list(o.token_ids)
        logprobs = None
        if getattr(params, "logprobs", None) is not None and o.logprobs is not None:
            logprobs = [float(step[t].logprob) for step, t in zip(o.logprobs, ids, strict=False)]
        return Generation(token_ids=ids, logprobs=logprobs, finish_reason=o.finish_reason or "stop")


def action_ranges(prompt_len: int, mask: list[int]) -> list[tuple[int, int]]:
    """Spans of policy-generated tokens (mask 1) in ``prompt + response`` coordinates."""
    ranges: list[tuple[int, int]] = []
    start = None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            ranges.append((prompt_len + start, prompt_len + i))
            start = None
    return ranges


def extra_logs(traj: Trajectory, components: list[str]) -> dict[str, float]:
    """The same keys for every episode (OpenRLHF concatenates them across samples): the core's episode metrics,
    reward components and finish reasons, in agentbridge's normalized names."""
    logs = episode_metrics(traj)
    logs.update({f"reward/{c}": value for c, value in component_values(traj, components).items()})
    logs.update({f"finish/{r}": float(traj.finish_reason == r) for r in FINISH_REASONS})
    return logs


def to_openrlhf(traj: Trajectory, seq: TrainingSequence, *, prompt: Any, label: Any, images: Any,
                with_logprobs: bool, components: list[str],
                mm_train_inputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """A driver ``Trajectory`` and its sample ``seq`` as the dict OpenRLHF's samples generator turns into an
    ``Experience``.

    An episode that failed before its first token still yields a valid sample, the core's fallback
    (:func:`agentbridge.rollout.training.episode_sample`): the prompt and one EOS with loss mask 0 (no action
    range), reward as scored (0 for errors), so one broken environment never fails a batch.
    """
    prompt_ids, response, mask, logprobs = seq.prompt_ids, seq.response_ids, seq.response_mask, seq.logprobs
    return {
        "prompt": prompt,
        "label": label,
        "images": images,
        "mm_train_inputs": mm_train_inputs,
        "reward": float(traj.reward),
        "scores": float(traj.reward),
        "observation_tokens": prompt_ids + response,
        "action_ranges": action_ranges(len(prompt_ids), mask),
        "rollout_log_probs": [0.0] * len(prompt_ids) + logprobs if with_logprobs else None,
        "truncated": traj.finish_reason == "length",
        "extra_logs": extra_logs(traj, components),
    }


def task_from_label(label: Any) -> Task:
    """The task carried in the dataset's label (a JSON string, or a dict when a dataset kept it as one)."""
    data = json.loads(label) if isinstance(label, str) else label
    if not isinstance(data, dict) or "id" not in data or "prompt" not in data:
        raise ValueError(f"the label is not an agentbridge task (expected JSON with id, prompt, data): {label!r:.80}")
    return Task.from_dict(data)


class AgentbridgeExecutor(AgentExecutorBase):
    """Runs the spec's agent with agentbridge's driver; OpenRLHF calls ``execute`` once per sample."""

    def __init__(self, spec: str | Path | Spec) -> None:
        self.spec = spec if isinstance(spec, Spec) else load_spec(spec)
        self._runner: EpisodeRunner | None = None
        # the latest episodes, for inspection (tests, debugging): $AGENTBRIDGE_OPENRLHF_KEEP of them, default 0
        self.recent: deque[Trajectory] = deque(maxlen=int(os.environ.get("AGENTBRIDGE_OPENRLHF_KEEP") or 0))

    def runner(self, hf_tokenizer: Any, max_length: int) -> EpisodeRunner:
        """The spec's episode runner, built once per engine actor with OpenRLHF's tokenizer (or VLM processor); its
        budgets stay inside ``--data.max_len`` (``max_length``: OpenRLHF cuts every sequence there)."""
        if self._runner is None:
            tokenizer = getattr(hf_tokenizer, "tokenizer", hf_tokenizer)
            runner = EpisodeRunner(self.spec, tokenizer, "openrlhf", max_total=max_length)
            image_processor = getattr(hf_tokenizer, "image_processor", None)
            if image_processor is not None:
                renderer = runner.agent.renderer
                runner.agent.renderer = Renderer(tokenizer, tools=renderer.tools, chat_template=renderer.chat_template,
                                                 image_processor=image_processor)
            self._runner = runner
        return self._runner

    async def execute(self, prompt: Any, label: Any, sampling_params: Any, max_length: int, hf_tokenizer: Any,
                      llm_engine: Any, images: Any = None) -> dict[str, Any]:
        """One episode. ``images``: the row's image references (the dataset's image key), the task's first
        screenshots; later ones come from the environment. Every image the driver saw, in order, becomes
        ``mm_train_inputs`` (``pixel_values``, ``image_grid_thw``) for the actor's forward pass."""
        runner = self.runner(hf_tokenizer, max_length)
        task = task_from_label(label)
        if images:
            from openrlhf.utils.vlm_utils import load_images

            task.data.setdefault("images", images)  # the references, as the compiled task had them
            task.images = load_images(images)
        episode = await runner.run(task, EnginePolicy(llm_engine, sampling_params))
        traj = episode.trajectory
        self.recent.append(traj)
        mm = None
        if traj.images and getattr(hf_tokenizer, "image_processor", None) is not None:
            mm = dict(hf_tokenizer.image_processor(images=traj.images, return_tensors="pt"))
        return to_openrlhf(traj, episode.sample, prompt=prompt, label=label, images=images,
                           with_logprobs=getattr(sampling_params, "logprobs", None) is not None,
                           components=reward_components(self.spec), mm_train_inputs=mm)

