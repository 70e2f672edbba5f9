"""The OpenEnv bridge against real OpenEnv servers (OpenEnv's own ``create_app`` in ``.venv-openenv``, made by
``server_env.sh`` on first use): the action schema and the MCP tools as tools, rewards and done flags through the
driver with the expert, a server killed mid-run (that episode ``error``, the others done, the next one after a
restart fine), a server answering nonsense, compile for every backend, and a short training run on CPU."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import websockets
from click.testing import CliRunner
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

from agentbridge.cli import main
from agentbridge.env import Task
from agentbridge.rewards import PROCESS
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.spec import load_spec
from agentbridge.testing import check_environment, short_training_run
from agentbridge.trajectory import Trajectory
from agentbridge_openenv.data import openenv_seeds
from agentbridge_openenv.env import OpenEnvEnvironment, render, success
from agentbridge_openenv.protocol import OpenEnvError
from agentbridge_openenv.server import OpenEnvServer, free_port, server_python

SPEC = "examples/openenv.yaml"
RESET = {"low": 1, "high": 32, "max_guesses": 6}


@pytest.fixture(scope="session")
def openenv_python() -> Path:
    """The server venv's python (``server_env.sh`` creates ``.venv-openenv`` the first time)."""
    try:
        return server_python()
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def action_server(openenv_python: Path) -> Iterator[OpenEnvServer]:
    with OpenEnvServer(openenv_python, "action") as server:
        yield server


@pytest.fixture(scope="session")
def mcp_server(openenv_python: Path) -> Iterator[OpenEnvServer]:
    with OpenEnvServer(openenv_python, "mcp") as server:
        yield server


def _spec_sets(url: str) -> list[str]:
    return [f"environment.args.url={url}"]


def _run(agent: Agent, tasks: list[Task], **kwargs: Any) -> list[Trajectory]:
    return asyncio.run(agent.run(tasks, lambda env: ScriptedPolicy.for_env(env, agent.tokenizer), **kwargs))


def test_observations_render_as_text() -> None:
    assert render({"message": "hi", "metadata": {}}) == "hi"
    assert render({"message": "hi", "low": 1, "metadata": {}}) == "message: hi\nlow: 1"
    assert render({"content": [{"type": "text", "text": "4 is wrong"}], "data": "x", "is_error": False}) == "4 is wrong"
    assert render({"metadata": {"message": "ready"}}) == "ready"


@pytest.mark.parametrize("kind", ["action", "mcp"])
def test_the_expert_solves_every_episode(kind: str, request: pytest.FixtureRequest) -> None:
    server: OpenEnvServer = request.getfixturevalue(f"{kind}_server")
    env = functools.partial(OpenEnvEnvironment, url=server.url)
    check_environment(env, openenv_seeds("eval", 4, reset=RESET), rewards={"openenv/success": success}, max_turns=6)
    [tool_names] = {tuple(t["function"]["name"] for t in env().tool_schemas())}
    assert tool_names == (("act",) if kind == "action" else ("guess", "give_up"))


@pytest.mark.parametrize("kind", ["action", "mcp"])
def test_a_multi_turn_episode_maps_rewards_and_done(kind: str, request: pytest.FixtureRequest) -> None:
    server: OpenEnvServer = request.getfixturevalue(f"{kind}_server")
    agent = Agent.from_spec(load_spec(SPEC, [*_spec_sets(server.url), "environment.args.env_name=null"]))
    trajs = _run(agent, agent.tasks("eval", 6))
    for t in trajs:
        assert t.finish_reason == "done" and t.error is None
        assert t.reward_components["openenv/success"] == 1.0 and t.reward_components[PROCESS] == 1.0
        assert [turn.reward for turn in t.turns] == [0.0] * (len(t.turns) - 1) + [1.0]  # only the hit scores
        assert t.metrics["openenv/done"] == 1.0 and t.metrics["tools/failures"] == 0.0
    assert max(len(t.turns) for t in trajs) > 2  # several steps in one session
    tool_replies = [m["content"] for m in trajs[0].messages if m["role"] == "tool"]
    assert tool_replies and all("wrong" in c for c in tool_replies)


def test_bad_actions_are_told_and_a_wrong_server_is_named(action_server: OpenEnvServer) -> None:
    async def play() -> None:
        env = OpenEnvEnvironment(url=action_server.url)
        await env.reset(openenv_seeds("eval", 1, reset=RESET)[0])
        call = {"id": "c", "type": "function", "function": {"name": "act", "arguments": {"guess": "many"}}}
        bad = await env.step({"role": "assistant", "content": "", "tool_calls": [call]})
        assert not bad.done and bad.metrics["tools/failures"] == 1.0
        assert bad.observation[0]["content"].startswith("Error: act failed: VALIDATION_ERROR")
        none = await env.step({"role": "assistant", "content": "sixteen"})
        assert not none.done and none.metrics == {"openenv/invalid_actions": 1.0}
        await env.close()
        with pytest.raises(OpenEnvError, match="serves 'guess', not environment.args.env_name 'chess'"):
            OpenEnvEnvironment(url=action_server.url, env_name="chess").tool_schemas()

    asyncio.run(play())


def test_a_server_killed_mid_run_errors_that_episode_and_the_next_reconnects(openenv_python: Path) -> None:
    server = OpenEnvServer(openenv_python, "action").start()
    try:
        agent = Agent.from_spec(load_spec(SPEC, _spec_sets(server.url)))
        tasks = agent.tasks("eval", 6)
        victim = tasks[2].id
        others_done = asyncio.Event()
        finished: list[str] = []

        def done(traj: Trajectory) -> None:
            finished.append(traj.task_id)
            if len(finished) == len(tasks) - 1:
                others_done.set()

        class KillOnTheVictimsSecondTurn:
            """The expert, except that the victim's second turn waits for the others, then kills the server."""

            def __init__(self, env: Any) -> None:
                self.env, self.expert, self.turns = env, ScriptedPolicy.for_env(env, agent.tokenizer), 0

            async def generate(self, *args: Any, **kwargs: Any) -> Any:
                self.turns += 1
                if self.env.task.id == victim and self.turns == 2:  # mid-episode: the session is open
                    await others_done.wait()
                    server.kill()
                return await self.expert.generate(*args, **kwargs)

        trajs = asyncio.run(agent.run(tasks, lambda env: KillOnTheVictimsSecondTurn(env), on_done=done))
        by_id = {t.task_id: t for t in trajs}
        dead = by_id.pop(victim)
        assert dead.finish_reason == "error" and dead.reward == 0.0 and len(dead.turns) == 2, dead.error
        assert dead.error is not None and "\n" not in dead.error
        assert f"OpenEnv server ws://127.0.0.1:{server.port}/ws: connection lost during step" in dead.error
        assert all(t.finish_reason == "done" and t.reward_components["openenv/success"] == 1.0
                   for t in by_id.values())
        [down] = _run(agent, tasks[:1])  # nobody listening: the episode errs at reset, with where
        assert down.finish_reason == "error" and "cannot connect" in (down.error or "")
        server.start()  # same port
        again = _run(agent, tasks)
        assert all(t.finish_reason == "done" and t.reward_components["openenv/success"] == 1.0 for t in again)
    finally:
        server.stop()


class NonsenseServer:
    """A fake OpenEnv server: discovery copied from a real one, then a session that answers ``reset`` well and
    the first ``step`` with ``reply`` (garbage, a wrong frame, a dropped connection, or silence)."""

    def __init__(self, real_url: str, reply: str | None) -> None:
        import urllib.request

        self.pages = {p: urllib.request.urlopen(real_url + p).read() for p in ("/schema", "/metadata")}
        self.reply = reply
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        self.stopped: asyncio.Future[None] | None = None
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._main(),), daemon=True)

    def _http(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.path in self.pages:
            response = connection.respond(200, self.pages[request.path].decode())
            response.headers["Content-Type"] = "application/json"
            return response
        return None

    async def _session(self, ws: ServerConnection) -> None:
        reset = {"type": "observation", "data": {"observation": {"message": "ready", "low": 1, "high": 32},
                                                 "reward": 0.0, "done": False}}
        with contextlib.suppress(websockets.exceptions.ConnectionClosed):
            async for raw in ws:
                kind = json.loads(raw)["type"]
                if kind == "reset":
                    await ws.send(json.dumps(reset))
                elif kind == "step":
                    if self.reply == "silent":
                        continue
                    if self.reply is None:
                        await ws.close()
                        return
                    await ws.send(self.reply)

    async def _main(self) -> None:
        self.stopped = self.loop.create_future()
        async with serve(self._session, "127.0.0.1", self.port, process_request=self._http):
            self.ready.set()
            await self.stopped

    def __enter__(self) -> NonsenseServer:
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(lambda: self.stopped is not None and self.stopped.set_result(None))
        self.thread.join(10)


@pytest.mark.parametrize(("reply", "expected"), [
    ("{not json", "reply to step is not JSON"),
    ('{"type": "observation", "data": {"observation": "42", "done": "maybe"}}', "malformed observation"),
    ('{"type": "state", "data": {}}', "expected a 'observation' frame, got 'state'"),
    ('{"type": "error", "data": {"message": "boom", "code": "SESSION_ERROR"}}', "server error SESSION_ERROR: boom"),
    (None, "connection lost during step"),
    ("silent", "no reply to step within 1s; connection dropped"),
])
def test_a_server_answering_nonsense_errors_the_episode(reply: str | None, expected: str,
                                                        action_server: OpenEnvServer) -> None:
    with NonsenseServer(action_server.url, reply) as fake:
        agent = Agent.from_spec(load_spec(SPEC, [*_spec_sets(fake.url), "environment.args.timeout_s=1"]))
        [traj] = _run(agent, agent.tasks("eval", 1))
    assert traj.finish_reason == "error" and traj.reward == 0.0 and len(traj.turns) == 1
    assert expected in (traj.error or "") and f"ws://127.0.0.1:{fake.port}/ws" in (traj.error or "")


def test_the_example_validates_and_compiles_for_every_backend(tmp_path: Path, action_server: OpenEnvServer) -> None:
    result = CliRunner().invoke(main, ["validate", SPEC])
    assert result.exit_code == 0, result.output
    for backend in ("trl", "verl", "openrlhf"):
        result = CliRunner().invoke(main, ["compile", SPEC, "--backend", backend, "-o", str(tmp_path / backend),
                                           "--set", f"environment.args.url={action_server.url}",
                                           "--set", "data.train.size=8", "--set", "data.eval.size=4"])
        assert result.exit_code == 0, result.output
        manifest = json.loads((tmp_path / backend / "manifest.json").read_text())
        assert manifest["tasks"] == {"train": 8, "eval": 4}


def test_a_short_training_run_on_cpu(tmp_path: Path, action_server: OpenEnvServer) -> None:
    rows = short_training_run(SPEC, tmp_path / "run", [*_spec_sets(action_server.url),
                                                       "algorithm.warm_start.demos=16",
                                                       "algorithm.warm_start.epochs=1", "data.train.size=8",
                                                       "data.eval.size=4", "backend.options.eval_size=4"])
    assert [r["step"] for r in rows] == [1, 2] and all("reward/openenv/success" in r for r in rows)
    assert json.loads((tmp_path / "run" / "eval.json").read_text())["after_rl"]["n"] == 4
