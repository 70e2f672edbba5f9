"""The agent a spec describes, resolved against the registries: env factory, tools, rewards, renderer, data.

Every backend adapter builds one ``Agent`` and runs episodes through it with the backend's own generator.
"""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentbridge.datasets import build_split
from agentbridge.env import Environment, Task
from agentbridge.plugins import PluginError, Plugins, get_plugins
from agentbridge.rewards import RewardFn, RewardSet, WeightedReward
from agentbridge.rollout.driver import run_episodes
from agentbridge.rollout.policy import Policy
from agentbridge.rollout.recording import (
    Recording,
    RecordingEnvironment,
    RecordingWriter,
    ReplayEnvironment,
    recording_reward,
    replay_reward,
)
from agentbridge.rollout.renderer import Renderer
from agentbridge.spec.schema import DatasetSpec, Spec
from agentbridge.trajectory import Limits, SamplingParams, Trajectory


def check_ids(spec: Spec, plugins: Plugins | None = None) -> list[str]:
    """Every id in the spec that no plugin registered, and listed tools the environment would not run, one line
    each (no model or torch needed)."""
    from agentbridge.spec.load import unused_tools_problem

    plugins = plugins or get_plugins()
    problems: list[str] = []

    def need(kind: str, id: str, where: str) -> None:
        if id not in plugins.registries[kind]:
            problems.append(f"{where}: {plugins.registries[kind].unknown(id)}")

    need("environments", spec.environment.id, "environment.id")
    for i, name in enumerate(spec.tools):
        need("tools", name, f"tools[{i}]")
    if spec.environment.id in plugins.environments:
        unused = unused_tools_problem(spec.environment.id, plugins.environments.get(spec.environment.id), spec.tools)
        if unused is not None:
            problems.append(f"tools: {unused}")
    for i, reward in enumerate(spec.reward):
        need("rewards", reward.id, f"reward[{i}].id")
    need("tool_parsers", spec.model.tool_call_format, "model.tool_call_format")
    for split in ("train", "eval", "dev"):
        ds = getattr(spec.data, split)
        if ds is not None and ds.id is not None:
            need("datasets", ds.id, f"data.{split}.id")
        if ds is not None and ds.path is not None and not Path(ds.path).is_file():
            problems.append(f"data.{split}.path: no such file '{ds.path}'")
    return problems


def load_chat_template(name_or_path: str) -> str:
    """A template file's text, or a vendored template by name (``qwen2_5``, ``qwen2_5_vl``, ``qwen2_5_vl_tools``)."""
    path = Path(name_or_path)
    if path.is_file():
        return path.read_text(encoding="utf-8")
    vendored = importlib.resources.files("agentbridge") / "templates" / f"{name_or_path}.jinja"
    if vendored.is_file():
        return vendored.read_text(encoding="utf-8")
    raise ValueError(f"model.chat_template: '{name_or_path}' is neither a file nor a vendored template "
                     "(qwen2_5, qwen2_5_vl, qwen2_5_vl_tools)")


def read_tasks_jsonl(path: str | Path) -> list[Task]:
    """Tasks from a JSONL file of ``{"id", "prompt", "data"}`` rows; a bad row is one line naming it."""
    tasks = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            tasks.append(Task.from_dict(row))
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{path}:{n}: not a task row ({type(e).__name__}: {e}); "
                             'expected {"id": ..., "prompt": ..., "data": {...}}') from None
    return tasks


def load_tasks(spec: Spec, split: str = "train", size: int | None = None,
               plugins: Plugins | None = None) -> list[Task]:
    """The train, eval or dev tasks named in ``spec.data`` (empty when that split is not set)."""
    ds: DatasetSpec | None = getattr(spec.data, split)
    if ds is None:
        return []
    if ds.path is not None:
        tasks = read_tasks_jsonl(ds.path)
    else:
        assert ds.id is not None  # a DatasetSpec has exactly one of path and id
        tasks = build_split(ds, split, plugins or get_plugins(), size)
    return tasks[:size] if size else tasks


class Agent:
    """A spec resolved into runnable parts. Build with ``Agent.from_spec(spec, tokenizer)``."""

    def __init__(self, spec: Spec, tokenizer: Any, plugins: Plugins | None = None) -> None:
        self.spec = spec
        self.plugins = plugins or get_plugins()
        problems = check_ids(spec, self.plugins)
        if problems:
            raise PluginError(problems[0])
        self.tokenizer = tokenizer
        self.env_factory = self.plugins.environments.get(spec.environment.id)
        self.tools = [self.plugins.tools.get(t) for t in spec.tools]
        self.parser = self.plugins.tool_parsers.get(spec.model.tool_call_format)
        # environment.record / environment.replay: every environment output and reward score written / served back
        self.recorder = RecordingWriter(spec.environment.record) if spec.environment.record else None
        self.recording = Recording(spec.environment.replay) if spec.environment.replay else None
        self.rewards = RewardSet([WeightedReward(r.id, self._reward_fn(r.id), r.weight, r.args or None, r.per)
                                  for r in spec.reward])
        a = spec.agent
        self.limits = Limits(max_turns=a.max_turns, max_prompt_tokens=a.max_prompt_tokens,
                             max_response_tokens=a.max_response_tokens, max_tokens_per_turn=a.max_tokens_per_turn)
        self.sampling = SamplingParams(temperature=a.sampling.temperature, top_p=a.sampling.top_p,
                                       top_k=a.sampling.top_k, max_tokens=a.max_tokens_per_turn, seed=spec.seed)
        if self.recording is not None:  # the prompt as recorded, without the live environment
            schemas = self.recording.tool_schemas()
        else:
            probe = self.live_env()
            schemas = probe.tool_schemas() if hasattr(probe, "tool_schemas") else [t.schema() for t in self.tools]
            if self.recorder is not None:
                self.recorder.put_tools(schemas)
        template = load_chat_template(spec.model.chat_template) if spec.model.chat_template else None
        self.renderer = Renderer(tokenizer, tools=schemas, chat_template=template)

    @classmethod
    def from_spec(cls, spec: Spec, tokenizer: Any = None) -> Agent:
        """Resolve ``spec``; loads the spec's tokenizer (``model.path``) when none is given."""
        if tokenizer is None:
            from agentbridge.models import load_tokenizer

            tokenizer = load_tokenizer(spec.model.path)
        return cls(spec, tokenizer)

    def make_env(self, task: Task | None = None) -> Environment:
        """An episode's environment: the live one (recording it under ``environment.record``), or the recording
        of ``environment.replay`` served back."""
        if self.recording is not None:
            return ReplayEnvironment(self.recording)
        env = self.live_env(task)
        return env if self.recorder is None else RecordingEnvironment(env, self.recorder)

    def live_env(self, task: Task | None = None) -> Environment:
        """The spec's environment itself, neither recorded nor replayed."""
        kwargs = dict(self.spec.environment.args)
        if self.tools:
            kwargs["tools"] = self.tools
        return self.env_factory(**kwargs)

    def _reward_fn(self, id: str) -> RewardFn:
        """The registered reward ``id``, recorded or replayed when the spec says so."""
        if self.recording is not None:
            return replay_reward(id, self.recording)
        fn = self.plugins.rewards.get(id)
        return fn if self.recorder is None else recording_reward(id, fn, self.recorder)

    def tasks(self, split: str = "train", size: int | None = None) -> list[Task]:
        """The train, eval or dev tasks named in ``data``."""
        if getattr(self.spec.data, split) is None:
            raise ValueError(f"data.{split} is not set in the spec")
        return load_tasks(self.spec, split, size, self.plugins)

    async def run(self, tasks: Sequence[Task], policy: Policy | Callable[[Environment], Policy], *,
                  concurrency: int = 32, on_done: Callable[[Trajectory], Any] | None = None,
                  sampling: SamplingParams | None = None) -> list[Trajectory]:
        """Run one episode per task with the driver; rewards included; order kept."""
        hook = self.plugins.hook.on_episode_end

        def done(traj: Trajectory) -> None:
            hook(trajectory=traj)
            if on_done is not None:
                on_done(traj)

        return await run_episodes(tasks, self.make_env, policy, self.renderer, self.limits,
                                  concurrency=concurrency, on_done=done, sampling=sampling or self.sampling,
                                  parser=self.parser, rewards=self.rewards,
                                  system_prompt=self.spec.agent.system_prompt)
