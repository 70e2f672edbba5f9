"""A verifiers 0.4.0 environment as an agentbridge environment: each episode is verifiers' own ``Env.run_episode``
in the verifiers server, and each model call verifiers makes is one driver turn.

``reset`` starts the episode and returns the messages of verifiers' first model call (the task's system prompt and
prompt); ``step`` answers the waiting call with the driver's assistant message and returns the messages verifiers
added before its next call (tool results from the task's MCP toolsets, the env's user turns), or ends the episode
with verifiers' scores when it made no further call (the chat program stopped, a limit or ``@stop`` refused the
turn, the env's ``run()`` returned). The scores travel as the last step's metrics; ``verifiers/rubric`` reads them.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from agentbridge import Message, StepResult, Task, load_image
from agentbridge_verifiers.client import AsyncConnection, VerifiersError, running_url, server_info, server_url

_HERMES = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)
_TOOL_ERROR = re.compile(r"^\s*(error:|Error executing tool)", re.IGNORECASE)


def to_message(wire: dict[str, Any]) -> Message:
    """An OpenAI chat message (verifiers' wire form) as the driver's :class:`Message`: text as text, image parts as
    image blocks, tool calls with their arguments parsed."""
    content = wire.get("content")
    if isinstance(content, list):
        blocks: list[dict[str, Any]] = []
        for part in content:
            if part.get("type") == "text":
                blocks.append({"type": "text", "text": part.get("text", "")})
            elif part.get("type") == "image_url":
                blocks.append({"type": "image", "image": load_image((part.get("image_url") or {}).get("url", ""))})
        content = blocks
    message: Message = {"role": str(wire.get("role", "user")), "content": "" if content is None else content}
    if wire.get("tool_calls"):
        calls = []
        for call in wire["tool_calls"]:
            fn = call.get("function") or {}
            arguments = fn.get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments or "{}")
                except json.JSONDecodeError:
                    pass
            calls.append({"id": str(call.get("id", "")), "type": "function",
                          "function": {"name": str(fn.get("name", "")), "arguments": arguments}})
        message["tool_calls"] = calls  # type: ignore[typeddict-item]
    if wire.get("tool_call_id"):
        message["tool_call_id"] = str(wire["tool_call_id"])
    if wire.get("name"):
        message["name"] = str(wire["name"])
    return message


def to_wire(action: Message) -> dict[str, Any]:
    """The driver's assistant message as verifiers receives it from a model: the text without its Hermes tool-call
    blocks when tool calls were parsed from it (as an OpenAI-compatible server's tool parser returns it), the calls
    by id, name and arguments. A turn whose tool call did not parse keeps its whole text and calls nothing."""
    text = str(action.get("content") or "")
    calls = [{"id": c.get("id", ""), "name": c["function"]["name"], "arguments": c["function"].get("arguments") or {}}
             for c in action.get("tool_calls") or []]
    return {"content": _HERMES.sub("", text).strip() if calls else text, "tool_calls": calls}


def hermes(turn: Any) -> str:
    """An expert's turn (text, or ``{"content", "tool_calls": [{"name", "arguments"}]}``) as Hermes text."""
    if isinstance(turn, str):
        return turn
    parts = [str(turn.get("content") or "")] if turn.get("content") else []
    parts += [f"<tool_call>{json.dumps({'name': c['name'], 'arguments': c.get('arguments') or {}})}</tool_call>"
              for c in turn.get("tool_calls") or []]
    return "\n".join(parts)


def score_metrics(reply: dict[str, Any]) -> dict[str, float]:
    """verifiers' scores of a finished episode as metrics: each reward's score and weight, each metric, the total."""
    metrics = {"verifiers/reward": float(reply.get("reward") or 0.0), "verifiers/turns": float(reply.get("turns", 0)),
               "verifiers/unscored": 0.0}
    for name, value in (reply.get("rewards") or {}).items():
        if value is None:  # declared but not scored (scoring failed or did not run)
            metrics["verifiers/unscored"] += 1.0
            continue
        score, weight = value
        metrics[f"verifiers/score/{name}"] = float(score)
        metrics[f"verifiers/weight/{name}"] = float(weight)
    for name, value in (reply.get("metrics") or {}).items():
        metrics[f"verifiers/metric/{name}"] = float(value)
    return metrics


class VerifiersEnvironment:
    """One episode of a verifiers environment, played in the verifiers server.

    Arguments (the same for ``verifiers/tasks``): ``taskset`` (an installed verifiers taskset id, a
    ``package.module:Class`` path, or a dict of its config with ``id``), ``env`` (an ``Env`` id or class path, or a
    dict of the env's config with ``id``; default: the taskset's own), ``seat`` (overrides of the played agent's
    config), ``max_turns`` (verifiers' turn limit for the seat: set it to the spec's ``agent.max_turns``),
    ``expert`` (``module:function`` in the verifiers venv playing the scripted policy), ``paths`` (folders to import
    environments from), ``python`` (the verifiers venv's python), ``url`` (a running server instead),
    ``timeout_s`` (one model call's wait, verifiers' tools and scoring included).
    """

    def __init__(self, taskset: Any, env: Any = None, seat: dict[str, Any] | None = None, max_turns: int | None = None,
                 expert: str | None = None, paths: list[str] | None = None, python: str | None = None,
                 url: str | None = None, timeout_s: float = 600.0, tools: Any = None) -> None:
        self.args = {"taskset": taskset, "env": env, "seat": seat, "max_turns": max_turns, "expert": expert,
                     "paths": paths, "python": python, "url": url}
        self.timeout_s = timeout_s
        self.connection: AsyncConnection | None = None
        self.episode: str | None = None
        self.last: dict[str, Any] = {}

    def _url(self) -> str:
        return server_url(self.args)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools verifiers' chat program offers this environment's seat (its toolsets' MCP tools)."""
        return list(server_info(self._url())["tools"])

    async def _call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        if self.connection is None:
            url = running_url(self.args)
            if url is None:  # starting a server takes seconds: not on the event loop
                url = await asyncio.to_thread(self._url)
            self.connection = AsyncConnection(url, self.timeout_s)
        return await self.connection.request(method, path, body)

    async def reset(self, task: Task) -> list[Message]:
        await self.close()
        data = task.data.get("verifiers")
        if not isinstance(data, dict):
            raise ValueError(f"task {task.id} has no data['verifiers'] (the verifiers task's data): make tasks "
                             "with the verifiers/tasks dataset")
        reply = await self._call("POST", "/episodes", {"task": data})
        self.episode = reply.get("episode")
        self.last = reply
        if reply.get("done"):
            raise VerifiersError(f"verifiers ended the episode before any model call: {self._why(reply)}")
        self._check_tools(reply)
        return [to_message(m) for m in reply.get("messages") or []]

    def _check_tools(self, reply: dict[str, Any]) -> None:
        if not reply.get("tools_match", True):
            raise VerifiersError("verifiers offered the model other tools than its /info listed (the prompt was "
                                 "rendered with those): a toolset whose tools depend on the task is not supported")

    @staticmethod
    def _why(reply: dict[str, Any]) -> str:
        errors = reply.get("errors") or []
        return f"{reply.get('stop')}" + (f": {errors[0]}" if errors else "")

    async def step(self, action: Message) -> StepResult:
        if self.episode is None:
            raise RuntimeError("step() before reset()")
        wire = to_wire(action)
        calls = len(wire["tool_calls"])
        reply = await self._call("POST", f"/episodes/{self.episode}/step", {"message": wire})
        self.last = reply
        metrics = {"tools/calls": float(calls)}
        if reply.get("done"):
            self.episode = None
            if not reply.get("ok"):
                raise VerifiersError(f"verifiers rollout failed ({self._why(reply)})")
            metrics.update(score_metrics(reply))
            metrics["verifiers/history_rewrites"] = float(reply.get("rewrites", 0))
            return StepResult(observation=[], done=True, metrics=metrics)
        self._check_tools(reply)
        observation = [to_message(m) for m in reply.get("messages") or []]
        if calls:
            metrics["tools/failures"] = float(sum(
                1 for m in observation if m["role"] == "tool" and _TOOL_ERROR.match(str(m.get("content") or ""))))
        if reply.get("rewritten"):
            metrics["verifiers/rewritten_turns"] = 1.0
        return StepResult(observation=observation, metrics=metrics)

    def expert_action(self) -> str:
        """The environment's expert (``expert: module:function``) for verifiers' waiting model call, as Hermes
        text."""
        if "expert" not in self.last:
            raise ValueError("this verifiers environment has no expert: set environment.args.expert to a "
                             "module:function of the verifiers venv")
        return hermes(self.last["expert"])

    async def close(self) -> None:
        if self.episode is not None and self.connection is not None:
            episode, self.episode = self.episode, None
            try:
                await self._call("DELETE", f"/episodes/{episode}")
            except VerifiersError:
                pass  # the server is gone: nothing is left to close
        if self.connection is not None:
            await self.connection.close()
            self.connection = None
