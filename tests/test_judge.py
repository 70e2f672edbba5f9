"""``agentbridge serve`` and the ``core/judge`` reward against it: a real OpenAI-compatible server over a local model,
and what a judge that is down, paused or returning garbage costs (counted reward errors, never a crashed batch)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentbridge.judge import DEFAULT_RUBRIC, JudgeError, parse_score
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.spec import load_spec

REPLY = "Score: 7"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``agentbridge serve MODEL`` in its own process."""

    def __init__(self, model: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.proc = subprocess.Popen([sys.executable, "-m", "agentbridge.cli", "serve", model, "--port",
                                      str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env={**os.environ, "HF_HUB_OFFLINE": "1"})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.proc.stderr.read().decode()[-2000:] if self.proc.stderr else ""
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.3)
        raise AssertionError("the server did not start in 120 s")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            self.proc.wait(20)


@pytest.fixture(scope="module")
def judge_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """builtin:tiny fine-tuned to answer every grading request with ``Score: 7``: a real model whose replies parse."""
    import torch
    from transformers import AutoModelForCausalLM

    from agentbridge.models import load_tokenizer, resolve_model_path

    tok = load_tokenizer("builtin:tiny")
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path("builtin:tiny"))
    torch.manual_seed(0)
    reply = tok.encode(REPLY) + [tok.convert_tokens_to_ids("<|im_end|>")]
    rows = []
    for i in range(16):
        prompt = tok.apply_chat_template([{"role": "system", "content": DEFAULT_RUBRIC},
                                          {"role": "user", "content": f"Question: what is {i} + {i * 3}?\n"
                                                                      f"Reference answer: {i * 4}\nFinal answer: {i}"}],
                                         add_generation_prompt=True, tokenize=True, return_dict=False)
        rows.append((list(prompt), reply))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(60):
        prompt, target = rows[step % len(rows)]
        ids = torch.tensor([prompt + target])
        labels = torch.tensor([[-100] * len(prompt) + target])
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = tmp_path_factory.mktemp("judge-model")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def server(judge_model: Path) -> Iterator[Server]:
    s = Server(str(judge_model))
    yield s
    s.close()


def agent_with_judge(**args: Any) -> Agent:
    reward = json.dumps([{"id": "core/exact_answer", "weight": 1.0},
                         {"id": "core/judge", "weight": 0.5, "args": args}])
    spec = load_spec("examples/calculator.yaml", [f"reward={reward}", "model.path=builtin:tiny"])
    return Agent.from_spec(spec)


def run(agent: Agent, n: int) -> list[Any]:
    tasks = agent.tasks("eval", size=n)
    return asyncio.run(agent.run(tasks, lambda env: ScriptedPolicy.for_env(env, agent.tokenizer)))


def test_the_server_speaks_openai_chat_completions(server: Server) -> None:
    models = httpx.get(f"{server.url}/models", trust_env=False).json()
    assert models["object"] == "list" and len(models["data"]) == 1
    body = {"messages": [{"role": "user", "content": "Grade this."}], "max_tokens": 8, "temperature": 0}
    reply = httpx.post(f"{server.url}/chat/completions", json=body, timeout=60, trust_env=False).json()
    assert reply["object"] == "chat.completion"
    assert reply["choices"][0]["message"] == {"role": "assistant", "content": REPLY}
    from agentbridge.models import load_tokenizer

    assert reply["choices"][0]["finish_reason"] == "stop"
    assert reply["usage"]["completion_tokens"] == len(load_tokenizer("builtin:tiny").encode(REPLY)) + 1  # + EOS
    bad = httpx.post(f"{server.url}/chat/completions", json={"messages": []}, timeout=60, trust_env=False)
    assert bad.status_code == 422  # a request the protocol refuses, said as the protocol says it
    other = httpx.post(f"{server.url}/chat/completions", json={**body, "model": "gpt-x"}, timeout=60,
                       trust_env=False)
    assert other.status_code == 404 and "not served here" in other.json()["detail"]


def test_the_judge_scores_every_episode_through_the_server(server: Server) -> None:
    from agentbridge import judge

    agent = agent_with_judge(url=server.url, max_concurrency=4)
    trajs = run(agent, 12)
    assert [t.reward_components["core/judge"] for t in trajs] == [0.7] * 12
    assert all(t.metrics["reward/errors"] == 0 for t in trajs)
    assert all(t.reward == pytest.approx(t.reward_components["core/exact_answer"] + 0.5 * 0.7) for t in trajs)
    [client] = [j for j in judge._JUDGES.values() if j.args.url == server.url and j.args.max_concurrency == 4]
    sent = client.requests
    assert sent == len({json.dumps(client.body(t, task)) for t, task in zip(trajs, agent.tasks("eval", 12),
                                                                              strict=True)})
    run(agent, 12)  # the same requests again: answered from the cache
    assert client.requests == sent
    small = agent_with_judge(url=server.url, max_concurrency=3, cache_size=4)  # keeps the 4 latest replies
    run(small, 12)
    [bounded] = [j for j in judge._JUDGES.values() if j.args.url == server.url and j.args.max_concurrency == 3]
    assert len(bounded.cache) == 4
    before = bounded.requests
    run(small, 12)  # mostly evicted: asked again, the cache never above its size
    assert bounded.requests > before and len(bounded.cache) == 4


def test_a_paused_judge_costs_counted_errors_and_never_blocks_the_loop(judge_model: Path) -> None:
    """SIGSTOP the server: every request times out, each episode gets a reward error, the batch finishes, and the
    event loop keeps running meanwhile; after SIGCONT the same judge scores again."""
    s = Server(str(judge_model))
    try:
        agent = agent_with_judge(url=s.url, timeout_s=0.5, retries=1, backoff_s=0.1)
        tasks = agent.tasks("eval", size=8)
        s.proc.send_signal(signal.SIGSTOP)
        ticks = 0

        async def both() -> list[Any]:
            nonlocal ticks
            done = asyncio.Event()

            async def ticker() -> None:
                nonlocal ticks
                while not done.is_set():
                    ticks += 1
                    await asyncio.sleep(0.01)

            tick = asyncio.create_task(ticker())
            out = await agent.run(tasks, lambda env: ScriptedPolicy.for_env(env, agent.tokenizer))
            done.set()
            await tick
            return out

        started = time.monotonic()
        trajs = asyncio.run(both())
        took = time.monotonic() - started
        assert all(t.metrics["reward/errors"] == 1 and t.reward_components["core/judge"] == 0.0 for t in trajs)
        assert all("no reply within 0.5s (after 2 attempts)" in (t.error or "") for t in trajs)
        assert all(t.finish_reason == "done" for t in trajs)  # a reward error, not a failed episode
        assert ticks >= 0.5 * took / 0.01 * 0.5  # the loop ran while every request waited
        s.proc.send_signal(signal.SIGCONT)  # the same server scores again (a timeout that any machine meets)
        again = agent_with_judge(url=s.url, timeout_s=60, retries=1, backoff_s=0.1)
        assert [t.reward_components["core/judge"] for t in run(again, 8)] == [0.7] * 8
    finally:
        s.close()


def test_a_judge_killed_mid_run_costs_the_rest_of_the_episodes_a_reward_error(judge_model: Path) -> None:
    s = Server(str(judge_model))
    agent = agent_with_judge(url=s.url, retries=1, backoff_s=0.05, timeout_s=10)
    first = run(agent, 4)
    s.proc.kill()
    s.proc.wait(10)
    rest = asyncio.run(agent.run(agent.tasks("eval", size=12)[4:], lambda env: ScriptedPolicy.for_env(
        env, agent.tokenizer)))
    assert [t.reward_components["core/judge"] for t in first] == [0.7] * 4
    assert len(rest) == 8 and all(t.metrics["reward/errors"] == 1 for t in rest)
    assert all("ConnectError" in (t.error or "") for t in rest), rest[0].error


class Garbage(BaseHTTPRequestHandler):
    """An HTTP server that is not an OpenAI-compatible one: 200 with a body that is not JSON, or a 503."""

    status = 200
    calls = 0

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        type(self).calls += 1
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = b"<html>not json" if self.status == 200 else b"busy"
        self.send_response(self.status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_malformed_replies_and_a_model_that_says_no_score_are_counted_errors() -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Garbage)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        trajs = run(agent_with_judge(url=url, retries=2, backoff_s=0.01), 4)
        assert all(t.metrics["reward/errors"] == 1 for t in trajs)
        assert all("the reply is not a chat completion: '<html>not json'" in (t.error or "") for t in trajs)
        Garbage.status, Garbage.calls = 503, 0
        trajs = run(agent_with_judge(url=url, retries=2, backoff_s=0.01, model="m"), 4)
        assert all("HTTP 503 (after 3 attempts)" in (t.error or "") for t in trajs)
        assert Garbage.calls == 4 * 3  # each episode's request retried twice
    finally:
        httpd.shutdown()
    with pytest.raises(JudgeError, match="holds no score"):
        parse_score(".st.st.st", 10)
    with pytest.raises(JudgeError, match="outside"):
        parse_score("Score: 11", 10)
    assert parse_score("Score: 3.5", 10) == 0.35 and parse_score(" 8 ", 10) == 0.8


def test_an_untrained_judge_model_gives_counted_errors_not_a_crash() -> None:
    s = Server("builtin:tiny")
    try:
        trajs = run(agent_with_judge(url=s.url, max_tokens=8), 4)
    finally:
        s.close()
    assert all(t.metrics["reward/errors"] == 1 and "holds no score" in (t.error or "") for t in trajs)


def test_judge_and_reward_model_arguments_are_checked_before_any_run() -> None:
    from agentbridge.plugins import get_plugins
    from agentbridge.spec import SpecError

    reward = json.dumps([{"id": "core/judge", "args": {"urll": "http://h/v1", "timeout_s": -1}},
                         {"id": "core/reward_model", "args": {"path": "builtin:tiny-rm", "squash": "tanh"}}])
    with pytest.raises(SpecError) as info:
        load_spec("examples/calculator.yaml", [f"reward={reward}"], registries=get_plugins().registries)
    said = "\n".join(info.value.problems)
    assert "reward[0].args.urll: unknown argument; did you mean 'url'?" in said
    assert "reward[0].args.url: required argument is missing" in said
    assert "reward[0].args.timeout_s" in said and "greater than 0" in said
    assert "reward[1].args.squash" in said and len(info.value.problems) == 4, said
