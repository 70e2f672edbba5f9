"""The RL guard's toy task: a gap between imitation and the task that only the reward can close.

Each task is a door to unlock with the ``unlock()`` tool before answering ``done``; the reward (``guard/unlocked``)
is 1 when the episode did both. The scripted expert is imperfect as the main job's calculator expert is: on
``forgets`` of the tasks (a hash of the prompt, so the choice looks random from its wording) it answers at once,
without the tool. Its demonstrations are imitated whole, the forgetful ones included, so a policy that imitates it
skips the tool on about that share of the tasks, whatever it learns; only the reward can raise its chance of calling
the tool. The skills imitation must teach — a constant tool call, then a constant answer — take the built-in tiny
model a few dozen SFT steps (the calculator's copying of operands takes hundreds), which keeps the guard fast.

Registered in-process as a plugin (``Plugins(extra=[("rl-guard", rl_guard_task)])``): environment and dataset
``guard/door``, reward ``guard/unlocked``.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from typing import Any

from agentbridge.env import Task
from agentbridge.hooks import hookimpl
from agentbridge.rewards import extract_answer
from agentbridge.tools import ToolEnvironment, tool


def forgets(prompt: str, rate: float) -> bool:
    """Whether the expert answers this task without the tool: fixed per prompt, random-looking across prompts."""
    band = int.from_bytes(hashlib.sha256(f"forgets:{prompt}".encode()).digest()[:4], "big") / 2**32
    return band < rate


class DoorEnv(ToolEnvironment):
    """One door per task; ``unlock()`` opens it; the episode ends at the first reply without a tool call."""

    def __init__(self, forgets: float = 0.5, **kwargs: Any) -> None:
        super().__init__([tool(self.unlock)], **kwargs)
        self.forgets = forgets
        self.unlocked = False

    async def reset(self, task: Task) -> list[Any]:
        self.unlocked = False
        return await super().reset(task)

    def unlock(self) -> str:
        """Unlock the door."""
        self.unlocked = True
        return "unlocked"

    def expert_action(self) -> str:
        assert self.task is not None
        if self.unlocked or forgets(self.task.prompt, self.forgets):
            return "<answer>done</answer>"
        return f"<tool_call>\n{json.dumps({'name': 'unlock', 'arguments': {}})}\n</tool_call>"


def unlocked(trajectory: Any, task: Task) -> float:
    """1 when the episode called ``unlock`` and then answered ``done``."""
    called = any(c["function"]["name"] == "unlock" for turn in trajectory.turns for c in turn.tool_calls)
    return float(called and extract_answer(trajectory.final_text) == "done")


def door_tasks(split: str = "train", size: int = 64, seed: int = 0, **_: Any) -> list[Task]:
    """``size`` doors of ``split``; door numbers of one split never occur in another."""
    offset = {"train": 0, "dev": 1, "eval": 2}[split]
    rng = random.Random(f"door-{seed}-{split}")
    return [Task(id=f"door-{split}-{seed}-{i}", prompt=f"Door {door}.")
            for i, door in enumerate(rng.sample(range(1000 + offset, 10000, 3), size))]


@hookimpl
def register_environments(register: Callable[[str, Any], None]) -> None:
    register("guard/door", DoorEnv)


@hookimpl
def register_datasets(register: Callable[[str, Any], None]) -> None:
    register("guard/door", door_tasks)


@hookimpl
def register_rewards(register: Callable[[str, Any], None]) -> None:
    register("guard/unlocked", unlocked)


SPEC = """
name: rl-guard
model: {path: "builtin:tiny", tool_call_format: hermes}
agent:
  system_prompt: "Unlock the door, then answer <answer>done</answer>."
  max_turns: 3
  max_prompt_tokens: 384
  max_response_tokens: 96
  max_tokens_per_turn: 24
  sampling: {temperature: 1.0, top_p: 1.0}
environment: {id: guard/door, args: {forgets: 0.5}}
tools: []
reward: [{id: guard/unlocked, weight: 1.0}]
data:
  train: {id: guard/door, split: train, size: 512, seed: 0}
  dev: {id: guard/door, split: dev, size: 32, seed: 0}
algorithm:
  name: dapo
  group_size: 8
  batch_size: 4
  lr: 1.0e-3
  warmup_steps: 0
  kl_coef: 0.0
  steps: 4
  warm_start: {demos: 512, lr: 3.0e-3, batch_size: 16, control: false}   # steps: test_rl_guard.WARM_STEPS
resources: {nodes: 1, gpus_per_node: 0}
backend: {name: trl, options: {save_steps: 0}}
seed: 0
"""


def probe(model: Any, trajs: list[Any]) -> dict[str, float]:
    """Exact statistics of ``model`` on fixed tool-using episodes (teacher-forced, no sampling): ``tool``, the mean
    chance of opening with a tool call; ``policy``, the mean log-prob of the policy's own tokens; ``env``, the mean
    log-prob of the environment's tokens (the tool's answer and the chat template around it)."""
    import torch

    rows = [t.prompt_ids + t.response_ids for t in trajs]
    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits.float()
    model.train(was_training)
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    tool, policy, env, answer = [], [], [], []
    for i, t in enumerate(trajs):
        start = len(t.prompt_ids) - 1  # logp[:, j] scores token j + 1
        own = logp[i, start:start + len(t.response_ids)].tolist()
        tool.append(float(torch.tensor(own[0]).exp()))
        policy += [x for x, m in zip(own, t.response_mask, strict=True) if m]
        env += [x for x, m in zip(own, t.response_mask, strict=True) if not m]
        last_env = max(j for j, m in enumerate(t.response_mask) if not m)
        answer.append(sum(own[last_env + 1:]))
    return {"tool": sum(tool) / len(tool), "policy": sum(policy) / len(policy), "env": sum(env) / len(env),
            "answer": sum(answer) / len(answer)}


def expert_rows(agent: Any, n: int) -> list[dict[str, Any]]:
    """SFT rows of ``n`` expert episodes on train tasks, the ones where it forgot the tool (reward 0) included:
    imitation must learn to skip the tool as often as the expert does."""
    import asyncio

    from agentbridge.rollout.policy import ScriptedPolicy
    from agentbridge.training.warm_start import sft_rows

    trajs = asyncio.run(agent.run(agent.tasks("train", size=n), ScriptedPolicy.expert_factory(agent)))
    return sft_rows([t for t in trajs if t.finish_reason == "done"])
