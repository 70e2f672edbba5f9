"""The retrieval server under hostile and careless input, over real HTTP on loopback: every malformed body gets a
4xx with a one-line JSON error, an oversized one 413 before it is read, a full server 503, a search past the
request timeout 504, a failing retriever a JSON 500, and SIGTERM ends a server process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from serving import free_port, serving
from test_retrieval import CORPUS

from agentbridge_search.retrievers import Hits, TantivyRetriever
from agentbridge_search.server import RequestError, parse_request

VALID = {"queries": ["Lyon"], "topk": 1}


class Gated:
    """A retriever whose searches wait until the test opens the gate; ``entered`` counts searches started."""

    kind = "gated"

    def __init__(self, fail: bool = False) -> None:
        self.inner = TantivyRetriever(CORPUS, cache=False)
        self.passages = self.inner.passages
        self.gate = threading.Event()
        self.entered = 0
        self.fail = fail

    def search(self, queries: Sequence[str], topk: int) -> Hits:
        self.entered += 1
        if self.fail:
            raise RuntimeError("index file vanished")
        assert self.gate.wait(60), "the test never opened the gate"
        return self.inner.search(queries, topk)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    from agentbridge_search.server import create_app

    with serving(create_app(TantivyRetriever(CORPUS, cache=False), max_batch=8, max_topk=10)) as base:
        yield base


def post(url: str, body: bytes | dict[str, Any]) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{url}/retrieve", content=content, headers={"content-type": "application/json"},
                      trust_env=False, timeout=60)


def assert_error(r: httpx.Response, status: int, text: str = "") -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    reason = r.json()["error"]
    assert isinstance(reason, str) and text in reason and "\n" not in reason, reason


def deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


MALFORMED: list[tuple[str, bytes, int, str]] = [
    ("100k-deep JSON", deep(100_000), 400, "not valid JSON"),
    ("100k-deep JSON in an unknown field", b'{"queries": ["a"], "x": ' + deep(100_000) + b"}", 400,
     "not valid JSON"),
    ("lone surrogate", b'{"queries": ["\\ud800"]}', 400, "not valid JSON"),
    ("lone low surrogate", b'{"queries": ["a\\udc00b"]}', 400, "not valid JSON"),
    ("NaN topk", b'{"queries": ["a"], "topk": NaN}', 400, "not valid JSON"),
    ("Infinity in an unknown field", b'{"queries": ["a"], "x": Infinity}', 400, "not valid JSON"),
    ("invalid UTF-8", b'{"queries": ["\xc3\x28"]}', 400, "not valid JSON"),
    ("empty body", b"", 400, "not valid JSON"),
    ("trailing garbage", b'{"queries": ["a"]} []', 400, "not valid JSON"),
    ("null body", b"null", 422, "body must be a JSON object, got null"),
    ("string body", b'"Lyon"', 422, "body must be a JSON object, got string"),
    ("number body", b"3", 422, "got number"),
    ("queries null", b'{"queries": null}', 422, "queries: must be a list of strings, got null"),
    ("queries an object", b'{"queries": {"q": "a"}}', 422, "queries: must be a list of strings, got object"),
    ("a null query", b'{"queries": ["a", null]}', 422, "queries[1]: must be a string, got null"),
    ("a nested query", b'{"queries": [["a"]]}', 422, "queries[0]: must be a string, got array"),
    ("return_scores null", b'{"queries": ["a"], "return_scores": null}', 422, "return_scores: must be true or false"),
    ("topk a float", b'{"queries": ["a"], "topk": 1e2}', 422, "topk: must be an integer"),
    ("topk huge", b'{"queries": ["a"], "topk": 1' + b"0" * 400 + b"}", 422, "topk: must be between 1 and 10"),
    ("topk negative", b'{"queries": ["a"], "topk": -1}', 422, "topk: must be between 1 and 10"),
]


@pytest.mark.parametrize("name, body, status, text", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_every_malformed_request_gets_a_4xx_json_error(url: str, name: str, body: bytes, status: int,
                                                       text: str) -> None:
    assert_error(post(url, body), status, text)


def test_null_topk_means_the_default_and_unknown_fields_are_ignored(url: str) -> None:
    r = post(url, {"queries": ["capital city of a country"], "topk": None, "trace": {"x": [1, 2]}})
    assert r.status_code == 200 and len(r.json()["result"][0]) == 3
    assert r.json() == post(url, {"queries": ["capital city of a country"], "topk": 3}).json()


def test_parse_request_is_the_endpoint_validation() -> None:
    assert parse_request(b'{"queries": ["a", "b"], "topk": 4}', max_batch=2, max_topk=4) == (["a", "b"], 4, False)
    with pytest.raises(RequestError, match="at most 1 per request") as e:
        parse_request(b'{"queries": ["a", "b"]}', max_batch=1)
    assert e.value.status == 413
    with pytest.raises(RequestError, match=r"queries\[0\]: longer than 3 characters"):
        parse_request(b'{"queries": ["abcd"]}', max_query_chars=3)


def test_a_10_mb_body_gets_413_with_or_without_content_length(url: str) -> None:
    big = b'{"queries": ["' + b"a" * 10_000_000 + b'"]}'
    assert_error(post(url, big), 413, "larger than")

    def chunked() -> Iterator[bytes]:
        yield b'{"queries": ["'
        for _ in range(100):
            yield b"a" * 100_000
        yield b'"]}'

    r = httpx.post(f"{url}/retrieve", content=chunked(), trust_env=False, timeout=60)
    assert "content-length" not in r.request.headers
    assert_error(r, 413, "larger than")
    assert post(url, VALID).status_code == 200


def test_unknown_routes_and_methods_are_json(url: str) -> None:
    assert_error(httpx.get(f"{url}/retrieve", trust_env=False), 405)
    assert_error(httpx.get(f"{url}/nothing", trust_env=False), 404)


def wait_until(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.02)


def test_a_full_server_answers_503_and_recovers() -> None:
    from agentbridge_search.server import create_app

    retriever = Gated()
    app = create_app(retriever, max_concurrency=1, max_queue=1)
    replies: list[httpx.Response] = []
    with serving(app) as base:
        callers = [threading.Thread(target=lambda: replies.append(post(base, VALID))) for _ in range(2)]
        try:
            callers[0].start()
            wait_until(lambda: retriever.entered == 1, "the first search to start")
            callers[1].start()
            wait_until(lambda: app.state.admitted["requests"] == 2, "the second request to queue")
            assert_error(post(base, VALID), 503, "busy")
            assert app.state.stats["503"] == 1
        finally:
            retriever.gate.set()
            for t in callers:
                t.join(60)
        assert [r.status_code for r in replies] == [200, 200]
        wait_until(lambda: app.state.admitted["requests"] == 0, "the slots to free")
        assert post(base, VALID).status_code == 200


def test_a_search_past_the_request_timeout_gets_504() -> None:
    from agentbridge_search.server import create_app

    retriever = Gated()
    app = create_app(retriever, request_timeout_s=0.2)
    with serving(app) as base:
        try:
            assert_error(post(base, VALID), 504, "no reply within 0.2 s")
        finally:
            retriever.gate.set()
        wait_until(lambda: app.state.admitted["requests"] == 0, "the timed-out search to free its slot")
        assert post(base, VALID).status_code == 200


def test_a_failing_retriever_gets_a_json_500() -> None:
    from agentbridge_search.server import create_app

    with serving(create_app(Gated(fail=True))) as base:
        assert_error(post(base, VALID), 500, "internal error: RuntimeError")


def test_sigterm_stops_a_server_process(tmp_path: Path) -> None:
    corpus = str(tmp_path / "corpus.jsonl")
    with open(corpus, "w", encoding="utf-8") as f:
        for p in CORPUS:
            f.write(json.dumps({"id": p.id, "contents": f'"{p.title}"\n{p.text}'}) + "\n")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "agentbridge_search", "serve", "--corpus", corpus, "--port",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        with httpx.Client(trust_env=False, timeout=10) as client:  # keeps its connection open
            deadline = time.monotonic() + 120
            while True:
                assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
                try:
                    if client.post(f"http://127.0.0.1:{port}/retrieve", json=VALID).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
