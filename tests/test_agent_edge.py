"""The decisions every adapter takes from the core: budgets, the empty-episode fallback, prompt messages, reward
components, whether a model is a vision-language model."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentbridge.env import Task
from agentbridge.models import images_only_processor, is_vlm
from agentbridge.rollout.agent_edge import component_values, fit_limits, prompt_messages, reward_components
from agentbridge.rollout.renderer import Renderer
from agentbridge.rollout.training import episode_sample, task_prompt_ids
from agentbridge.trajectory import Limits, Trajectory

SPEC = Limits(max_turns=4, max_prompt_tokens=512, max_response_tokens=256, max_tokens_per_turn=48)


def test_fit_limits_takes_the_smaller_of_each_budget() -> None:
    assert fit_limits(SPEC) == SPEC
    assert fit_limits(SPEC, max_prompt=1024, max_response=1024, max_total=4096) == SPEC
    assert fit_limits(SPEC, max_prompt=300, max_response=100) == Limits(4, 300, 100, 48)
    assert fit_limits(SPEC, max_response=20) == Limits(4, 512, 20, 20)  # a turn never exceeds the response budget
    # a total: the response budget is what it leaves after the (already cut) prompt budget
    assert fit_limits(SPEC, max_total=600) == Limits(4, 512, 88, 48)
    assert fit_limits(SPEC, max_prompt=300, max_total=600) == Limits(4, 300, 256, 48)
    assert fit_limits(fit_limits(SPEC, max_total=540), max_total=540) == Limits(4, 512, 28, 28)  # idempotent


def test_fit_limits_is_one_rule_for_split_and_total_lengths() -> None:
    """veRL's prompt/response lengths and OpenRLHF's total of the same size give the same budgets."""
    for prompt, response in ((512, 256), (512, 100), (512, 30), (512, 1000)):
        assert fit_limits(SPEC, max_prompt=prompt, max_response=response) == fit_limits(
            SPEC, max_total=prompt + response), (prompt, response)


def test_fit_limits_refuses_a_total_with_no_room_for_a_response() -> None:
    with pytest.raises(ValueError, match="leaves no room for a response after max_prompt_tokens 512"):
        fit_limits(SPEC, max_total=512)


def test_prompt_messages() -> None:
    assert prompt_messages(None) == [] and prompt_messages("") == []
    assert prompt_messages("Be brief.") == [{"role": "system", "content": "Be brief."}]
    assert prompt_messages("Be brief.", "Add 2 and 3.") == [{"role": "system", "content": "Be brief."},
                                                            {"role": "user", "content": "Add 2 and 3."}]
    assert prompt_messages(None, "Add 2 and 3.") == [{"role": "user", "content": "Add 2 and 3."}]


def test_episode_sample_is_the_one_fallback(tiny_tokenizer: Any) -> None:
    renderer = Renderer(tiny_tokenizer)
    eos = renderer.eos_token_id
    task = Task(id="t", prompt="Add 2 and 3.")
    # failed before rendering: the task's prompt as the driver renders it, then one EOS with mask 0 and log-prob 0
    empty = episode_sample(Trajectory(task_id="t", prompt_ids=[]), task, renderer, "Be brief.")
    want = renderer.render_prompt(prompt_messages("Be brief.", "Add 2 and 3."))
    assert empty.prompt_ids == want == task_prompt_ids(renderer, task, "Be brief.")
    assert (empty.response_ids, empty.response_mask, empty.logprobs) == ([eos], [0], [0.0])
    # rendered its prompt, then failed: its own prompt
    rendered = episode_sample(Trajectory(task_id="t", prompt_ids=[5, 6]), task, renderer, "Be brief.")
    assert (rendered.prompt_ids, rendered.response_ids, rendered.response_mask) == ([5, 6], [eos], [0])
    # no task at hand: one EOS as the prompt too
    assert episode_sample(Trajectory(task_id="t", prompt_ids=[]), None, renderer).prompt_ids == [eos]
    # an episode with tokens is trained on as it is
    full = Trajectory(task_id="t", prompt_ids=[1, 2], response_ids=[3, 4, 5], response_mask=[1, 0, 1],
                      logprobs=[-0.5, 0.0, -0.25])
    seq = episode_sample(full, task, renderer)
    assert (seq.prompt_ids, seq.response_ids, seq.response_mask, seq.logprobs) == (
        [1, 2], [3, 4, 5], [1, 0, 1], [-0.5, 0.0, -0.25])


def test_reward_components_and_their_values(calculator_spec: Any) -> None:
    components = reward_components(calculator_spec)
    assert components == ["math/exact_answer", "core/format", "process"]
    traj = Trajectory(task_id="t", prompt_ids=[])
    traj.reward_components = {"math/exact_answer": 1.0, "process": 0.25}
    assert component_values(traj, components) == {"math/exact_answer": 1.0, "core/format": 0.0, "process": 0.25}
    # a dict-valued reward (id/key) counts under its id; components the spec does not name are not carried
    traj.reward_components = {"core/format/a": 0.5, "core/format/b": 0.25, "other": 3.0}
    assert component_values(traj, components) == {"math/exact_answer": 0.0, "core/format": 0.75, "process": 0.0}


def test_is_vlm_reads_no_model(tmp_path: Path) -> None:
    assert is_vlm("builtin:tiny-vl") and not is_vlm("builtin:tiny") and not is_vlm("builtin:tiny-qwen2.5")
    vl, text = tmp_path / "vl", tmp_path / "text"
    vl.mkdir()
    text.mkdir()
    (vl / "config.json").write_text(json.dumps({"model_type": "qwen2_vl", "vision_config": {"depth": 1}}))
    (text / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    assert is_vlm(vl) and is_vlm(str(vl)) and not is_vlm(text)
    assert is_vlm("Qwen/Qwen2.5-VL-3B-Instruct") and is_vlm("llava-hf/llava-1.5-7b-hf")
    assert not is_vlm("Qwen/Qwen2.5-3B-Instruct") and not is_vlm("Qwen/Qwen2.5-Coder-1.5B")


def test_images_only_processor_builds_without_a_video_processor() -> None:
    from agentbridge.models import load_image_processor, load_tokenizer

    tokenizer, images = load_tokenizer("builtin:tiny-vl"), load_image_processor("builtin:tiny-vl")
    processor = images_only_processor("qwen2_vl", tokenizer, images)
    assert type(processor).__name__ == "Qwen2VLProcessor"  # backends dispatch on the class name
    assert processor.image_processor is images and processor.tokenizer is tokenizer
    assert processor.chat_template == tokenizer.chat_template
    with pytest.raises(ValueError, match="no transformers processor is known for model type 'qwen2'"):
        images_only_processor("qwen2", tokenizer, images)


def test_split_and_total_lengths_run_the_same_golden_episodes() -> None:
    """The golden episodes under veRL-style lengths and under an OpenRLHF-style total of the same size: the same
    budgets, so the same tokens (a response budget below the spec's cuts the long turns)."""
    from dataclasses import replace

    from agentbridge.conformance.golden import GoldenPolicy
    from agentbridge.conformance.suite import golden_spec
    from agentbridge.rollout.agent import Agent

    agent = Agent.from_spec(golden_spec("text"))
    tasks = [t for t in agent.tasks("train") if t.id in ("tools", "truncation", "max_turns")]
    base = agent.limits
    runs = []
    for fitted in (fit_limits(base, max_prompt=512, max_response=96), fit_limits(base, max_total=512 + 96)):
        agent.limits = fitted
        trajs = asyncio.run(agent.run([replace(t) for t in tasks], GoldenPolicy(agent.tokenizer)))
        runs.append([(t.prompt_ids, t.response_ids, t.response_mask, t.finish_reason) for t in trajs])
    assert runs[0] == runs[1]
    assert max(len(response) for _, response, _, _ in runs[0]) <= 96
