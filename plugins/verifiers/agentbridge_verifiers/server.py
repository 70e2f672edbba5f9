"""The verifiers side of the bridge: one verifiers environment served over HTTP, run by verifiers itself.

This file runs in the verifiers environment (``.venv-verifiers``, made by ``server_env.sh``) as a script:
``python server.py --config JSON``. It imports verifiers, aiohttp (a verifiers dependency) and the standard library,
never agentbridge. Each episode is ``Env.run_episode`` of verifiers 0.4.0, unchanged: the taskset's task, the env's
own ``run()`` (multi-turn envs answer through ``interaction.turn``), the rollout's limits, ``@stop``s and
``@intercept``s, the task's toolsets as MCP servers, and the task's rewards, metrics and judges at the end. Two things
are the bridge's:

* the seat's harness is :class:`AgentbridgeHarness`: verifiers' own chat program (the program its ``null`` harness
  launches with ``uv``: ``verifiers.v1.harnesses.utils.launch.CHAT_PROGRAM_SOURCE``), run in this process instead of
  a subprocess, so no ``uv`` and no network are needed;
* the seat's model endpoint is this server (``/v1/chat/completions``): each model call verifiers makes is parked
  until agentbridge's driver answers it (``POST /episodes/{id}/step``), and the messages verifiers sent are handed
  to the driver as the step's observation.

Routes (JSON): ``GET /health``, ``GET /info``, ``POST /tasks``, ``POST /episodes``, ``POST /episodes/{id}/step``,
``DELETE /episodes/{id}``, and the model endpoint ``POST /v1/chat/completions`` (streamed or not).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import logging
import os
import random
import sys
import tempfile
import time
import types
import uuid
from typing import Any

HARNESS_MODULE = "agentbridge_verifiers_harness"
SESSION_HEADER = "X-Session-ID"  # verifiers.v1.clients.client.SESSION_ID_HEADER: the rollout's trace id
API_KEY_VAR = "AGENTBRIDGE_VERIFIERS_KEY"
HOLDOUT = {"eval": 9, "test": 9, "dev": 8}  # idx % 10 of the rows each held-out split takes by default


# ------------------------------------------------------------------------------------------------ the harness


def _chat_program() -> types.ModuleType:
    """verifiers' bundled chat program (the ``null``/``bash`` harnesses' script) as a module of this process."""
    found = sys.modules.get("agentbridge_verifiers_chat_program")
    if found is None:
        from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE

        found = types.ModuleType("agentbridge_verifiers_chat_program")
        exec(compile(CHAT_PROGRAM_SOURCE, "<verifiers chat program>", "exec"), found.__dict__)  # noqa: S102
        sys.modules[found.__name__] = found
    return found


def _install_harness() -> None:
    """Register :class:`AgentbridgeHarness` as the harness module ``agentbridge_verifiers_harness`` (verifiers
    resolves a harness id by importing a module that exports a ``Harness`` subclass in ``__all__``)."""
    if HARNESS_MODULE in sys.modules:
        return
    import verifiers.v1 as vf
    from verifiers.v1.dialects.chat import message_to_wire

    class AgentbridgeHarnessConfig(vf.HarnessConfig):
        pass

    class AgentbridgeHarness(vf.Harness[AgentbridgeHarnessConfig]):
        """The ``null`` harness's chat program with its capabilities, run in-process (``launch`` runs its ``main``
        with the arguments ``launch_chat_program`` would pass on its command line)."""

        APPENDS_SYSTEM_PROMPT = True
        SUPPORTS_MCP = True
        SUPPORTS_RESUME = True
        SUPPORTS_TOOL_INTERCEPTION = True
        EXECUTES_CODE = False
        NEEDS_CONTAINER = False

        async def launch(self, ctx: Any, trace: Any, runtime: Any, endpoint: str, secret: str,
                         mcp_urls: dict[str, str], data: Any, tool_interception_url: str | None = None) -> Any:
            program = _chat_program()
            system_prompt, prompt = self.resolve_prompt(data)
            args = argparse.Namespace(
                base_url=endpoint, api_key=secret, model=ctx.model, system_prompt=system_prompt or "", prompt="",
                initial_messages_file="", mcp_config="", tool_interception_url=tool_interception_url or "",
                bash=False, compaction=False, summarize_at_tokens=None, edit=False, search=False, serper_key="")
            if mcp_urls:
                args.mcp_config = json.dumps({"mcpServers": {name: {"url": url, "timeout": self.config.tool_timeout}
                                                             for name, url in mcp_urls.items()}})
            if isinstance(prompt, str):
                args.prompt = prompt
            elif prompt is not None:
                fd, path = tempfile.mkstemp(prefix="vf-initial-messages-", suffix=".json")
                with os.fdopen(fd, "w") as f:
                    json.dump([message_to_wire(m) for m in prompt], f)
                args.initial_messages_file = path  # the program reads and deletes it, as in a runtime
            program.__dict__["parse_args"] = lambda: args  # main() reads it first, before its first await
            try:
                await program.main()
            except SystemExit as e:  # the program's transport-error exit
                return vf.ProgramResult(exit_code=int(e.code or 0), stdout="", stderr=f"exit {e.code}")
            return vf.ProgramResult(exit_code=0, stdout="", stderr="")

    module = types.ModuleType(HARNESS_MODULE)
    module.AgentbridgeHarness = AgentbridgeHarness  # type: ignore[attr-defined]
    module.AgentbridgeHarnessConfig = AgentbridgeHarnessConfig  # type: ignore[attr-defined]
    module.__all__ = ["AgentbridgeHarness"]  # type: ignore[attr-defined]
    sys.modules[HARNESS_MODULE] = module


# ------------------------------------------------------------------------------------------------ loading


def _class_module(path: str, kind: str) -> str:
    """A ``package.module:Class`` path as a plugin id: a module of this process exporting just that class (verifiers
    resolves tasksets and envs by importing a module and reading its ``__all__``)."""
    module_name, _, attr = path.partition(":")
    target = getattr(importlib.import_module(module_name), attr, None)
    if not isinstance(target, type):
        raise ValueError(f"{kind} {path!r}: {attr!r} is not a class of {module_name}")
    name = f"agentbridge_verifiers_{kind}_{module_name.replace('.', '_')}_{attr}".lower()  # as verifiers imports it
    module = types.ModuleType(name)
    setattr(module, attr, target)
    module.__all__ = [attr]  # type: ignore[attr-defined]
    sys.modules[name] = module
    return name


def env_config(args: dict[str, Any]) -> dict[str, Any]:
    """verifiers' ``[env]`` block from the bridge's arguments: ``taskset`` (an id, a ``module:Class`` path, or a
    dict of its config with ``id``), ``env`` (the same for an ``Env``, with its config), ``seat`` (overrides of the
    played agent's config), ``max_turns``."""
    taskset = args.get("taskset")
    taskset = dict(taskset) if isinstance(taskset, dict) else {"id": taskset}
    if not taskset.get("id"):
        raise ValueError("environment.args.taskset: name a verifiers taskset (an installed id or module:Class)")
    if ":" in str(taskset["id"]):
        taskset["id"] = _class_module(str(taskset["id"]), "taskset")
    env = args.get("env") or {}
    env = dict(env) if isinstance(env, dict) else {"id": env}
    if ":" in str(env.get("id") or ""):
        env["id"] = _class_module(str(env["id"]), "env")
    return {**env, "taskset": taskset}


class Loaded:
    """The verifiers environment a server plays: the ``Env``, its one seat, its tools and reward declarations."""

    def __init__(self, args: dict[str, Any]) -> None:
        import verifiers.v1 as vf
        from verifiers.v1.configs.agent import agent_config_fields

        _install_harness()
        raw = env_config(args)
        probe = vf.resolve_env_config(raw)
        roles = list(agent_config_fields(probe))
        if len(roles) != 1:
            raise ValueError(f"{type(probe).__name__} declares the agents {roles}; the bridge plays an environment "
                             "with exactly one agent seat (the policy)")
        self.seat = roles[0]
        self.default_harness = probe.agent_harnesses()[self.seat].id
        seat = dict(raw.get(self.seat) or {})
        seat.update(args.get("seat") or {})
        seat["harness"] = {"id": HARNESS_MODULE}
        seat["runtime"] = {"type": "subprocess"}
        if args.get("max_turns") is not None:
            seat["max_turns"] = int(args["max_turns"])
        self.config = vf.resolve_env_config({**raw, self.seat: seat})
        self.env = vf.load_environment(self.config)
        self.task_cls = type(self.env.taskset).task_type()
        self.data_cls = self.task_cls.data_type()
        self.rows: dict[str, list[Any]] = {}

    def task(self, data: dict[str, Any]) -> Any:
        return self.task_cls(self.data_cls.model_validate(data), self.env.taskset.config.task)

    def reward_weights(self) -> dict[str, float]:
        """The task's ``@vf.reward`` functions and their weights (plugged ones from the task config included)."""
        weights: dict[str, float] = {}
        for klass in reversed(self.task_cls.__mro__):
            for name, fn in vars(klass).items():
                if callable(fn) and getattr(fn, "reward", False):
                    weights[name] = float(getattr(fn, "_vf_weight", 1.0))
        for name, plugged in self.env.taskset.config.task.rewards.items():
            weights[name] = float(plugged.weight if plugged.weight is not None else weights.get(name, 1.0))
        return weights

    async def tools(self) -> list[dict[str, Any]]:
        """The tools verifiers' chat program advertises: each toolset's MCP tools, as ``<server>_<tool>`` (how
        ``connect_mcp`` names them), from the same ``MCPServer`` registration the toolset's server makes."""
        from mcp.server.mcpserver import MCPServer

        toolsets = [*type(self.env.taskset).toolsets(self.env.taskset.config),  # serve_tools: shared ones first
                    *self.task_cls.toolsets(self.env.taskset.config.task)]
        schemas = []
        for toolset in toolsets:
            server = MCPServer(toolset.server_name or type(toolset).__name__)
            toolset.register(server)
            for tool in await server.list_tools():
                name = f"{toolset.server_name}_{tool.name}" if toolset.server_name else tool.name
                schemas.append({"type": "function", "function": {
                    "name": name, "description": tool.description or "", "parameters": tool.input_schema}})
        return schemas

    def split_rows(self, split: str, select: dict[str, Any] | None, holdout: bool, max_rows: int) -> list[Any]:
        """The taskset's rows of ``split``: verifiers' own ``select`` view when given, else every row with the
        held-out ones (``idx % 10``: 9 eval, 8 dev) kept out of train and each held-out split taking its own."""
        from verifiers.v1.configs.select import SelectConfig

        key = json.dumps([split, select, holdout, max_rows], sort_keys=True)
        if key not in self.rows:
            view = self.env.taskset
            if select:
                view = view.select(SelectConfig.model_validate(select))
            if not view.bounded:
                view = view.take(max_rows)
            rows = list(view)
            if holdout and not select:
                mine = HOLDOUT.get(split)
                rows = [t for t in rows if (t.data.idx % 10 == mine if mine is not None
                                            else t.data.idx % 10 not in HOLDOUT.values())]
            self.rows[key] = rows
        return self.rows[key]


# ------------------------------------------------------------------------------------------------ episodes


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw or "{}")
        except json.JSONDecodeError:
            return raw
    return raw


def comparable(message: dict[str, Any]) -> str:
    """A request message as the driver saw it: role, content (``None`` as empty), tool calls by name and parsed
    arguments, tool call id. Two requests agree on a message when these agree."""
    content = message.get("content")
    calls = [[c.get("function", {}).get("name"), _arguments(c.get("function", {}).get("arguments"))]
             for c in message.get("tool_calls") or []]
    return json.dumps([message.get("role"), "" if content is None else content, calls,
                       message.get("tool_call_id") or ""], sort_keys=True, default=str)


class Pending:
    """One model call verifiers is waiting on."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.reply: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()


class Episode:
    """One ``Env.run_episode`` in flight, advanced one model call at a time by the driver."""

    def __init__(self, server: Server, task: Any) -> None:
        self.id = uuid.uuid4().hex
        self.server = server
        self.task = task
        self.calls: asyncio.Queue[Pending] = asyncio.Queue()
        self.pending: Pending | None = None
        self.shown: list[str] = []  # every message the driver has, comparable()
        self.turns = 0
        self.rewrites = 0
        self.tool_mismatch = False
        self.trace_ids: list[str] = []
        self.run: asyncio.Task[Any] = asyncio.create_task(self._run())
        self.env_s = 0.0  # verifiers' own time: from an answer (or the start) to its next call or the end
        self._since = time.perf_counter()

    async def _run(self) -> Any:
        def minted(trace: Any) -> None:
            self.trace_ids.append(trace.id)
            self.server.by_trace[trace.id] = self

        return await self.server.loaded.env.run_episode(self.task, self.server.ctx, on_trace=minted)

    async def advance(self) -> dict[str, Any]:
        """Wait for verifiers' next model call (the messages new to the driver) or the episode's end (its
        scores)."""
        call = asyncio.ensure_future(self.calls.get())
        done, _ = await asyncio.wait({call, self.run}, return_when=asyncio.FIRST_COMPLETED)
        self.env_s += time.perf_counter() - self._since
        if call in done:
            self.pending = call.result()
            return self._request(self.pending.body)
        call.cancel()
        return self._finished(self.run.result())

    def _request(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = list(body.get("messages") or [])
        seen = [comparable(m) for m in messages]
        agree = 0
        while agree < min(len(seen), len(self.shown)) and seen[agree] == self.shown[agree]:
            agree += 1
        rewritten = agree < len(self.shown)
        self.rewrites += int(rewritten)
        new = messages[len(self.shown):]
        self.shown = seen
        tools = body.get("tools") or []
        if tools != self.server.tools:
            self.tool_mismatch = True
        out: dict[str, Any] = {"done": False, "messages": new, "rewritten": rewritten, "diverged_at": agree,
                               "tools_match": tools == self.server.tools, "turn": self.turns}
        if self.server.expert is not None:
            out["expert"] = self.server.expert(self.task.data.model_dump(mode="json"), messages, tools)
        return out

    def answer(self, message: dict[str, Any]) -> None:
        """Answer the parked model call with the driver's assistant message (verifiers' wire form)."""
        if self.pending is None or self.pending.reply.done():
            raise ValueError("no model call is waiting for an answer")
        calls = [{"id": str(c.get("id") or f"call_{self.turns}_{i}"), "type": "function",
                  "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))}}
                 for i, c in enumerate(message.get("tool_calls") or [])]
        wire: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        if calls:
            wire["tool_calls"] = calls
        self.shown.append(comparable(wire))
        self.turns += 1
        self.pending.reply.set_result(wire)
        self.pending = None
        self._since = time.perf_counter()

    def _finished(self, episode: Any) -> dict[str, Any]:
        from verifiers.v1.dialects.chat import message_to_wire

        for trace_id in self.trace_ids:
            self.server.by_trace.pop(trace_id, None)
        self.server.episodes.pop(self.id, None)
        traces = list(episode.traces)
        trace = traces[-1] if traces else None
        errors = [f"{e.type}: {e.message}" for e in (trace.errors if trace else [])]
        errors += [f"{e.type}: {e.message}" for e in episode.errors]
        rewards = {} if trace is None else {
            name: None if r is None else [r.score, r.weight] for name, r in trace.rewards.items()}
        metrics = {} if trace is None else {k: v for k, v in trace.metrics.items() if v is not None}
        transcript = [] if trace is None or not trace.branches else [
            message_to_wire(m) for m in trace.branches[-1].messages]
        return {"done": True, "ok": bool(episode.ok), "rewards": rewards, "metrics": metrics,
                "reward": trace.reward if trace else 0.0, "stop": trace.stop_condition if trace else None,
                "errors": [e.splitlines()[0][:500] for e in errors], "turns": trace.num_turns if trace else 0,
                "rewrites": self.rewrites, "tool_mismatch": self.tool_mismatch, "env_s": self.env_s,
                "transcript": transcript}

    async def cancel(self) -> None:
        if self.pending is not None and not self.pending.reply.done():
            self.pending.reply.set_exception(RuntimeError("the episode was closed by agentbridge"))
        self.run.cancel()
        with contextlib.suppress(BaseException):
            await self.run
        for trace_id in self.trace_ids:
            self.server.by_trace.pop(trace_id, None)
        self.server.episodes.pop(self.id, None)


# ------------------------------------------------------------------------------------------------ the server


def _expert(path: str | None) -> Any:
    if not path:
        return None
    module, _, name = path.partition(":")
    fn = getattr(importlib.import_module(module), name, None)
    if not callable(fn):
        raise ValueError(f"expert {path!r} is not a function")
    return fn


class Server:
    def __init__(self, args: dict[str, Any]) -> None:
        import verifiers.v1 as vf

        self.loaded = Loaded(args)
        self.expert = _expert(args.get("expert"))
        self.episodes: dict[str, Episode] = {}
        self.by_trace: dict[str, Episode] = {}
        self.tools: list[dict[str, Any]] = []
        self.port = 0
        self.ctx: Any = None
        self.vf = vf

    def info(self) -> dict[str, Any]:
        import verifiers

        env = self.loaded.env
        return {"verifiers": verifiers.__version__, "env_id": self.loaded.config.env_id,
                "env": type(env).__name__, "taskset": type(env.taskset).__name__,
                "task": self.loaded.task_cls.__name__, "seat": self.loaded.seat,
                "replaced_harness": self.loaded.default_harness, "tools": self.tools,
                "rewards": self.loaded.reward_weights(), "expert": self.expert is not None,
                "bounded": env.taskset.bounded, "open_episodes": len(self.episodes)}

    # -- routes
    async def health(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"ok": True})

    async def get_info(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response(self.info())

    async def tasks(self, request: Any) -> Any:
        from aiohttp import web

        body = await request.json()
        split = str(body.get("split", "train"))
        rows = self.loaded.split_rows(split, body.get("select"), bool(body.get("holdout", True)),
                                      int(body.get("max_rows", 100_000)))
        order = list(range(len(rows)))
        if body.get("shuffle", True):
            random.Random(int(body.get("seed", 0))).shuffle(order)
        size = body.get("size")
        chosen = [rows[i] for i in (order if size is None else order[: int(size)])]
        return web.json_response({"count": len(rows), "tasks": [
            {"idx": t.data.idx, "key": t.key, "name": t.data.name, "type": type(t).__name__,
             "prompt": t.data.prompt_text, "data": t.data.model_dump(mode="json")} for t in chosen]})

    async def start_episode(self, request: Any) -> Any:
        from aiohttp import web

        body = await request.json()
        try:
            task = self.loaded.task(body["task"])
        except Exception as e:  # noqa: BLE001 - a task that does not validate is the caller's error
            return web.json_response({"error": f"task does not validate as {self.loaded.data_cls.__name__}: "
                                               f"{type(e).__name__}: {str(e).splitlines()[0]}"}, status=400)
        episode = Episode(self, task)
        self.episodes[episode.id] = episode
        reply = await episode.advance()
        return web.json_response({"episode": episode.id, **reply})

    async def step(self, request: Any) -> Any:
        from aiohttp import web

        episode = self.episodes.get(request.match_info["id"])
        if episode is None:
            return web.json_response({"error": f"no episode {request.match_info['id']}"}, status=404)
        body = await request.json()
        try:
            episode.answer(body["message"])
        except ValueError as e:
            return web.json_response({"error": str(e)}, status=409)
        return web.json_response(await episode.advance())

    async def close_episode(self, request: Any) -> Any:
        from aiohttp import web

        episode = self.episodes.get(request.match_info["id"])
        if episode is not None:
            await episode.cancel()
        return web.json_response({"closed": episode is not None})

    async def chat(self, request: Any) -> Any:
        """The seat's model: park the call until the driver answers it."""
        from aiohttp import web

        body = await request.json()
        episode = self.by_trace.get(request.headers.get(SESSION_HEADER, ""))
        if episode is None:
            return web.json_response({"error": {"message": "no agentbridge episode for this rollout"}}, status=404)
        pending = Pending(body)
        await episode.calls.put(pending)
        try:
            message = await pending.reply
        except RuntimeError as e:
            return web.json_response({"error": {"message": str(e)}}, status=503)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        head = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "created": int(time.time()), "model": body.get("model")}
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        if not body.get("stream"):
            return web.json_response({**head, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": message, "finish_reason": finish}]})
        delta = dict(message)
        if "tool_calls" in delta:
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(delta["tool_calls"])]
        chunks = [{**head, "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                  {**head, "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                  {**head, "object": "chat.completion.chunk", "choices": [], "usage": usage}]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in chunks:
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def serve(self, port: int, parent: int | None) -> None:
        from aiohttp import web

        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_get("/health", self.health)
        app.router.add_get("/info", self.get_info)
        app.router.add_post("/tasks", self.tasks)
        app.router.add_post("/episodes", self.start_episode)
        app.router.add_post("/episodes/{id}/step", self.step)
        app.router.add_delete("/episodes/{id}", self.close_episode)
        app.router.add_post("/v1/chat/completions", self.chat)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        os.environ.setdefault(API_KEY_VAR, "agentbridge")
        self.ctx = self.vf.ModelContext(model="agentbridge", client=self.vf.EvalClientConfig(
            base_url=f"http://127.0.0.1:{self.port}/v1", api_key_var=API_KEY_VAR))
        self.tools = await self.loaded.tools()
        logging.getLogger().setLevel(logging.WARNING)  # MCPServer() set the root logger to INFO
        async with self.loaded.env.serving():  # the taskset's shared tool servers and the interception
            print(f"AGENTBRIDGE_VERIFIERS_URL http://127.0.0.1:{self.port}", flush=True)
            # from here on problems reach the caller over HTTP; stdout and stderr (this process's and every tool
            # server's it starts) go to $AGENTBRIDGE_VERIFIERS_LOG, else nowhere: nobody reads the pipes any more,
            # and a long run's log lines cannot pile up
            sink = os.open(os.environ.get("AGENTBRIDGE_VERIFIERS_LOG") or os.devnull,
                           os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            sys.stdout.flush()
            os.dup2(sink, 1)
            os.dup2(sink, 2)
            os.close(sink)
            while parent is None or os.getppid() == parent:  # go when the process that started us goes
                await asyncio.sleep(1.0)
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the bridge's environment arguments, as JSON")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--path", action="append", default=[], help="a folder to import environments from")
    parser.add_argument("--parent", type=int, default=None, help="exit when this process is gone")
    options = parser.parse_args()
    for folder in reversed(options.path):
        sys.path.insert(0, folder)
    if options.path:  # the toolsets' servers are `python -m module` subprocesses: they import from there too
        os.environ["PYTHONPATH"] = os.pathsep.join([*options.path, *filter(None, [os.environ.get("PYTHONPATH")])])
    for name in ("verifiers", "httpx", "aiohttp.access", "mcp", "uvicorn"):  # per-request INFO lines: not kept
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        server = Server(json.loads(options.config))
    except Exception as e:  # noqa: BLE001 - one line for the process that started us
        print(f"AGENTBRIDGE_VERIFIERS_ERROR {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
              flush=True)
        raise SystemExit(1) from None
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(server.serve(options.port, options.parent))


if __name__ == "__main__":
    main()
