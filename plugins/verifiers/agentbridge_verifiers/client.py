"""The verifiers server (``server.py`` in the verifiers venv): started once per process and environment, and asked
over HTTP. Nothing here imports verifiers.

The server's python is ``python:`` (an argument), else ``$AGENTBRIDGE_VERIFIERS_PYTHON``, else the one
``server_env.sh`` makes (``.venv-verifiers`` at the repo root, created on first use). ``url:`` names a server that
is already running instead (one started by hand with ``python server.py --config JSON --port N``, e.g. shared by a
backend's workers).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import http.client
import json
import os
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parents[1]  # plugins/verifiers in a checkout
SCRIPT = HERE / "server_env.sh"
SERVER = Path(__file__).resolve().with_name("server.py")
PYTHON_VAR = "AGENTBRIDGE_VERIFIERS_PYTHON"
SERVED = ("taskset", "env", "seat", "max_turns", "expert")  # the arguments that make the server's environment


class VerifiersError(ValueError):
    """The verifiers server cannot be made, started or understood (one line)."""


def verifiers_python(python: str | None = None, timeout_s: float = 1800.0) -> Path:
    """The verifiers venv's python: ``python``, ``$AGENTBRIDGE_VERIFIERS_PYTHON``, or ``server_env.sh``'s (made
    when needed)."""
    chosen = python or os.environ.get(PYTHON_VAR)
    if chosen:
        if not Path(chosen).exists():
            raise VerifiersError(f"verifiers python {chosen} does not exist")
        return Path(chosen)
    if not SCRIPT.is_file():
        raise VerifiersError(f"no verifiers environment: set environment.args.python or ${PYTHON_VAR} to a python "
                             "with verifiers==0.4.0 installed")
    try:
        done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise VerifiersError(f"{SCRIPT}: could not create the verifiers venv ({type(e).__name__}: {e})") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise VerifiersError(f"{SCRIPT}: could not create the verifiers venv (exit {done.returncode}): {last}")
    return Path(done.stdout.strip().splitlines()[-1])


def served_config(args: dict[str, Any]) -> dict[str, Any]:
    """The part of the bridge's arguments the server's environment is made from."""
    return {k: args[k] for k in SERVED if args.get(k) is not None}


class ServerProcess:
    """One ``server.py`` process for one environment configuration, on a port it picks."""

    def __init__(self, python: Path, config: dict[str, Any], paths: list[str]) -> None:
        self.python, self.config, self.paths = python, config, [str(Path(p).absolute()) for p in paths]
        self.url = ""
        self.proc: subprocess.Popen[str] | None = None
        self.log = tempfile.TemporaryFile(mode="w+")  # the server's stderr, read back when it fails

    def start(self, timeout_s: float = 300.0) -> ServerProcess:
        args = [str(self.python), str(SERVER), "--config", json.dumps(self.config), "--parent", str(os.getpid())]
        for folder in self.paths:
            args += ["--path", folder]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True)
        assert self.proc.stdout is not None
        line: list[str] = []

        def read() -> None:  # the first line of ours (an environment may print before it)
            assert self.proc is not None and self.proc.stdout is not None
            for text in self.proc.stdout:
                if text.startswith("AGENTBRIDGE_VERIFIERS_"):
                    line.append(text)
                    return
            line.append("")

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout_s)
        first = line[0].strip() if line else ""
        if first.startswith("AGENTBRIDGE_VERIFIERS_URL "):
            self.url = first.split(" ", 1)[1]
            return self
        self.stop()
        if first.startswith("AGENTBRIDGE_VERIFIERS_ERROR "):
            raise VerifiersError(f"verifiers environment {json.dumps(self.config)}: {first.split(' ', 1)[1]}")
        self.log.seek(0)
        tail = (self.log.read().strip().splitlines() or ["no output"])[-1]
        why = "did not start" if line else f"did not answer within {timeout_s:g}s"
        raise VerifiersError(f"verifiers server ({self.python}) {why}: {tail}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


_SERVERS: dict[str, ServerProcess] = {}
_STARTING = threading.Lock()


def _stop_all() -> None:
    for server in list(_SERVERS.values()):
        server.stop()


atexit.register(_stop_all)


def _key(args: dict[str, Any]) -> str:
    return json.dumps([served_config(args), list(args.get("paths") or []), args.get("python")], sort_keys=True)


def running_url(args: dict[str, Any]) -> str | None:
    """The URL of the server for these arguments when it is known and running (no start, no wait), else None."""
    if args.get("url"):
        return str(args["url"]).rstrip("/")
    server = _SERVERS.get(_key(args))
    return server.url if server is not None and server.alive() else None


def server_url(args: dict[str, Any]) -> str:
    """The URL of the server for these environment arguments: ``url`` when given, else this process's server for
    them (started on first use, restarted if it died)."""
    if args.get("url"):
        return str(args["url"]).rstrip("/")
    key = _key(args)
    with _STARTING:
        server = _SERVERS.get(key)
        if server is None or not server.alive():
            python = verifiers_python(args.get("python"))
            server = _SERVERS[key] = ServerProcess(python, served_config(args), list(args.get("paths") or [])).start()
        return server.url


class Connection:
    """JSON over one keep-alive HTTP connection to a server (blocking: callers in async code use a thread)."""

    def __init__(self, url: str, timeout_s: float = 600.0) -> None:
        parts = urlsplit(url)
        self.url = url
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.timeout_s = timeout_s
        self.conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        status, raw = self._send(method, path, payload, headers, retry=method == "GET")
        try:
            reply = json.loads(raw)
        except json.JSONDecodeError:
            raise VerifiersError(f"verifiers server {self.url}: {method} {path} answered {status} with something "
                                 f"that is not JSON: {raw[:200]!r}") from None
        if status >= 400:
            error = reply.get("error") if isinstance(reply, dict) else None
            raise VerifiersError(f"verifiers server {self.url}: {method} {path}: {error or reply}")
        return dict(reply)

    def _send(self, method: str, path: str, payload: bytes | None, headers: dict[str, str],
              retry: bool) -> tuple[int, bytes]:
        """``(status, body)``; a kept-alive connection the server closed is reopened once for a ``GET``."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        try:
            self.conn.request(method, path, body=payload, headers=headers)
            response = self.conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            if retry and isinstance(e, ConnectionError | http.client.HTTPException):
                return self._send(method, path, payload, headers, retry=False)
            raise VerifiersError(f"verifiers server {self.url}: {method} {path} failed "
                                 f"({type(e).__name__}: {e})") from None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class AsyncConnection:
    """JSON over one keep-alive HTTP/1.1 connection, on the event loop (an episode's calls: no thread hop)."""

    def __init__(self, url: str, timeout_s: float = 600.0) -> None:
        parts = urlsplit(url)
        self.url = url
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.timeout_s = timeout_s
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        try:
            status, raw = await asyncio.wait_for(self._exchange(method, path, body), self.timeout_s)
        except TimeoutError:
            await self.close()
            raise VerifiersError(f"verifiers server {self.url}: {method} {path}: no answer within "
                                 f"{self.timeout_s:g}s") from None
        except (OSError, asyncio.IncompleteReadError, ValueError) as e:
            await self.close()
            raise VerifiersError(f"verifiers server {self.url}: {method} {path} failed "
                                 f"({type(e).__name__}: {e})") from None
        try:
            reply = json.loads(raw)
        except json.JSONDecodeError:
            raise VerifiersError(f"verifiers server {self.url}: {method} {path} answered {status} with something "
                                 f"that is not JSON: {raw[:200]!r}") from None
        if status >= 400:
            error = reply.get("error") if isinstance(reply, dict) else None
            raise VerifiersError(f"verifiers server {self.url}: {method} {path}: {error or reply}")
        return dict(reply)

    async def _exchange(self, method: str, path: str, body: Any) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        payload = b"" if body is None else json.dumps(body).encode()
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n")
        self.writer.write(head.encode() + payload)
        await self.writer.drain()
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionResetError("the server closed the connection")
        status = int(status_line.split()[1])
        length, close = 0, False
        while (line := await self.reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
            elif name.strip().lower() == "connection" and value.strip().lower() == "close":
                close = True
        raw = await self.reader.readexactly(length)
        if close:
            await self.close()
        return status, raw

    async def close(self) -> None:
        writer, self.reader, self.writer = self.writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()


_INFO: dict[str, dict[str, Any]] = {}


def server_info(url: str) -> dict[str, Any]:
    """The server's ``/info`` (its environment, seat, tools, rewards), asked once per process."""
    if url not in _INFO:
        connection = Connection(url, 60.0)
        try:
            _INFO[url] = connection.request("GET", "/info")
        finally:
            connection.close()
    return _INFO[url]

