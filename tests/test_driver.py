"""The rollout driver: token fidelity, budgets, failure isolation, concurrency."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agentbridge.env import Task
from agentbridge.rewards import RewardSet, WeightedReward, exact_answer
from agentbridge.rollout import Limits, Renderer, ScriptedPolicy, TemplateError, run_episode, run_episodes
from agentbridge.tools import ToolEnvironment, tool
from agentbridge.trajectory import Generation, SamplingParams


@tool
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: What to look up.
    """
    return f"value of {key} is {len(key) * 7}"


def call(name: str, args: dict[str, Any]) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


def make(tokenizer: Any, **limits: Any) -> tuple[ToolEnvironment, Renderer, Limits]:
    env = ToolEnvironment([lookup], timeout_s=1.0)
    return env, Renderer(tokenizer, tools=env.tool_schemas()), Limits(**limits)


def episode(tokenizer: Any, script: list[Any], **limits: Any) -> Any:
    env, renderer, lim = make(tokenizer, **limits)
    task = Task(id="t0", prompt="What is the value of abc?", data={"answer": "21"})
    rewards = RewardSet([WeightedReward("core/exact_answer", exact_answer, 1.0)])
    return asyncio.run(run_episode(ScriptedPolicy(tokenizer, script), env, task, renderer, lim,
                                   rewards=rewards, system_prompt="Use tools."))


SCRIPT = [call("lookup", {"key": "abc"}), call("lookup", {"key": "abcd"}) + "\n" + call("lookup", {"key": "x"}),
          "<answer>21</answer>"]


def test_token_fidelity_generated_ids_and_whole_conversation(qwen_tokenizer: Any) -> None:
    traj = episode(qwen_tokenizer, SCRIPT)
    assert traj.finish_reason == "done" and traj.reward == 1.0
    # ids with mask 1 are exactly what the policy generated, in order
    generated = [i for i, m in zip(traj.response_ids, traj.response_mask, strict=True) if m == 1]
    expected = [t for text in SCRIPT for t in qwen_tokenizer.encode(text, add_special_tokens=False)
                + [qwen_tokenizer.eos_token_id]]
    assert generated == expected
    # logprobs line up and are 0 where the env wrote
    assert len(traj.logprobs) == len(traj.response_ids)
    assert all(lp == 0.0 for lp, m in zip(traj.logprobs, traj.response_mask, strict=True) if m == 0)
    # prompt + response equals the template's rendering of the whole conversation (prefix-preserving Qwen2.5)
    convo = [{k: v for k, v in m.items() if k in ("role", "content")} for m in traj.messages]
    whole = qwen_tokenizer.apply_chat_template(convo, tools=[lookup.schema()], tokenize=False)
    whole_ids = qwen_tokenizer.encode(whole, add_special_tokens=False)
    assert whole_ids[-1] != qwen_tokenizer.eos_token_id  # the template adds "\n" after the last <|im_end|>
    assert traj.prompt_ids + traj.response_ids == whole_ids[:-1]


def test_masked_spans_are_the_templates_rendering_of_observations(qwen_tokenizer: Any) -> None:
    traj = episode(qwen_tokenizer, SCRIPT)
    spans, cur = [], []
    for tid, m in zip(traj.response_ids, traj.response_mask, strict=True):
        if m == 0:
            cur.append(tid)
        elif cur:
            spans.append(cur)
            cur = []
    assert len(spans) == 2
    first = qwen_tokenizer.decode(spans[0])
    assert first == ("\n<|im_start|>user\n<tool_response>\nvalue of abc is 21\n</tool_response><|im_end|>\n"
                     "<|im_start|>assistant\n")
    second = qwen_tokenizer.decode(spans[1])
    assert second.count("<tool_response>") == 2 and "value of abcd is 28" in second and "value of x is 7" in second


def test_tool_results_land_in_turns_and_metrics(qwen_tokenizer: Any) -> None:
    traj = episode(qwen_tokenizer, SCRIPT)
    assert [len(t.tool_calls) for t in traj.turns] == [1, 2, 0]
    assert traj.metrics["tools/calls"] == 3 and traj.metrics["tools/failures"] == 0
    assert traj.metrics["episode/turns"] == 3


@pytest.mark.parametrize("bad, needle", [
    ("<tool_call>\n{not json}\n</tool_call>", "not valid JSON"),
    (call("nope", {}), "unknown tool 'nope'"),
    (call("lookup", {"key": 5}), "argument 'key' must be string"),
    (call("lookup", {"wrong": "x"}), "missing required argument"),
    ("<tool_call>\n{\"name\": \"lookup\"", "not closed"),
])
def test_bad_tool_calls_become_error_observations(qwen_tokenizer: Any, bad: str, needle: str) -> None:
    traj = episode(qwen_tokenizer, [bad, "<answer>21</answer>"])
    assert traj.finish_reason == "done", traj.error
    observed = json.dumps([o["content"] for o in traj.turns[0].observations])
    assert needle in observed
    assert traj.metrics["tools/failures"] == 1
    assert traj.reward == 1.0  # the episode went on and was scored


def test_tool_that_raises_hangs_or_floods(qwen_tokenizer: Any) -> None:
    @tool
    def boom(x: int) -> str:
        """Raise."""
        raise RuntimeError("kaput")

    @tool
    async def hang(x: int) -> str:
        """Sleep forever."""
        await asyncio.sleep(60)
        return "never"

    @tool
    def flood(x: int) -> str:
        """Return megabytes."""
        return "z" * 3_000_000

    env = ToolEnvironment([boom, hang, flood], timeout_s=0.2, max_output_chars=1000)
    renderer = Renderer(qwen_tokenizer, tools=env.tool_schemas())
    script = [call("boom", {"x": 1}) + call("hang", {"x": 1}) + call("flood", {"x": 1}), "<answer>1</answer>"]
    traj = asyncio.run(run_episode(ScriptedPolicy(qwen_tokenizer, script), env, Task("t", "q"), renderer,
                                   Limits(max_response_tokens=4000)))
    contents = [o["content"] for o in traj.turns[0].observations]
    assert "kaput" in contents[0] and "timed out after 0.2s" in contents[1]
    assert len(contents[2]) < 1100 and "truncated" in contents[2]
    assert traj.metrics["tools/failures"] == 2 and traj.metrics["tools/truncated"] == 1
    assert traj.finish_reason == "done"


def test_budget_total_response_tokens(qwen_tokenizer: Any) -> None:
    many = [call("lookup", {"key": "abc"})] * 20
    traj = episode(qwen_tokenizer, many, max_turns=20, max_response_tokens=150, max_tokens_per_turn=60)
    assert traj.finish_reason == "length"
    assert len(traj.response_ids) <= 150
    assert len(traj.response_ids) == len(traj.response_mask) == len(traj.logprobs)


def test_budget_tokens_per_turn_cuts_and_ends_with_length(qwen_tokenizer: Any) -> None:
    traj = episode(qwen_tokenizer, ["word " * 50], max_tokens_per_turn=10, max_response_tokens=100)
    assert traj.finish_reason == "length"
    assert traj.response_mask == [1] * 10


def test_max_turns(qwen_tokenizer: Any) -> None:
    traj = episode(qwen_tokenizer, [call("lookup", {"key": "a"})] * 5, max_turns=3)
    assert traj.finish_reason == "max_turns" and len(traj.turns) == 3
    assert traj.response_ids[-1] == qwen_tokenizer.eos_token_id  # the unanswered observation is not appended


def test_prompt_over_budget_is_length(qwen_tokenizer: Any) -> None:
    traj = episode(qwen_tokenizer, SCRIPT, max_prompt_tokens=10)
    assert traj.finish_reason == "length" and "max_prompt_tokens" in (traj.error or "")


class CrashingEnv(ToolEnvironment):
    async def step(self, action: Any) -> Any:
        raise RuntimeError("env crashed")


def test_one_failing_episode_never_fails_the_others(qwen_tokenizer: Any) -> None:
    _, renderer, limits = make(qwen_tokenizer)
    tasks = [Task(f"t{i}", "What is abc?", {"answer": "21"}) for i in range(6)]
    tasks[3] = Task("t3", "FAIL", {"answer": "21"})

    class Policy:
        """Scripted, except that the engine dies on the prompt that says FAIL."""

        def __init__(self) -> None:
            self.inner = ScriptedPolicy(qwen_tokenizer, SCRIPT)

        async def generate(self, prompt_ids: list[int], sampling: SamplingParams, images: Any = None) -> Any:
            if "FAIL" in qwen_tokenizer.decode(prompt_ids):
                raise RuntimeError("engine died")
            return await self.inner.generate(prompt_ids, sampling)

    def make_env(task: Task) -> ToolEnvironment:
        if task.id == "t5":
            raise OSError("no browser")
        return CrashingEnv([lookup]) if task.id == "t1" else ToolEnvironment([lookup])

    rewards = RewardSet([WeightedReward("core/exact_answer", exact_answer)])
    trajs = asyncio.run(run_episodes(tasks, make_env, lambda env: Policy(), renderer, limits, rewards=rewards))
    errors = {t.task_id: t.error for t in trajs if t.finish_reason == "error"}
    assert set(errors) == {"t1", "t3", "t5"}
    assert "env crashed" in errors["t1"] and "engine died" in errors["t3"] and "no browser" in errors["t5"]
    assert all(t.reward == 1.0 for t in trajs if t.task_id in ("t0", "t2", "t4"))
    assert all(t.reward == 0.0 for t in trajs if t.task_id in errors)
    assert all(set(t.reward_components) == {"core/exact_answer", "process"} for t in trajs)


def test_concurrency_is_bounded(qwen_tokenizer: Any) -> None:
    env, renderer, limits = make(qwen_tokenizer)
    live = {"now": 0, "max": 0}

    class SlowPolicy:
        async def generate(self, prompt_ids: list[int], sampling: SamplingParams, images: Any = None) -> Generation:
            live["now"] += 1
            live["max"] = max(live["max"], live["now"])
            await asyncio.sleep(0.01)
            live["now"] -= 1
            ids = qwen_tokenizer.encode("<answer>1</answer>", add_special_tokens=False)
            return Generation(ids + [qwen_tokenizer.eos_token_id])

    tasks = [Task(f"t{i}", "q") for i in range(20)]
    trajs = asyncio.run(run_episodes(tasks, lambda t: ToolEnvironment([lookup]), SlowPolicy(), renderer, limits,
                                     concurrency=4))
    assert live["max"] == 4
    assert [t.task_id for t in trajs] == [f"t{i}" for i in range(20)]


def test_non_prefix_preserving_template_is_detected(qwen_tokenizer: Any) -> None:
    # a template that numbers every turn by the conversation length changes earlier tokens
    bad = ("{% for m in messages %}<|im_start|>{{ m.role }} {{ messages|length }}\n{{ m.content }}<|im_end|>\n"
           "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    renderer = Renderer(qwen_tokenizer, chat_template=bad)
    assert any("prefix-preserving" in p for p in renderer.check())
    with pytest.raises(TemplateError, match="prefix-preserving"):
        renderer.continuation([{"role": "tool", "content": "x"}])


def test_template_without_tool_calls_is_reported(qwen_tokenizer: Any) -> None:
    plain = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
             "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    problems = Renderer(qwen_tokenizer, tools=[lookup.schema()], chat_template=plain).check()
    assert any("tool calls" in p for p in problems) and any("tools list" in p for p in problems)
    assert Renderer(qwen_tokenizer, tools=[lookup.schema()]).check() == []
