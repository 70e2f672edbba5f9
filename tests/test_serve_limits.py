"""``agentbridge serve`` under hostile and careless input: real servers on loopback, real HTTP requests.

Every malformed request gets a 4xx with a JSON error in OpenAI's shape; oversized bodies 413; requests over the
``max_tokens`` / ``n`` caps 4xx; a full queue 503; a request past its deadline 504 and its generation stops; a
client that goes away stops its generation (seen in the server's counters, not by timing); SIGTERM ends the
process. No assertion here depends on how fast the machine is beyond "4000 tokens take more than half a second".
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from agentbridge.serve import ApiError, Limits, graceful_server, make_app, parse_request

LONG = 4000  # tokens of a request that keeps a decoding slot busy (ignore_eos) until it is cancelled
USER = [{"role": "user", "content": "Say something."}]


class Served:
    """A server on a loopback port: its base url, and its app when it runs in this process."""

    def __init__(self, url: str, app: Any = None) -> None:
        self.url = url
        self.app = app
        self.port = int(url.rsplit(":", 1)[1])

    def post(self, body: bytes | dict[str, Any], **kwargs: Any) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return httpx.post(f"{self.url}/v1/chat/completions", content=content, trust_env=False, timeout=120,
                          headers={"content-type": "application/json"}, **kwargs)

    def metrics(self) -> dict[str, int]:
        text = httpx.get(f"{self.url}/metrics", trust_env=False, timeout=30).text
        return {line.split()[0].removeprefix("agentbridge_serve_"): int(line.split()[1])
                for line in text.splitlines() if line.strip()}

    def wait_for(self, check: Callable[[dict[str, int]], bool], what: str, timeout: float = 120) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics()
            if check(m):
                return m
            assert time.monotonic() < deadline, f"waited {timeout} s for {what}; metrics: {m}"
            time.sleep(0.05)


@contextmanager
def in_process(**limits: Any) -> Iterator[Served]:
    """``make_app("builtin:tiny", **limits)`` served by uvicorn in a thread on a free loopback port."""
    import uvicorn

    app = make_app("builtin:tiny", **limits)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = graceful_server(uvicorn.Config(app, log_level="error"), app.state.engine, 1.0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield Served(url, app)
    finally:
        server.should_exit = True
        thread.join(20)
        sock.close()


def send_raw(port: int, body: dict[str, Any]) -> socket.socket:
    """POST ``body`` on a plain socket and return it unread, so the test decides when the client goes away."""
    payload = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(payload) + payload)
    return s


def read_reply(s: socket.socket, timeout: float = 60) -> tuple[int, dict[str, Any]]:
    s.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, f"connection closed before a reply: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    while len(rest) < length:
        chunk = s.recv(65536)
        assert chunk, "connection closed mid-reply"
        rest += chunk
    return int(head.split()[1]), json.loads(rest[:length])


def hang_up(s: socket.socket) -> None:
    s.shutdown(socket.SHUT_RDWR)
    s.close()


def long_request(n: int = 1, tokens: int = LONG) -> dict[str, Any]:
    return {"messages": USER, "max_tokens": tokens, "ignore_eos": True, "n": n, "temperature": 0}


def assert_openai_error(r: httpx.Response, status: int | tuple[int, ...], text: str = "") -> dict[str, Any]:
    assert r.status_code in ((status,) if isinstance(status, int) else status), r.text
    assert r.headers["content-type"].startswith("application/json"), r.headers
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert text in error["message"] and "\n" not in error["message"], error
    assert r.json()["detail"] == error["message"]
    return error


@pytest.fixture(scope="module")
def server() -> Iterator[Served]:
    """Two decoding slots, one queued sequence; caps low enough to hit."""
    with in_process(max_batch=2, max_queue=1, max_n=2, max_tokens_limit=4090) as s:
        yield s


def deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


MALFORMED: list[tuple[str, bytes, int, str]] = [
    ("NaN temperature", b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}', 400, "not valid JSON"),
    ("Infinity top_p", b'{"messages": [{"role": "user", "content": "x"}], "top_p": Infinity}', 400, "not valid JSON"),
    ("-Infinity in an unknown field", b'{"messages": [{"role": "user", "content": "x"}], "x": -Infinity}', 400,
     "not valid JSON"),
    ("content null", b'{"messages": [{"role": "user", "content": null}]}', 422, "messages[0].content"),
    ("tool_calls a string", b'{"messages": [{"role": "assistant", "content": null, "tool_calls": "call"}]}', 422,
     "messages[0].tool_calls"),
    ("tool_calls on a user message", b'{"messages": [{"role": "user", "content": "x", "tool_calls": []}]}', 422,
     "only assistant messages"),
    ("tool call without a name", b'{"messages": [{"role": "assistant", "content": null, "tool_calls": '
                                 b'[{"type": "function", "function": {"arguments": "{}"}}]}]}', 422, "name"),
    ("content a number", b'{"messages": [{"role": "user", "content": 5}]}', 422, "messages[0].content"),
    ("content an image part", b'{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}', 422,
     "text parts"),
    ("messages null", b'{"messages": null}', 422, "messages"),
    ("messages missing", b'{"model": "builtin:tiny"}', 422, "messages"),
    ("messages empty", b'{"messages": []}', 422, "messages"),
    ("messages an object", b'{"messages": {"role": "user"}}', 422, "messages"),
    ("a message that is a string", b'{"messages": ["hello"]}', 422, "messages[0]"),
    ("unknown role", b'{"messages": [{"role": "wizard", "content": "x"}]}', 422, "messages[0].role"),
    ("max_tokens a string", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": "12"}', 422,
     "max_tokens"),
    ("max_tokens 0", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', 422, "max_tokens"),
    ("max_tokens 1e9", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1e9}', 422, "max_tokens"),
    ("max_tokens 10**400", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1' + b"0" * 400 + b"}",
     422, "max_tokens"),
    ("temperature a string", b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}', 422,
     "temperature"),
    ("temperature negative", b'{"messages": [{"role": "user", "content": "x"}], "temperature": -1}', 422,
     "temperature"),
    ("top_p 0", b'{"messages": [{"role": "user", "content": "x"}], "top_p": 0}', 422, "top_p"),
    ("n a boolean", b'{"messages": [{"role": "user", "content": "x"}], "n": true}', 422, "n"),
    ("seed a float", b'{"messages": [{"role": "user", "content": "x"}], "seed": 1.5}', 422, "seed"),
    ("stream true", b'{"messages": [{"role": "user", "content": "x"}], "stream": true}', 422, "stream"),
    ("100k-deep JSON", deep(100_000), 400, "not valid JSON"),
    ("100k-deep JSON in an unknown field", b'{"messages": [{"role": "user", "content": "x"}], "x": ' +
     deep(100_000) + b"}", 400, "not valid JSON"),
    ("lone surrogate", b'{"messages": [{"role": "user", "content": "\\ud800"}]}', 400, "not valid JSON"),
    ("lone low surrogate in a key", b'{"\\udc00": 1, "messages": [{"role": "user", "content": "x"}]}', 400,
     "not valid JSON"),
    ("invalid UTF-8", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, "not valid JSON"),
    ("not JSON", b"{messages", 400, "not valid JSON"),
    ("empty body", b"", 400, "not valid JSON"),
    ("trailing garbage", b'{"messages": [{"role": "user", "content": "x"}]} x', 400, "not valid JSON"),
    ("an array body", b'[{"role": "user", "content": "x"}]', 422, "body must be a JSON object, got array"),
    ("a string body", b'"hello"', 422, "got string"),
    ("a number body", b"5", 422, "got number"),
    ("a null body", b"null", 422, "got null"),
    ("a boolean body", b"true", 422, "got boolean"),
]


@pytest.mark.parametrize("name, body, status, text", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_every_malformed_request_gets_a_4xx_json_error(server: Served, name: str, body: bytes, status: int,
                                                       text: str) -> None:
    error = assert_openai_error(server.post(body), status, text)
    assert error["type"] == "invalid_request_error"


def test_the_validation_is_the_same_without_a_server() -> None:
    """``parse_request`` is what the endpoint runs: the caps come from the limits it is given."""
    body = json.dumps({"messages": USER, "max_tokens": 100, "n": 3}).encode()
    assert parse_request(body, Limits(max_n=4, max_tokens_limit=100)).n == 3
    for limits, param in ((Limits(max_n=2), "n"), (Limits(max_tokens_limit=99), "max_tokens")):
        with pytest.raises(ApiError, match="must be at most") as e:
            parse_request(body, limits)
        assert e.value.param == param and e.value.status == 422
    with pytest.raises(ApiError, match="at most 2 on this server"):  # n never exceeds the decoding slots
        parse_request(body, Limits(max_n=8, max_batch=2))
    with pytest.raises(ValueError, match="max_body_bytes"):
        Limits(max_body_bytes=0)


def test_unknown_model_route_and_method_are_json_errors_too(server: Served) -> None:
    assert_openai_error(server.post({"messages": USER, "model": "gpt-x"}), 404, "not served here")
    assert_openai_error(httpx.get(f"{server.url}/v1/chat/completions", trust_env=False), 405)
    assert_openai_error(httpx.get(f"{server.url}/v2/nothing", trust_env=False), 404)


def test_a_10_mb_body_gets_413_before_it_is_read(server: Served) -> None:
    big = b'{"messages": [{"role": "user", "content": "' + b"a" * 10_000_000 + b'"}]}'
    before = server.metrics().get("refused_413_total", 0)
    error = assert_openai_error(server.post(big), 413, "larger than")
    assert error["code"] == "body_too_large"

    def chunked() -> Iterator[bytes]:  # no Content-Length: counted while reading
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(100):
            yield b"a" * 100_000
        yield b'"}]}'

    r = httpx.post(f"{server.url}/v1/chat/completions", content=chunked(), trust_env=False, timeout=120)
    assert "content-length" not in r.request.headers
    assert_openai_error(r, 413, "larger than")
    assert server.metrics()["refused_413_total"] == before + 2
    assert server.post({"messages": USER, "max_tokens": 2}).status_code == 200  # and the server goes on


def test_requests_over_the_max_tokens_and_n_caps_are_refused_not_trimmed(server: Served) -> None:
    for field in ("max_tokens", "max_completion_tokens"):
        error = assert_openai_error(server.post({"messages": USER, field: 4091}), 422, "at most 4090")
        assert error["param"] == field and error["code"] == "limit_exceeded"
    error = assert_openai_error(server.post({"messages": USER, "n": 3}), 422, "at most 2")
    assert error["param"] == "n"
    error = assert_openai_error(server.post({"messages": USER, "max_tokens": 4090}), 400, "context is 4096")
    assert error["code"] == "context_length_exceeded"


def test_a_valid_request_is_answered_with_n_choices_and_seeded_sampling_repeats(server: Served) -> None:
    body = {"messages": USER, "max_tokens": 6, "n": 2, "seed": 7, "temperature": 1.0, "top_p": 0.9,
            "ignore_eos": True, "stop": ["\n"], "user": "someone"}  # unknown OpenAI fields are ignored
    first = server.post(body).json()
    assert [c["index"] for c in first["choices"]] == [0, 1]
    assert all(c["finish_reason"] == "length" for c in first["choices"])
    assert first["usage"]["completion_tokens"] == 12
    again = server.post(body).json()
    assert [c["message"] for c in again["choices"]] == [c["message"] for c in first["choices"]]
    history = [{"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "4"}]
    assert server.post({"messages": history, "max_tokens": 2}).status_code == 200


def prompt_ids(text: str) -> list[int]:
    from agentbridge.models import load_tokenizer

    tok = load_tokenizer("builtin:tiny")
    return list(tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        tokenize=True, return_dict=False))


def generate_greedy(server: Served, text: str, tokens: int = 10) -> str:
    """What ``model.generate`` says to ``text``, greedy, decoded as the server decodes."""
    import torch

    from agentbridge.models import load_tokenizer

    tok = load_tokenizer("builtin:tiny")
    ids = prompt_ids(text)
    with torch.no_grad():
        out = server.app.state.engine.model.generate(torch.tensor([ids]), max_new_tokens=tokens, do_sample=False,
                                                     eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return str(tok.decode([t for t in out[0, len(ids):].tolist() if t != tok.eos_token_id], skip_special_tokens=True))


def test_greedy_decoding_matches_transformers_generate(server: Served) -> None:
    """The engine's own decode loop (left-padded cohorts, a cache shrunk as rows finish) gives the tokens
    ``model.generate`` gives for the same prompt, alone and with other requests decoding beside it."""
    prompts = ["Hi.", "Tell me a much longer story about a fox and a dog."]
    expected = [generate_greedy(server, text) for text in prompts]
    replies: list[str] = [""] * len(prompts)

    def ask(i: int) -> None:
        body = {"messages": [{"role": "user", "content": prompts[i]}], "max_tokens": 10, "temperature": 0}
        replies[i] = server.post(body).json()["choices"][0]["message"]["content"]

    ask(0)
    assert replies[0] == expected[0]  # alone
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert replies == expected


def test_a_request_that_arrives_mid_generation_joins_the_running_batch(server: Served) -> None:
    """A request admitted while another decodes gets its own prefill, then is merged into the running cohort (one
    forward per step for both), and still says exactly what ``model.generate`` says."""
    base = len(prompt_ids(USER[0]["content"]))
    text = "Say something."
    while len(prompt_ids(text)) < base + 40:  # a little longer than the running request's prompt
        text += " and more"
    expected = generate_greedy(server, text)
    before = server.metrics()
    a = send_raw(server.port, long_request())
    try:
        server.wait_for(lambda m: m["tokens_generated_total"] > before["tokens_generated_total"],
                        "the first request to decode")
        body = {"messages": [{"role": "user", "content": text}], "max_tokens": 10, "temperature": 0}
        assert server.post(body).json()["choices"][0]["message"]["content"] == expected
        assert server.metrics()["cohorts_merged_total"] > before["cohorts_merged_total"]
    finally:
        hang_up(a)
    server.wait_for(lambda m: m["running_sequences"] == 0, "the server to idle")


def test_a_full_queue_gets_503_and_a_queued_client_that_leaves_is_dropped(server: Served) -> None:
    a = send_raw(server.port, long_request(n=2))  # both decoding slots
    try:
        server.wait_for(lambda m: m["running_sequences"] == 2, "the first request to run")
        b = send_raw(server.port, long_request())  # the one queued sequence
        server.wait_for(lambda m: m["waiting_sequences"] == 1, "the second request to queue")
        error = assert_openai_error(server.post({"messages": USER, "max_tokens": 2}), 503, "busy")
        assert error["code"] == "queue_full" and error["type"] == "server_error"
        before = server.metrics()["requests_disconnected_total"]
        hang_up(b)
        server.wait_for(lambda m: m["waiting_sequences"] == 0 and m["admitted_sequences"] == 2,
                        "the queued request to leave")
        assert server.metrics()["requests_disconnected_total"] == before + 1
    finally:
        hang_up(a)
    server.wait_for(lambda m: m["running_sequences"] == 0 and m["admitted_sequences"] == 0, "the server to idle")
    assert server.post({"messages": USER, "max_tokens": 2}).status_code == 200


def test_a_client_that_goes_away_stops_its_generation(server: Served) -> None:
    before = server.metrics()
    s = send_raw(server.port, long_request())
    server.wait_for(lambda m: m["running_sequences"] == 1, "the request to run")
    hang_up(s)
    after = server.wait_for(lambda m: m["running_sequences"] == 0, "the generation to stop")
    generated = after["tokens_generated_total"] - before["tokens_generated_total"]
    assert after["requests_disconnected_total"] == before["requests_disconnected_total"] + 1
    assert after["requests_finished_total"] == before["requests_finished_total"]
    assert 0 < generated < LONG  # stopped part way: the rest of the 4000 tokens were never generated
    time.sleep(0.5)
    assert server.metrics()["tokens_generated_total"] == after["tokens_generated_total"]


def test_a_request_past_its_deadline_gets_504_and_stops_generating() -> None:
    with in_process(request_timeout_s=0.5, body_timeout_s=0.5, max_tokens_limit=LONG) as s:
        error = assert_openai_error(s.post(long_request()), 504, "no reply within 0.5 s")
        assert error["type"] == "timeout"
        m = s.wait_for(lambda m: m["running_sequences"] == 0, "the generation to stop")
        assert m["requests_timed_out_total"] == 1 and m["tokens_generated_total"] < LONG
        assert m["requests_finished_total"] == 0
        slow = socket.create_connection(("127.0.0.1", s.port))  # promises 100 bytes, sends 10, then waits
        slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n\r\n"
                     b'{"message')
        status, reply = read_reply(slow)
        slow.close()
        assert status == 408 and "did not arrive within 0.5 s" in reply["error"]["message"]


def test_sigterm_stops_a_busy_server_process() -> None:
    """``agentbridge serve`` in its own process, one request generating: SIGTERM ends the process, and the
    request gets a JSON reply (503 once the grace period ends) rather than a dropped connection."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "agentbridge.cli", "serve", "builtin:tiny", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    served = Served(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            try:
                if httpx.get(f"{served.url}/health", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.3)
        s = send_raw(port, long_request(tokens=2048))  # the default cap
        served.wait_for(lambda m: m["running_sequences"] == 1, "the request to run")
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        status, reply = read_reply(s)
        assert status in (200, 503), reply
        assert status == 200 or "shutting down" in reply["error"]["message"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
