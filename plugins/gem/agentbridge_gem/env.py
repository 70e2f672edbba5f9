"""A GEM environment as an agentbridge environment: ``gem.make(env_id)`` in a GEM worker (GEM's own venv), reset
with the task's seed, the model's text to ``env.step``.

What the model sees is what GEM gives it: the reset observation as the first user message, each step's
observation as the next message (``role: tool`` where GEM marks it a tool result, ``info["use_tool"]``, as GEM's
``concat_chat`` wrapper renders it; ``user`` otherwise), each followed by GEM's ``info["suffix"]`` (the current
board or the "Enter your next guess." line) the way GEM's observation wrappers append it. The step's reward is
GEM's reward (the driver's ``process`` component), ``terminated or truncated`` ends the episode. GEM's tool
wrappers (``python_tool``, ``search_tool``, ...) run in the worker: the model writes ``<python>...</python>`` as
GEM's instructions say, and each tool use is counted in ``tools/calls`` (``tools/failures`` when it errs).
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentbridge import Message, StepResult, Task, Trajectory, text_of
from agentbridge_gem.client import Worker, pool


def with_suffix(obs: str, info: dict[str, Any]) -> str:
    """GEM's observation text as its wrappers show it: ``info["prefix"]`` + the observation (newline-ended) +
    ``info["suffix"]``."""
    suffix = info.get("suffix")
    text = obs
    if suffix:
        text = (obs if not obs or obs.endswith("\n") else obs + "\n") + str(suffix)
    prefix = info.get("prefix")
    return f"{prefix}{text}" if prefix else text


class GemEnvironment:
    """One GEM env per episode, in a worker process of GEM's venv.

    ``env_id``: a GEM env id (``game:GuessTheNumber-v0-easy``, ``game:Sudoku-v0-easy``, ``rg:leg_counting``, ...;
    ``gem.print_envs()`` lists them); ``env_kwargs``: passed to ``gem.make``; ``wrappers``: GEM tool wrappers
    (names in ``gem.wrappers.wrapper_factory.WRAPPER_FACTORY`` with ``tool`` in them). ``template``: wraps the
    first observation, ``{observation}`` standing for GEM's text (e.g. GEM's ``qwen3_game`` prompt wording).
    ``python``: GEM's interpreter (default ``$AGENTBRIDGE_GEM_PYTHON``, else ``.venv-gem`` made by
    ``plugins/gem/gem_env.sh``); ``workers``: worker processes shared by the process's episodes. ``in_thread``:
    wait for a step's reply in a worker thread, so other episodes keep generating meanwhile; by default only with
    tool wrappers (a tool runs for milliseconds to seconds; a game step's round trip is a fraction of a millisecond,
    less than the thread hop).
    """

    def __init__(self, env_id: str = "game:GuessTheNumber-v0-easy", env_kwargs: dict[str, Any] | None = None,
                 wrappers: list[str] | None = None, template: str | None = None, python: str | None = None,
                 workers: int = 1, in_thread: bool | None = None, tools: Any = None) -> None:
        if ":" not in env_id:
            raise ValueError(f"environment.args.env_id: {env_id!r} is not a GEM env id (they read KIND:NAME, e.g. "
                             "game:GuessTheNumber-v0-easy or rg:leg_counting)")
        if template is not None and "{observation}" not in template:
            raise ValueError("environment.args.template: needs {observation} where GEM's observation goes")
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.wrappers = list(wrappers or [])
        self.template = template
        self.python = python
        self.workers = workers
        self.in_thread = bool(self.wrappers) if in_thread is None else in_thread
        self.worker: Worker | None = None
        self.session: str | None = None
        self.tool_successes = 0
        self.task: Task | None = None

    def _open(self) -> tuple[Worker, str]:
        worker = pool(self.python, self.workers).worker()
        reply = worker.request("make", env_id=self.env_id, kwargs=self.env_kwargs, wrappers=self.wrappers)
        return worker, str(reply["session"])

    async def reset(self, task: Task) -> list[Message]:
        await self.close()
        self.task = task
        worker, session = await asyncio.to_thread(self._open)
        self.worker, self.session = worker, session
        seed = task.data.get("seed")
        reply = await asyncio.to_thread(worker.request, "reset", session=session,
                                        seed=None if seed is None else int(seed))
        info = reply.get("info") or {}
        self.tool_successes = int(info.get("tool_success_counter") or 0)
        text = with_suffix(reply["obs"], info)
        if self.template is not None:
            text = self.template.replace("{observation}", text)
        return [{"role": "user", "content": text}]

    async def step(self, action: Message) -> StepResult:
        assert self.worker is not None and self.session is not None, "step() before reset()"
        fields = {"session": self.session, "action": text_of(action)}
        reply = (await asyncio.to_thread(self.worker.request, "step", **fields) if self.in_thread
                 else self.worker.request("step", **fields))
        reward = float(reply["reward"])
        done = bool(reply["terminated"] or reply["truncated"])
        info = reply.get("info") or {}
        metrics = {"gem/reward": reward}
        if info.get("tool_type"):  # GEM's tool wrapper ran a tool on this action
            successes = int(info.get("tool_success_counter") or 0)
            metrics["tools/calls"] = 1.0
            metrics["tools/failures"] = float(successes <= self.tool_successes)
            self.tool_successes = successes
        if done:
            metrics.update({"gem/done": 1.0, "gem/final_reward": reward, "gem/truncated": float(reply["truncated"])})
            return StepResult(observation=[], reward=reward, done=True, metrics=metrics)
        role = "tool" if info.get("use_tool") else "user"
        return StepResult(observation=[{"role": role, "content": with_suffix(reply["obs"], info)}], reward=reward,
                          metrics=metrics)

    def expert_action(self) -> str:
        """The worker's expert for this env (binary search on Guess The Number, the reference answer of a
        reasoning-gym question), in GEM's ``\\boxed{}`` answer format."""
        assert self.worker is not None and self.session is not None, "expert_action() before reset()"
        return str(self.worker.request("expert", session=self.session)["action"])

    async def close(self) -> None:
        worker, session, self.worker, self.session = self.worker, self.session, None, None
        if worker is not None and session is not None and worker.alive:
            await asyncio.to_thread(worker.request, "close", session=session)


def success(trajectory: Trajectory, task: Any, at: float = 1.0) -> float:
    """1.0 when the episode ended on a GEM reward of at least ``at`` (GEM's success reward is 1.0: a won game, a
    correct answer; GEM's own trainer counts success the same way)."""
    m = trajectory.metrics
    return float(m.get("gem/done", 0.0) > 0 and m.get("gem/final_reward", 0.0) >= at)


def final_reward(trajectory: Trajectory, task: Any) -> float:
    """GEM's reward of the step that ended the episode (0 when it did not end)."""
    m = trajectory.metrics
    return float(m.get("gem/final_reward", 0.0)) if m.get("gem/done") else 0.0


def episode_return(trajectory: Trajectory, task: Any) -> float:
    """The sum of GEM's rewards over the episode (already the driver's ``process`` component: weigh this one only
    when the process reward is not also counted)."""
    return float(trajectory.metrics.get("gem/reward", 0.0))
