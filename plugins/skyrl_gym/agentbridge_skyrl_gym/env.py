"""A SkyRL-gym environment as an agentbridge environment, the way SkyRL's own generator drives it.

Per episode: ``skyrl_gym.make(env_class, env_config=..., extras=row)`` with the task's SkyRL dataset row (every
column but ``prompt`` and ``env_class``, as SkyRL passes them), ``env.init(prompt)`` for the first messages, then
each assistant turn's text goes to ``env.step(text)`` unchanged: the env parses its own tags (``<sql>``,
``<search>``, ``<tool>``, ``####``) and runs its own tool groups. The messages it returns are the next observation
(roles and contents as SkyRL gives them), its reward is the step's reward (the driver's ``process`` component) and
its ``done`` ends the episode.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from agentbridge import Message, StepResult, Task, Trajectory, text_of
from agentbridge_skyrl_gym.tasks import SQL_SOURCE, ensure_database


def registered_envs() -> list[str]:
    """SkyRL-gym's registered env names (``skyrl_gym.registry``)."""
    import skyrl_gym

    return sorted(skyrl_gym.registry)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        try:
            return _number(item())
        except (TypeError, ValueError):
            return None
    return None


class SkyRLGymEnv:
    """One SkyRL-gym env per episode.

    ``env_class``: a SkyRL-gym env name (``gsm8k``, ``gsm8k_multi_turn``, ``text2sql``, ``aime``, ``search``,
    ``lcb``, ``searchcode``, or any registered with ``skyrl_gym.register``); a task row's own ``env_class`` column
    takes precedence, as in SkyRL. ``env_config``: the env's config (SkyRL's ``environment.skyrl_gym.<env_class>``
    section, e.g. ``{db_path: ...}`` for text2sql, ``{search_url: ...}`` for search), given to the env as an
    OmegaConf ``DictConfig``. ``max_turns``: put in the env's extras as SkyRL's generator does (set it to the spec's
    ``agent.max_turns``); unset, the row's or the env's own default holds. ``in_thread``: run ``env.step`` in a
    worker thread, so other episodes keep generating while a tool blocks (SQL, HTTP search, code execution); by
    default on for every env but the ones that only score text with a regex (``INLINE``), where a thread would cost
    more than the step.
    """

    INLINE = frozenset({"gsm8k", "gsm8k_multi_turn", "aime"})

    def __init__(self, env_class: str = "gsm8k", env_config: dict[str, Any] | None = None,
                 max_turns: int | None = None, in_thread: bool | None = None, tools: Any = None) -> None:
        known = registered_envs()
        if env_class not in known:
            raise ValueError(f"environment.args.env_class: no SkyRL-gym env {env_class!r} "
                             f"(registered: {', '.join(known)})")
        self.env_class = env_class
        self.env_config = dict(env_config or {})
        self.max_turns = max_turns
        self.in_thread = in_thread
        self.threaded = True
        self.env: Any = None
        self.row: dict[str, Any] = {}
        self.turns = 0

    def _config(self, env_class: str) -> Any:
        from omegaconf import OmegaConf

        config = dict(self.env_config)
        if env_class == "text2sql":  # SkyRL's Text2SQLEnvConfig default points at its cluster's path
            config.setdefault("db_path", ".agentbridge/skyrl-sql")
        return OmegaConf.create(config)

    async def reset(self, task: Task) -> list[Message]:
        import skyrl_gym

        await self.close()
        row = task.data.get("skyrl")
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), list):
            raise ValueError(f"task {task.id}: no SkyRL dataset row in task.data['skyrl'] (build tasks with "
                             "skyrl/rows, skyrl/arithmetic or skyrl/sql)")
        self.row, self.turns = row, 0
        env_class = str(row.get("env_class") or self.env_class)
        extras = {k: copy.deepcopy(v) for k, v in row.items() if k not in ("prompt", "env_class")}
        if self.max_turns is not None:
            extras["max_turns"] = self.max_turns
        config = self._config(env_class)
        if row.get("data_source") == SQL_SOURCE:  # our generated databases: made on this machine if missing
            ensure_database(str(config.db_path), str(row["db_id"]))
        self.threaded = self.in_thread if self.in_thread is not None else env_class not in self.INLINE
        self.env = skyrl_gym.make(env_class, env_config=config, extras=extras)
        chat, _ = self.env.init(copy.deepcopy(row["prompt"]))
        return [self._message(m) for m in chat]

    @staticmethod
    def _message(m: Any) -> Message:
        out: Message = {"role": str(m["role"]), "content": m.get("content") or ""}
        return out

    async def step(self, action: Message) -> StepResult:
        assert self.env is not None, "step() before reset()"
        text = text_of(action)
        out = await asyncio.to_thread(self.env.step, text) if self.threaded else self.env.step(text)
        self.turns += 1
        reward = float(out.get("reward") or 0.0)
        done = bool(out.get("done"))
        metrics = {"skyrl/reward": reward}
        meta = out.get("metadata") or {}
        if meta.get("tool_name"):
            metrics["tools/calls"] = 1.0
        if out.get("postprocessed_action") is not None:  # SkyRL would re-tokenize the turn; the driver keeps it
            metrics["skyrl/postprocessed_actions"] = 1.0
        if done:
            metrics["skyrl/done"] = 1.0
            metrics["skyrl/final_reward"] = reward
            for key, value in (self.env.get_metrics() or {}).items():
                number = _number(value)
                if number is not None:
                    metrics[f"skyrl/{key}"] = number
            return StepResult(observation=[], reward=reward, done=True, metrics=metrics)
        observation = [self._message(m) for m in out.get("observations") or []]
        return StepResult(observation=observation, reward=reward, done=False, metrics=metrics)

    def expert_action(self) -> str:
        """The reference answer in the env's own format (gsm8k's ``#### N``, text2sql's ``<sql>`` then
        ``<solution>``, aime's ``\\boxed{}``), for the scripted policy and warm starts."""
        assert self.env is not None, "expert_action() before reset()"
        env_class = str(self.row.get("env_class") or self.env_class)
        spec = self.row.get("reward_spec") or self.row.get("reward_model") or {}
        truth = spec.get("ground_truth")
        if env_class in ("gsm8k", "gsm8k_multi_turn"):
            return f"#### {truth}"
        if env_class == "aime":
            return f"\\boxed{{{truth}}}"
        if env_class == "text2sql":
            if self.turns == 0:
                return f"<think>Run the query.</think>\n<sql>{truth}</sql>"
            return f"<think>It answers the question.</think>\n<solution>{truth}</solution>"
        raise ValueError(f"no scripted expert for SkyRL-gym env {env_class!r} (experts: gsm8k, gsm8k_multi_turn, "
                         "aime, text2sql)")

    async def close(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            env.close()


def final_reward(trajectory: Trajectory, task: Any) -> float:
    """The env's reward of the step that ended the episode (0 when it did not end): the outcome reward of SkyRL's
    envs that only score the last turn (text2sql, search, gsm8k)."""
    return float(trajectory.metrics.get("skyrl/final_reward", 0.0)) if trajectory.metrics.get("skyrl/done") else 0.0


def episode_return(trajectory: Trajectory, task: Any) -> float:
    """The sum of the env's rewards over the episode (already the driver's ``process`` component: weigh this one
    only when the process reward is not also counted)."""
    return float(trajectory.metrics.get("skyrl/reward", 0.0))


def solved(trajectory: Trajectory, task: Any, at: float = 1.0) -> float:
    """1.0 when the episode ended on a reward of at least ``at`` (SkyRL's envs give 1.0 for a correct answer)."""
    return float(final_reward(trajectory, task) >= at)
