"""OpenEnv's wire protocol, spoken directly (no ``openenv`` import): HTTP ``/schema`` and ``/metadata`` for
discovery, and the ``/ws`` session, one environment per connection, for episodes.

Session messages (client → server), each answered by one JSON frame:

- ``{"type": "reset", "data": {"seed": ..., ...}}`` → ``{"type": "observation", "data": {"observation", "reward",
  "done"[, "metadata"]}}``
- ``{"type": "step", "data": ACTION}`` → the same; an MCP environment's actions are ``{"type": "list_tools"}``
  (observation ``{"tools": [{name, description, input_schema}]}``) and ``{"type": "call_tool", "tool_name",
  "arguments"}`` (observation ``{"tool_name", "result", "error"}``)
- ``{"type": "state"}`` → ``{"type": "state", "data": {...}}``; ``{"type": "close"}`` ends the session
- any of them may be answered ``{"type": "error", "data": {"message", "code"}}``.

A transport failure or a frame that is not this protocol raises :class:`OpenEnvError` with one line saying what
and where; a well-formed error frame raises :class:`OpenEnvServerError` (its ``code`` says whose fault it was).
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection

# error codes that blame the action (the model's), not the server: the episode goes on with an error message
ACTION_ERRORS = frozenset({"VALIDATION_ERROR", "EXECUTION_ERROR"})
MAX_MESSAGE_BYTES = 16 * 2**20


class OpenEnvError(RuntimeError):
    """The server is unreachable, went away, or answered something that is not OpenEnv's protocol."""


class OpenEnvServerError(OpenEnvError):
    """A well-formed ``error`` frame; ``code`` is the server's error code."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def http_url(url: str) -> str:
    """``url`` as ``http(s)://host:port`` (a ``ws(s)://`` or trailing-slash form accepted)."""
    url = url.rstrip("/")
    for ws, http in (("ws://", "http://"), ("wss://", "https://")):
        if url.startswith(ws):
            return http + url[len(ws):]
    return url if "://" in url else f"http://{url}"


def ws_url(url: str) -> str:
    """The session endpoint of the server at ``url``."""
    base = http_url(url)
    scheme, rest = base.split("://", 1)
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/ws"


def get_json(url: str, path: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """``GET url/path`` as a JSON object (discovery; synchronous, stdlib only)."""
    target = http_url(url) + path
    try:
        with urllib.request.urlopen(target, timeout=timeout_s) as response:  # noqa: S310 - the spec's server URL
            body = response.read()
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise OpenEnvError(f"OpenEnv server {http_url(url)}: GET {path} failed ({reason}); is the server running?"
                           ) from None
    try:
        data = json.loads(body)
    except ValueError:
        raise OpenEnvError(f"OpenEnv server {http_url(url)}: GET {path} is not JSON: {body[:80]!r}") from None
    if not isinstance(data, dict):
        raise OpenEnvError(f"OpenEnv server {http_url(url)}: GET {path} is not a JSON object: {body[:80]!r}")
    return data


class Session:
    """One ``/ws`` session: one environment instance on the server, for one episode."""

    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        self.url = ws_url(url)
        self.timeout_s = timeout_s
        self.ws: ClientConnection | None = None
        self.timed_out = False
        self.waiting_since: float | None = None  # loop time the pending request was sent
        self.watchdog: asyncio.Task[None] | None = None

    async def _watch(self, ws: ClientConnection) -> None:
        """Drop the connection when a reply is more than ``timeout_s`` overdue (one wake-up per second for the
        session, not a timer per request)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(1.0, self.timeout_s / 4))
            if self.waiting_since is not None and loop.time() - self.waiting_since > self.timeout_s:
                self.timed_out = True
                ws.transport.abort()
                return

    async def connect(self) -> None:
        try:
            self.ws = await websockets.connect(self.url, max_size=MAX_MESSAGE_BYTES, open_timeout=self.timeout_s,
                                               ping_interval=None, compression=None)
        except (OSError, TimeoutError, websockets.exceptions.WebSocketException) as e:
            raise OpenEnvError(f"OpenEnv server {self.url}: cannot connect ({type(e).__name__}: {e})") from None
        self.watchdog = asyncio.get_running_loop().create_task(self._watch(self.ws))

    async def request(self, message: dict[str, Any], expect: str) -> dict[str, Any]:
        """Send one message, return the ``data`` of its ``expect``-typed reply."""
        if self.ws is None:
            await self.connect()
        ws = self.ws
        assert ws is not None
        self.waiting_since = asyncio.get_running_loop().time()
        try:
            await ws.send(json.dumps(message))
            raw = await ws.recv()
        except (OSError, websockets.exceptions.WebSocketException) as e:
            what = message.get("type", "?")
            if self.timed_out:
                raise OpenEnvError(f"OpenEnv server {self.url}: no reply to {what} within {self.timeout_s:g}s; "
                                   "connection dropped") from None
            raise OpenEnvError(f"OpenEnv server {self.url}: connection lost during {what} "
                               f"({type(e).__name__}: {e})") from None
        finally:
            self.waiting_since = None
        return parse_reply(raw, expect, self.url, message.get("type", "?"))

    async def close(self) -> None:
        ws, self.ws = self.ws, None
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None
        if ws is None:
            return
        try:
            await ws.send(json.dumps({"type": "close"}))
        except (OSError, websockets.exceptions.WebSocketException):
            pass
        try:
            await asyncio.wait_for(ws.close(), 2.0)
        except (OSError, TimeoutError, websockets.exceptions.WebSocketException):
            pass


def parse_reply(raw: Any, expect: str, url: str, what: str) -> dict[str, Any]:
    """The ``data`` of a reply (to a ``what`` message, from the server at ``url``) of type ``expect``; an error frame
    raises OpenEnvServerError, anything else that is not the protocol OpenEnvError (both one line)."""
    try:
        frame = json.loads(raw)
        kind, data = frame["type"], frame["data"]
        if expect == "observation" and kind == expect:
            obs, reward, done = data["observation"], data["reward"], data["done"]
            if obs.__class__ is dict and done.__class__ is bool and (reward is None or reward.__class__ in (
                    float, int, bool)):
                return data  # the common case, checked cheaply
    except (ValueError, TypeError, KeyError):
        pass
    return _reject(raw, expect, f"OpenEnv server {url}: reply to {what}")


def _reject(raw: Any, expect: str, where: str) -> dict[str, Any]:
    """Why ``raw`` is not a good ``expect`` reply, as an exception; or its data when it is one after all."""
    try:
        frame = json.loads(raw)
    except (ValueError, TypeError):
        raise OpenEnvError(f"{where} is not JSON: {str(raw)[:80]!r}") from None
    if not isinstance(frame, dict) or not isinstance(frame.get("data"), dict):
        raise OpenEnvError(f"{where} is not an OpenEnv frame ({{'type', 'data': {{...}}}}): {str(raw)[:80]!r}")
    kind, data = frame.get("type"), frame["data"]
    if kind == "error":
        code = str(data.get("code", "UNKNOWN"))
        detail = data.get("errors") or data.get("message") or "no message"
        raise OpenEnvServerError(f"{where}: server error {code}: {str(detail)[:300]}", code)
    if kind != expect:
        raise OpenEnvError(f"{where}: expected a {expect!r} frame, got {str(kind)[:40]!r}")
    if expect == "observation":
        obs, reward, done = data.get("observation"), data.get("reward"), data.get("done")
        if not isinstance(obs, dict) or not isinstance(done, bool) or (
                reward is not None and not isinstance(reward, int | float)):
            raise OpenEnvError(f"{where}: malformed observation (needs observation: object, done: bool, "
                               f"reward: number|null): {str(raw)[:120]!r}")
    return data
