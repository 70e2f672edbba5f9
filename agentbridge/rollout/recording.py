"""Record and replay episodes: every environment output and reward score, keyed by task and action history.

``environment.record: DIR`` (``agentbridge rollout --record DIR``) wraps the live environment in a
:class:`RecordingEnvironment` and each reward in :func:`recording_reward`; every ``reset()``'s messages, every
``step()``'s :class:`~agentbridge.env.StepResult` and every reward's value (a judge's, a reward model's) is appended to
``DIR/<host>-<pid>.jsonl`` — one file per writing process, one flushed line per record, so the workers of a
multi-process backend on one machine never interleave. ``environment.replay: DIR`` reads every file of ``DIR`` back as
one mapping and serves the outputs from it (:class:`ReplayEnvironment`, :func:`replay_reward`): the same episodes go
through every backend without the live environment, judge or reward model. An action history the recording does not
hold is one line naming the task, the step and ``DIR``.

Keys (:func:`history_key`) are the sha256 of the canonical JSON of the task (:func:`task_key`) and the actions so
far (each assistant message's ``content`` and ``tool_calls``): ``reset`` is keyed by the task alone, step ``n`` by the
first ``n`` actions, a reward by its id, its arguments, the task, the actions it scored (a ``per: turn`` reward: its
turn's prefix) and the episode's finish reason. The first record of a key wins (a stochastic environment replays the
output it gave first). An environment or reward that raised is recorded as its error and raises it again on replay.
"""

from __future__ import annotations

import base64
import hashlib
import inspect
import io
import json
import os
import re
import socket
import threading
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any

from agentbridge.env import Environment, Message, StepResult, Task, image_to_data_uri
from agentbridge.rewards import RewardFn
from agentbridge.trajectory import Trajectory

Action = dict[str, Any]  # {"content": ..., "tool_calls": [...]}: what of an assistant message keys its step
IMAGE = "__image__"  # an image inside a recorded message: {"__image__": "data:image/png;base64,..."}


class ReplayMissing(LookupError):
    """The replayed recording holds no output for this task and action history."""


class RecordedError(Exception):
    """An error the environment or a reward raised while recording, raised again on replay under its own name."""


def action_of(message: Message) -> Action:
    """What of an assistant message keys the environment's answer to it: its content and tool calls."""
    return {"content": message.get("content"), "tool_calls": list(message.get("tool_calls") or [])}


def actions_of(trajectory: Trajectory) -> list[Action]:
    """The action history of an episode (or of a per-turn reward's view of it), as :func:`action_of` keys it."""
    return [{"content": turn.text, "tool_calls": list(turn.tool_calls)} for turn in trajectory.turns]


def task_key(task: Task) -> dict[str, Any]:
    """What of a task keys its records: its id, prompt and data (:meth:`Task.to_dict` without the images, which an
    environment may attach at ``reset``, so the rewards scored after it see another ``to_dict()`` than ``reset``
    did; a dataset's images are referenced in ``data``)."""
    return {"id": task.id, "prompt": task.prompt, "data": task.data}


def history_key(task: Task | dict[str, Any], actions: Sequence[Action], **extra: Any) -> str:
    """sha256 of the canonical JSON of the task (:func:`task_key`), the actions so far and ``extra``."""
    data = task_key(task) if isinstance(task, Task) else task
    canonical = json.dumps({"task": data, "actions": list(actions), **extra}, sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def encode(value: Any, where: str = "value") -> Any:
    """``value`` as JSON: images (PIL) become ``{"__image__": data URI}``; anything else not JSON is a TypeError."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, dict):
        return {str(k): encode(v, where) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode(v, where) for v in value]
    if hasattr(value, "save") and hasattr(value, "size"):  # a PIL image
        return {IMAGE: image_to_data_uri(value)}
    raise TypeError(f"environment.record: cannot record a {type(value).__name__} in {where} (not JSON)")


def decode(value: Any) -> Any:
    """The inverse of :func:`encode`: recorded images become PIL images again (their mode kept)."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {IMAGE}:
            from PIL import Image

            image = Image.open(io.BytesIO(base64.b64decode(str(value[IMAGE]).split(",", 1)[1])))
            image.load()
            return image
        return {k: decode(v) for k, v in value.items()}
    return value


def _error(e: BaseException) -> dict[str, Any]:
    return {"error": {"type": type(e).__name__, "message": str(e)}}


def _raise_recorded(error: dict[str, Any]) -> None:
    """Raise a recorded error again, under the name it had (the driver reports ``Name: message``)."""
    cls = type(str(error.get("type") or "RecordedError"), (RecordedError,), {})
    raise cls(str(error.get("message", "")))


class RecordingWriter:
    """Appends records to ``DIR/<host>-<pid>.jsonl`` (the process id read at each write, so a forked worker writes
    its own file), one flushed line each; a key this process already wrote is not written again."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ValueError(f"environment.record: cannot create the directory '{directory}' "
                             f"({e.strerror or e})") from None
        self._written: set[tuple[int, str]] = set()
        self._lock = threading.Lock()
        self._host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "host"

    @property
    def path(self) -> Path:
        return self.directory / f"{self._host}-{os.getpid()}.jsonl"

    def put(self, key: str, record: dict[str, Any]) -> None:
        line = json.dumps({"key": key, **record}, ensure_ascii=False, separators=(",", ":"))
        with self._lock:
            pid = os.getpid()
            if (pid, key) in self._written:
                return
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")
                f.flush()
            self._written.add((pid, key))

    def put_tools(self, schemas: Any) -> None:
        """The tool schemas the prompt is rendered with: a replay renders the same prompt without the environment."""
        self.put(TOOLS_KEY, {"kind": "tools", "value": encode(schemas, "the tool schemas")})


TOOLS_KEY = "tools"


class Recording:
    """Every record of a recorded directory, read back as one mapping (all ``*.jsonl`` files, in name order; the
    first record of a key wins). A directory without recordings, or a line that is not a record, is a ValueError;
    a last line cut short (a writer killed mid-line) is skipped."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise ValueError(f"environment.replay: no such directory '{directory}'")
        files = sorted(self.directory.glob("*.jsonl"))
        if not files:
            raise ValueError(f"environment.replay: '{directory}' holds no recordings (*.jsonl); make them with "
                             f"agentbridge rollout SPEC --record {directory}")
        self.records: dict[str, dict[str, Any]] = {}
        self.next_action: dict[str, Action] = {}  # key of a history -> the action recorded after it
        for path in files:
            lines = path.read_text(encoding="utf-8").split("\n")
            for n, raw in enumerate(lines, 1):
                if not raw.strip():
                    continue
                try:
                    row = json.loads(raw)
                except json.JSONDecodeError:
                    if n == len(lines):  # no newline after it: a write cut short
                        continue
                    raise ValueError(f"{path}:{n}: not a recorded line (not JSON)") from None
                if not isinstance(row, dict) or not isinstance(row.get("key"), str):
                    raise ValueError(f"{path}:{n}: not a recorded line (no key)")
                self.records.setdefault(row["key"], row)
                if row.get("kind") == "step" and isinstance(row.get("prev"), str) and isinstance(row.get("action"),
                                                                                                    dict):
                    self.next_action.setdefault(row["prev"], row["action"])

    def get(self, key: str) -> dict[str, Any] | None:
        return self.records.get(key)

    def tool_schemas(self) -> Any:
        row = self.get(TOOLS_KEY)
        if row is None:
            raise ValueError(f"environment.replay: '{self.directory}' holds no recorded tool schemas (not made by "
                             "environment.record?)")
        return decode(row.get("value"))


class RecordingEnvironment:
    """Runs ``env`` and records what it answers: ``reset()``'s messages under the task, each ``step()``'s result
    under the task and the actions so far. Anything else (``expert_action``, ``tool_schemas``) is ``env``'s."""

    def __init__(self, env: Environment, writer: RecordingWriter) -> None:
        self.env = env
        self.writer = writer
        self._task: dict[str, Any] | None = None
        self._task_id = ""
        self._actions: list[Action] = []

    def __getattr__(self, name: str) -> Any:
        env = self.__dict__.get("env")
        if env is None:
            raise AttributeError(name)
        return getattr(env, name)

    async def reset(self, task: Task) -> list[Message]:
        self._task, self._task_id, self._actions = task_key(task), task.id, []
        key = history_key(self._task, [])
        base = {"kind": "reset", "task": task.id, "step": 0}
        try:
            messages = await self.env.reset(task)
        except Exception as e:
            self.writer.put(key, {**base, **_error(e)})
            raise
        self.writer.put(key, {**base, "value": encode(messages, "the reset messages")})
        return messages

    async def step(self, action: Message) -> StepResult:
        if self._task is None:
            raise RuntimeError("step() before reset()")
        prev = history_key(self._task, self._actions)
        self._actions.append(action_of(action))
        key = history_key(self._task, self._actions)
        base = {"kind": "step", "task": self._task_id, "step": len(self._actions), "prev": prev,
                "action": encode(self._actions[-1], "the action")}
        try:
            result = await self.env.step(action)
        except Exception as e:
            self.writer.put(key, {**base, **_error(e)})
            raise
        value = {"observation": encode(result.observation, "an observation"), "reward": float(result.reward),
                 "done": bool(result.done), "metrics": {str(k): float(v) for k, v in result.metrics.items()}}
        self.writer.put(key, {**base, "value": value})
        return result

    async def close(self) -> None:
        await self.env.close()


class ReplayEnvironment:
    """Serves a :class:`Recording` back in place of the live environment. ``expert_action()`` plays the action
    recorded after the history so far (so the scripted policy replays the recorded episodes)."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self._task: dict[str, Any] | None = None
        self._task_id = ""
        self._actions: list[Action] = []

    async def reset(self, task: Task) -> list[Message]:
        self._task, self._task_id, self._actions = task_key(task), task.id, []
        row = self.recording.get(history_key(self._task, []))
        if row is None:
            raise ReplayMissing(f"replay {self.recording.directory}: no recorded reset (step 0) for task "
                                f"'{task.id}': this task was not recorded")
        if "error" in row:
            _raise_recorded(row["error"])
        return list(decode(row.get("value") or []))

    async def step(self, action: Message) -> StepResult:
        if self._task is None:
            raise RuntimeError("step() before reset()")
        self._actions.append(action_of(action))
        n = len(self._actions)
        row = self.recording.get(history_key(self._task, self._actions))
        if row is None:
            raise ReplayMissing(f"replay {self.recording.directory}: no recorded environment output for task "
                                f"'{self._task_id}' at step {n}: action {n} (or one before it) differs from every "
                                "recorded episode of this task")
        if "error" in row:
            _raise_recorded(row["error"])
        value = row.get("value") or {}
        return StepResult(observation=list(decode(value.get("observation") or [])),
                          reward=float(value.get("reward", 0.0)), done=bool(value.get("done", False)),
                          metrics={k: float(v) for k, v in (value.get("metrics") or {}).items()})

    async def close(self) -> None:
        return None

    def expert_action(self) -> str | None:
        """The action recorded after this history (the first, when several were); None when none was."""
        if self._task is None:
            return None
        action = self.recording.next_action.get(history_key(self._task, self._actions))
        content = None if action is None else action.get("content")
        return content if isinstance(content, str) else None

    def tool_schemas(self) -> Any:
        return self.recording.tool_schemas()


def _reward_key(id: str, trajectory: Trajectory, task: Task, args: dict[str, Any]) -> str:
    return history_key(task, actions_of(trajectory), reward=id, args=args, finish_reason=trajectory.finish_reason)


def _score(value: Any) -> Any:
    """A reward's value as it is recorded: a number, or a mapping of names to numbers."""
    if isinstance(value, dict):
        return {str(k): float(v) for k, v in value.items()}
    return float(value)


def recording_reward(id: str, fn: RewardFn, writer: RecordingWriter) -> RewardFn:
    """``fn`` recording each value it returns (or the error it raises) under its id, arguments, the task and the
    action history it scored. An async ``fn`` stays async (a batched reward model still sees its calls together)."""

    def recorded(trajectory: Trajectory, task: Task, **args: Any) -> Any:
        key = _reward_key(id, trajectory, task, args)
        base = {"kind": "reward", "reward": id, "task": task.id, "actions": len(trajectory.turns)}

        def keep(value: Any) -> Any:
            try:
                stored = _score(value)
            except Exception as e:
                writer.put(key, {**base, **_error(e)})
                raise
            writer.put(key, {**base, "value": stored})
            return value

        try:
            value = fn(trajectory, task, **args)
        except Exception as e:
            writer.put(key, {**base, **_error(e)})
            raise
        if inspect.isawaitable(value):
            return _later(value, keep, lambda e: writer.put(key, {**base, **_error(e)}))
        return keep(value)

    return recorded


async def _later(value: Awaitable[Any], keep: Any, failed: Any) -> Any:
    try:
        result = await value
    except Exception as e:
        failed(e)
        raise
    return keep(result)


def replay_reward(id: str, recording: Recording) -> RewardFn:
    """A reward serving the values :func:`recording_reward` recorded; an unrecorded history raises
    :class:`ReplayMissing` (the reward scores 0 and the episode's ``error`` names it, as for any reward that raises)."""

    def replayed(trajectory: Trajectory, task: Task, **args: Any) -> Any:
        row = recording.get(_reward_key(id, trajectory, task, args))
        if row is None:
            raise ReplayMissing(f"replay {recording.directory}: no recorded score of reward {id} for task '{task.id}' "
                                f"after {len(trajectory.turns)} action(s)")
        if "error" in row:
            _raise_recorded(row["error"])
        return row.get("value")

    return replayed
