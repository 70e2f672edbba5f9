"""Executor overhead per episode: agentbridge's OpenRLHF executor (A) vs OpenRLHF's own MultiTurnAgentExecutor (B).

Both run the same scripted calculator episodes (a tool call per step, then the answer) against the same
scripted engine (pre-tokenized turns: no model, no sampling), with the real Qwen2.5 tokenizer
(builtin:tiny-qwen2.5). B's AgentInstance is the equivalent hand-written OpenRLHF agent: it runs the same
CalculatorEnv (hermes parsing, the calculator tool), writes the tool result into the Qwen2.5 template text
itself, and scores the same rewards. The script asserts that A and B return the same tokens, action ranges and
rewards, then reports process CPU time per episode and the ratio A/B. Run in the OpenRLHF venv:

    .venv-openrlhf/bin/python bench/openrlhf_executor.py [--episodes 64] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import types
from typing import Any

import torch
from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

from agentbridge.env import Task, text_of
from agentbridge.models import load_tokenizer
from agentbridge.rewards import answer_format
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.parsers import HermesParser
from agentbridge.spec import load_spec
from agentbridge.trajectory import Trajectory, Turn
from agentbridge_math.env import CalculatorEnv, exact_number
from agentbridge_math.tasks import eval_int
from agentbridge_openrlhf.rollout import AgentbridgeExecutor

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "%s"}}\n</tool_call>'
SETS = ["model.path=builtin:tiny-qwen2.5", "algorithm.name=grpo", "agent.max_turns=4"]


def script(task: Task) -> list[str]:
    """The expert's turns for a task: one calculator call per step, then the answer."""
    results: list[str] = []
    turns = []
    for step in task.data["steps"]:
        expression = step.format(prev=results[-1] if results else "")
        turns.append(CALL % expression)
        results.append(str(eval_int(expression)))
    return [*turns, f"<answer>{results[-1]}</answer>"]


class ScriptedEngine:
    """Duck-types OpenRLHF's RolloutRayActor.generate with pre-tokenized turns (EOS-terminated)."""

    def __init__(self, turns: list[list[int]], texts: list[str]) -> None:
        self.turns, self.texts, self.calls = turns, texts, 0

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> Any:
        i = min(self.calls, len(self.turns) - 1)
        self.calls += 1
        out = types.SimpleNamespace(token_ids=self.turns[i], text=self.texts[i], finish_reason="stop", logprobs=None)
        return types.SimpleNamespace(outputs=[out])


class CalculatorInstance(AgentInstanceBase):
    """The equivalent hand-written OpenRLHF agent: same env, same rewards, template text written by hand."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.env = CalculatorEnv()
        self.parser = HermesParser()
        self.turns = 0

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        self.task = Task.from_dict(json.loads(states["label"]))
        await self.env.reset(self.task)
        return {"observation": states["observation"]}

    async def step(self, states: dict, **kwargs: Any) -> dict:
        self.turns += 1
        text = states["action_text"].removesuffix("<|im_end|>")
        parsed = self.parser.parse(text)
        action: dict[str, Any] = {"role": "assistant", "content": text}
        if parsed.tool_calls:
            action["tool_calls"] = parsed.tool_calls
        result = await self.env.step(action)
        if result.done or self.turns >= 4:
            traj = Trajectory(task_id=self.task.id, prompt_ids=[], turns=[Turn(text=text)])
            reward = exact_number(traj, self.task) + 0.1 * answer_format(traj, self.task) + result.reward
            return {"rewards": torch.tensor(reward), "environment_feedback": "", "done": True}
        body = "\n".join(f"<tool_response>\n{text_of(m)}\n</tool_response>" for m in result.observation)
        feedback = f"\n<|im_start|>user\n{body}<|im_end|>\n<|im_start|>assistant\n"
        return {"rewards": torch.tensor(result.reward), "environment_feedback": feedback, "done": False}


class BaselineExecutor(MultiTurnAgentExecutor):
    def __init__(self) -> None:
        super().__init__(CalculatorInstance)


def sampling() -> Any:
    return types.SimpleNamespace(max_tokens=None, logprobs=None, temperature=1.0, top_p=1.0)


async def run_all(executor: Any, cases: list[dict[str, Any]], tok: Any, max_len: int, batch: int) -> list[dict]:
    """Like RolloutRayActor.generate_responses: `batch` execute() calls at a time with asyncio.gather."""
    out: list[dict] = []
    for i in range(0, len(cases), batch):
        chunk = cases[i:i + batch]
        out += await asyncio.gather(*(executor.execute(
            prompt=c["prompt"], label=c["label"], sampling_params=sampling(), max_length=max_len, hf_tokenizer=tok,
            llm_engine=ScriptedEngine(c["turns"], c["texts"])) for c in chunk))
    return out


def timed(executor: Any, cases: list[dict[str, Any]], tok: Any, max_len: int, batch: int) -> tuple[float, list]:
    t0 = time.process_time()
    results = asyncio.run(run_all(executor, cases, tok, max_len, batch))
    return (time.process_time() - t0) / len(cases), results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch", type=int, default=8, help="execute() calls in flight (n_samples_per_prompt)")
    ns = p.parse_args()
    spec = load_spec("examples/calculator.yaml", SETS)
    tok = load_tokenizer(spec.model.path)
    agent = Agent(spec, tok)
    tasks = agent.tasks("train", ns.episodes)
    max_len = spec.agent.max_prompt_tokens + spec.agent.max_response_tokens
    cases = []
    for task in tasks:
        texts = script(task)
        turns = [tok.encode(t, add_special_tokens=False) + [tok.eos_token_id] for t in texts]
        messages = [{"role": "system", "content": spec.agent.system_prompt}, {"role": "user", "content": task.prompt}]
        prompt = agent.renderer.render_text(messages, add_generation_prompt=True)  # B gets A's prompt text
        cases.append({"prompt": prompt, "label": json.dumps(task.to_dict()), "turns": turns,
                      "texts": [tok.decode(t) for t in turns]})
    a_exec, b_exec = AgentbridgeExecutor(spec), BaselineExecutor()
    _, a_res = timed(a_exec, cases, tok, max_len, ns.batch)  # warm-up + equivalence check
    _, b_res = timed(b_exec, cases, tok, max_len, ns.batch)
    for a, b in zip(a_res, b_res, strict=True):
        assert a["observation_tokens"] == b["observation_tokens"], "A and B built different token sequences"
        assert [tuple(r) for r in a["action_ranges"]] == [tuple(r) for r in b["action_ranges"]]
        assert abs(a["reward"] - b["reward"]) < 1e-6, (a["reward"], b["reward"])
    a_times, b_times = [], []
    for _ in range(ns.repeats):
        a_times.append(timed(a_exec, cases, tok, max_len, ns.batch)[0])
        b_times.append(timed(b_exec, cases, tok, max_len, ns.batch)[0])
    a_med, b_med = statistics.median(a_times), statistics.median(b_times)
    turns = statistics.mean(len(r["action_ranges"]) for r in a_res)
    tokens = statistics.mean(len(r["observation_tokens"]) for r in a_res)
    rewards = statistics.mean(r["reward"] for r in a_res)
    print(f"episodes={len(cases)} repeats={ns.repeats} batch={ns.batch} mean turns={turns:.2f} "
          f"mean tokens={tokens:.0f} mean reward={rewards:.3f}; A and B outputs identical")
    print(f"A agentbridge executor:   {a_med * 1e6:8.0f} us/episode  (runs {[round(x * 1e6) for x in a_times]})")
    print(f"B OpenRLHF MultiTurnAgent: {b_med * 1e6:8.0f} us/episode  (runs {[round(x * 1e6) for x in b_times]})")
    print(f"ratio A/B = {a_med / b_med:.2f}")


if __name__ == "__main__":
    main()
