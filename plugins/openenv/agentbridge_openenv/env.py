"""A running OpenEnv environment server as an agentbridge environment, over OpenEnv's ``/ws`` session protocol.

The server's action schema (``GET /schema``) becomes one tool whose arguments are the action's fields; an MCP
environment's tools (its ``list_tools`` action) become one tool each, called with ``call_tool``. The reset
observation is the first user message, each step's observation is the tool message, the server's reward is the
step's reward and its ``done`` ends the episode. A server that is down, dies or answers something that is not the
protocol raises from ``reset``/``step``, so the driver ends that episode as ``error``; the next episode opens a new
session (a fresh connection), so a restarted server is picked up without anything else.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agentbridge import Message, StepResult, Task, ToolCall, user
from agentbridge_openenv.protocol import (
    ACTION_ERRORS,
    OpenEnvError,
    OpenEnvServerError,
    Session,
    get_json,
    http_url,
    parse_reply,
    ws_url,
)

RESERVED = frozenset({"metadata"})  # fields every OpenEnv action carries that are not the policy's to set


@dataclass
class Discovery:
    """What a server offers: its name, whether it speaks MCP, and the tool schemas the policy sees."""

    name: str
    mcp: bool
    tools: list[dict[str, Any]] = field(default_factory=list)
    names: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.names = frozenset(t["function"]["name"] for t in self.tools)


_DISCOVERED: dict[tuple[str, str, str], Discovery] = {}
_DISCOVERING = threading.Lock()


def _is_mcp_schema(action: dict[str, Any]) -> bool:
    props = action.get("properties") or {}
    return "tool_name" in props and "arguments" in props


def _action_tool(name: str, action: dict[str, Any], tool: str) -> dict[str, Any]:
    props = {k: v for k, v in (action.get("properties") or {}).items() if k not in RESERVED}
    params: dict[str, Any] = {"type": "object", "properties": props,
                              "required": [k for k in action.get("required", []) if k in props]}
    if action.get("$defs"):
        params["$defs"] = action["$defs"]
    what = (action.get("description") or "").strip()
    description = f"Act in the {name} environment" + (f": {what}" if what else ".")
    return {"type": "function", "function": {"name": tool, "description": description, "parameters": params}}


def _mcp_tool(tool: dict[str, Any]) -> dict[str, Any]:
    params = dict(tool.get("input_schema") or tool.get("inputSchema") or {"type": "object", "properties": {}})
    params.setdefault("properties", {})
    return {"type": "function", "function": {"name": str(tool["name"]), "description": str(
        tool.get("description") or tool["name"]), "parameters": params}}


def list_mcp_tools(url: str, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """The MCP tools of the server at ``url`` (a ``list_tools`` action in a session of its own; synchronous)."""
    from websockets.exceptions import WebSocketException
    from websockets.sync.client import connect

    try:
        with connect(ws_url(url), open_timeout=timeout_s, close_timeout=2.0, max_size=16 * 2**20) as ws:
            ws.send(json.dumps({"type": "step", "data": {"type": "list_tools"}}))
            raw = ws.recv(timeout=timeout_s)
            ws.send(json.dumps({"type": "close"}))
    except (OSError, TimeoutError, WebSocketException) as e:
        raise OpenEnvError(f"OpenEnv server {ws_url(url)}: list_tools failed ({type(e).__name__}: {e})") from None
    tools = parse_reply(raw, "observation", ws_url(url), "list_tools")["observation"].get("tools")
    if not isinstance(tools, list) or not all(isinstance(t, dict) and t.get("name") for t in tools):
        raise OpenEnvError(f"OpenEnv server {ws_url(url)}: reply to list_tools: expected observation.tools as a "
                           "list of {name, description, input_schema}")
    return [t for t in tools if t["name"] not in {"reset", "step", "state", "close"}]


def discover(url: str, mode: str = "auto", action_tool: str = "act", timeout_s: float = 30.0) -> Discovery:
    """The server's name and tools (cached per server URL, mode and action tool name)."""
    key = (http_url(url), mode, action_tool)
    with _DISCOVERING:
        if key in _DISCOVERED:
            return _DISCOVERED[key]
        meta = get_json(url, "/metadata", timeout_s)
        schema = get_json(url, "/schema", timeout_s)
        action = schema.get("action")
        if not isinstance(action, dict):
            raise OpenEnvError(f"OpenEnv server {http_url(url)}: GET /schema has no action schema")
        name = str(meta.get("name") or "openenv")
        mcp = _is_mcp_schema(action) if mode == "auto" else mode == "mcp"
        tools = ([_mcp_tool(t) for t in list_mcp_tools(url, timeout_s)] if mcp
                 else [_action_tool(name, action, action_tool)])
        found = _DISCOVERED[key] = Discovery(name=name, mcp=mcp, tools=tools)
        return found


_PLAIN = (str, int, float, bool)


def render(value: Any) -> str:
    """An observation (or tool result) as text: a lone text field as itself, an object as ``key: value`` lines
    (empty values and empty metadata left out), an MCP result as its text content."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if isinstance(value.get("content"), list) and ("is_error" in value or "isError" in value):
            texts = [b.get("text", "") for b in value["content"] if isinstance(b, dict) and b.get("type") == "text"]
            if texts:
                return "\n".join(texts)
            return render(value.get("data", value.get("structured_content")))
        lines = []
        last: tuple[Any, Any] = (None, None)  # the one line's key and value
        for k, v in value.items():
            if v is None or v == "" or v == {} or v == []:
                continue
            lines.append(f"{k}: {v}" if v.__class__ in _PLAIN else f"{k}: {json.dumps(v, ensure_ascii=False)}")
            last = k, v
        if len(lines) == 1:
            k, v = last
            return v if isinstance(v, str) else render(v) if k == "metadata" else lines[0]
        return "\n".join(lines)
    return json.dumps(value, ensure_ascii=False)


class OpenEnvEnvironment:
    """One episode against an OpenEnv server (``url``), in a ``/ws`` session of its own.

    ``env_name`` (optional) must match the server's ``/metadata`` name; ``mode`` is ``auto`` (MCP when the action
    schema is ``call_tool``), ``action`` or ``mcp``; ``action_tool`` names the one tool of an action-schema
    environment. A task's ``data["seed"]`` and ``data["reset"]`` (keyword arguments) go to the server's reset.
    """

    def __init__(self, url: str, env_name: str | None = None, mode: Literal["auto", "action", "mcp"] = "auto",
                 action_tool: str = "act", timeout_s: float = 30.0, max_output_chars: int = 2000,
                 tools: Any = None) -> None:
        self.url = url
        self.env_name = env_name
        self.mode = mode
        self.action_tool = action_tool
        self.timeout_s = timeout_s
        self.max_output_chars = max_output_chars
        self.task: Task | None = None
        self.session: Session | None = None
        self.discovery: Discovery | None = None
        self.last: dict[str, Any] = {}  # the last observation payload (observation, reward, done)
        self.done = False

    def _discover(self) -> Discovery:
        if self.discovery is None:
            found = discover(self.url, self.mode, self.action_tool, self.timeout_s)
            if self.env_name is not None and found.name != self.env_name:
                raise OpenEnvError(f"OpenEnv server {http_url(self.url)} serves {found.name!r}, "
                                   f"not environment.args.env_name {self.env_name!r}")
            self.discovery = found
        return self.discovery

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools the policy sees (the server is asked once per process)."""
        return self._discover().tools

    async def reset(self, task: Task) -> list[Message]:
        if self.discovery is None:  # the server is asked once per process; later episodes find it cached
            cached = (http_url(self.url), self.mode, self.action_tool) in _DISCOVERED
            self._discover() if cached else await asyncio.to_thread(self._discover)
        await self.close()
        self.task, self.done = task, False
        self.session = Session(self.url, self.timeout_s)
        data: dict[str, Any] = dict(task.data.get("reset") or {})
        if task.data.get("seed") is not None:
            data["seed"] = task.data["seed"]
        self.last = await self.session.request({"type": "reset", "data": data}, "observation")
        text = render(self.last["observation"])
        intro = task.data.get("instruction")
        return [user((f"{intro}\n\n{text}" if intro else text)[: self.max_output_chars])]

    async def step(self, action: Message) -> StepResult:
        assert self.session is not None and self.discovery is not None, "step() before reset()"
        calls: list[ToolCall] = action.get("tool_calls") or []
        parse_errors: list[str] = action.get("tool_call_errors") or []  # type: ignore[assignment]
        observation: list[Message] = [{"role": "tool", "name": "error", "content": f"Error: {e}"}
                                      for e in parse_errors] if parse_errors else []
        metrics = {"tools/calls": float(len(calls) + len(parse_errors)), "tools/failures": float(len(parse_errors))}
        if not calls and not parse_errors:
            names = ", ".join(t["function"]["name"] for t in self.discovery.tools)
            return StepResult(observation=[user(f"Call one of the tools ({names}) to act.")],
                              metrics={"openenv/invalid_actions": 1.0})
        reward = 0.0
        for call in calls:
            name = str(call["function"].get("name", ""))
            msg: Message = {"role": "tool", "tool_call_id": call.get("id", ""), "name": name}
            if self.done:
                msg["content"] = "Error: the episode is over."
                ok = False
            else:
                content, ok, step_reward = await self._call(name, call["function"].get("arguments"))
                msg["content"] = content[: self.max_output_chars]
                reward += step_reward
            metrics["tools/failures"] += float(not ok)
            observation.append(msg)
        metrics["openenv/reward"] = reward
        if self.done:
            metrics["openenv/done"] = 1.0
            metrics["openenv/final_reward"] = float(self.last.get("reward") or 0.0)
        return StepResult(observation=observation, reward=reward, done=self.done, metrics=metrics)

    async def _call(self, name: str, arguments: Any) -> tuple[str, bool, float]:
        """One tool call as one OpenEnv step: (tool message text, succeeded, reward)."""
        assert self.session is not None and self.discovery is not None
        if name not in self.discovery.names:
            known = ", ".join(t["function"]["name"] for t in self.discovery.tools)
            return f"Error: unknown tool '{name}'. Available tools: {known}.", False, 0.0
        if not isinstance(arguments, dict):
            return f"Error: bad arguments for {name}: arguments must be a JSON object.", False, 0.0
        data = ({"type": "call_tool", "tool_name": name, "arguments": arguments} if self.discovery.mcp
                else dict(arguments))
        try:
            reply = await self.session.request({"type": "step", "data": data}, "observation")
        except OpenEnvServerError as e:
            if e.code in ACTION_ERRORS:  # the action was bad, not the server: the model is told
                return f"Error: {name} failed: {str(e).split('server error ', 1)[-1]}", False, 0.0
            raise
        self.last = reply
        self.done = bool(reply["done"])
        reward = float(reply.get("reward") or 0.0)
        obs = reply["observation"]
        if self.discovery.mcp:
            error = obs.get("error")
            if error:
                kind = error.get("error_type", "error") if isinstance(error, dict) else "error"
                text = error.get("message", error) if isinstance(error, dict) else error
                return f"Error: {name} failed ({kind}): {text}", False, reward
            return render(obs.get("result")), True, reward
        return render(obs), True, reward

    def expert_action(self) -> str:
        """The next action of the expert for this server's environment (``EXPERTS``), as a Hermes tool call."""
        assert self.discovery is not None, "expert_action() before reset()"
        expert = EXPERTS.get(self.discovery.name)
        if expert is None:
            raise ValueError(f"no expert for OpenEnv environment {self.discovery.name!r} "
                             f"(experts: {', '.join(EXPERTS)})")
        name, arguments = expert(self)
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"

    async def close(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            await session.close()


_RANGE = re.compile(r"from (\d+) to (\d+)|Still possible: (\d+) to (\d+)")


def guess_expert(env: OpenEnvEnvironment) -> tuple[str, dict[str, Any]]:
    """Binary search over the range the game says is still possible."""
    obs = env.last.get("observation") or {}
    if "low" in obs and "high" in obs:  # the action-schema face reports the range as fields
        low, high = int(obs["low"]), int(obs["high"])
    else:  # the MCP face says it in text (reset metadata or the last tool result)
        text = render(obs.get("result") if obs.get("result") is not None else obs.get("metadata") or obs)
        found = _RANGE.findall(text)
        meta = obs.get("metadata") or {}
        if found:
            a, b, c, d = found[-1]
            low, high = int(a or c), int(b or d)
        else:
            low, high = int(meta.get("low", 1)), int(meta.get("high", 100))
    middle = (low + high) // 2
    return ("guess", {"number": middle}) if env.discovery and env.discovery.mcp else (
        env.action_tool, {"guess": middle})


EXPERTS: dict[str, Callable[[OpenEnvEnvironment], tuple[str, dict[str, Any]]]] = {
    "guess": guess_expert,
    "guess_mcp": guess_expert,
}


def success(trajectory: Any, task: Any) -> float:
    """1.0 when the server ended the episode on a positive reward."""
    m = trajectory.metrics
    return float(m.get("openenv/done", 0.0) > 0 and m.get("openenv/final_reward", 0.0) > 0)


def episode_return(trajectory: Any, task: Any) -> float:
    """The sum of the server's rewards over the episode (already the driver's process reward: weigh it as an
    outcome only when the process reward is not also counted)."""
    return float(trajectory.metrics.get("openenv/reward", 0.0))
