"""Several retrieval urls, some dead, wrong or half-alive, all real HTTP servers: the client health-checks them,
fails over to one that answers, and a rollout whose searches mostly fail says so (and exits 1 when asked)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from serving import free_port, serving
from small_world import SMALL
from test_retrieval import CORPUS

from agentbridge_search.client import HttpBackend, RetrievalError
from agentbridge_search.retrievers import BM25Retriever
from agentbridge_search.server import create_app


@pytest.fixture(scope="module")
def good() -> Iterator[str]:
    """The plugin's own retrieval server (uvicorn) over the small known corpus."""
    with serving(create_app(BM25Retriever(CORPUS, cache=False))) as url:
        yield url


class _Stub(BaseHTTPRequestHandler):
    """``wrong``: a web server that is not a retrieval server (404 everywhere). ``half``: a Search-R1 server
    whose every second request fails with 500."""

    mode = "wrong"
    served = {"ok": 0, "failed": 0}

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        if self.mode == "wrong":
            self._send(404, b"<html>Not Found</html>", "text/html")
            return
        with lock:
            n = sum(self.served.values())
            key = "failed" if n % 2 else "ok"
            self.served[key] += 1
        if key == "failed":
            self._send(500, b"Internal Server Error", "text/plain")
            return
        doc = {"document": {"id": "h0", "contents": '"Half"\nhalf-alive'}, "score": 1.0}
        self._send(200, json.dumps({"result": [[doc] for _ in body.get("queries", [])]}).encode(), "application/json")

    def _send(self, status: int, payload: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        return None


lock = threading.Lock()


def _stub(mode: str) -> tuple[str, ThreadingHTTPServer]:
    handler = type(f"Stub_{mode}", (_Stub,), {"mode": mode, "served": {"ok": 0, "failed": 0}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server


@pytest.fixture(scope="module")
def wrong() -> Iterator[str]:
    url, server = _stub("wrong")
    yield url
    server.shutdown()


@pytest.fixture()
def half() -> Iterator[tuple[str, dict[str, int]]]:
    url, server = _stub("half")
    yield url, server.RequestHandlerClass.served  # type: ignore[attr-defined]
    server.shutdown()


def _search(backend: HttpBackend, queries: list[str]) -> list[list[str]]:
    async def run() -> list[list[str]]:
        try:
            out = []
            for q in queries:
                rows = await backend.retrieve([q], 2)
                out.append([r["document"]["id"] for r in rows[0]])
            return out
        finally:
            await backend.close()

    return asyncio.run(run())


def test_health_check_names_each_bad_url(good: str, wrong: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    backend = HttpBackend([dead, wrong, good], timeout_s=2.0)

    async def check() -> dict[str, str | None]:
        try:
            return await backend.check()
        finally:
            await backend.close()

    health = asyncio.run(check())
    assert health[good] is None
    assert health[dead] == f"retrieval server {dead} unreachable (ConnectError)"
    assert health[wrong] == f"retrieval server {wrong} answered 404: <html>Not Found</html>"


def test_fails_over_from_dead_and_wrong_urls(good: str, wrong: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    queries = ["currency of Kenya", "Lyon", "capital city Nairobi", "currency of France"] * 3
    got = _search(HttpBackend([dead, wrong, good], timeout_s=2.0), queries)
    assert [ids[0] for ids in got] == ["p4", "p2", "p3", "p1"] * 3  # every search answered, by the good server


def test_fails_over_from_a_half_alive_url(good: str, half: tuple[str, dict[str, int]]) -> None:
    url, served = half
    backend = HttpBackend([url, good], timeout_s=2.0, retry_after_s=0.0)  # re-probe the bad one every time
    got = _search(backend, ["Lyon"] * 12)
    assert all(ids and ids[0] in ("p2", "h0") for ids in got)
    assert served["failed"] >= 3 and served["ok"] >= 3  # it was used, and its failures were failed over


def test_all_urls_down_is_one_line(wrong: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RetrievalError) as e:
        _search(HttpBackend([dead, wrong], timeout_s=2.0), ["Lyon"])
    message = str(e.value)
    assert "\n" not in message and message.startswith("no retrieval server answers: ")
    assert f"{dead} unreachable" in message and f"{wrong} answered 404" in message


def test_down_url_comes_back_after_retry_after(good: str) -> None:
    """A url that failed is left out for retry_after_s, then probed again and used when it answers."""
    port = free_port()
    late = f"http://127.0.0.1:{port}"
    backend = HttpBackend([late], timeout_s=2.0, retry_after_s=0.3)

    async def run() -> tuple[str, str, list[str]]:
        import uvicorn

        try:
            with pytest.raises(RetrievalError) as first:
                await backend.retrieve(["Lyon"], 1)
            with pytest.raises(RetrievalError) as again:  # within retry_after_s: not tried again
                await backend.retrieve(["Lyon"], 1)
            server = uvicorn.Server(uvicorn.Config(create_app(BM25Retriever(CORPUS, cache=False)), host="127.0.0.1",
                                                   port=port, log_level="error"))
            task = asyncio.create_task(server.serve())
            while not server.started:
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)
            rows = await backend.retrieve(["Lyon"], 1)
            server.should_exit = True
            await task
            return str(first.value), str(again.value), [r["document"]["id"] for r in rows[0]]
        finally:
            await backend.close()

    first, again, ids = asyncio.run(run())
    assert "unreachable" in first and "retrying in" in again and ids == ["p2"]


def test_rollout_with_dead_and_good_urls(good: str, tmp_path: Any) -> None:
    """End to end: the CLI's search rollout scores every search through failover; with only a dead url the
    rollout fails loudly when asked to."""
    dead = f"http://127.0.0.1:{free_port()}"
    sets = [x for where in ("environment.args", "data.eval.args") for k, v in SMALL.items()
            for x in ("--set", f"{where}.world.{k}={v}")]
    sets += ["--set", "environment.args.expert_in_head.fic_company_leader=0.0"]  # the perfect expert: two searches

    def rollout(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "agentbridge.cli", "rollout", "examples/search.yaml", "-n", "4",
                               "-o", str(tmp_path / url.rsplit(":", 1)[1]), *sets, "--set",
                               f"environment.args.url={url}", *extra],
                              capture_output=True, text=True, timeout=600, env=dict(os.environ))

    ok = rollout(f"{dead},{good}", "--max-tool-failure-rate", "0")
    assert ok.returncode == 0, ok.stderr
    summary = json.loads((tmp_path / good.rsplit(":", 1)[1] / "summary.json").read_text())
    assert summary["tools/failure_rate"] == 0.0 and summary["tools/calls"] == 2
    bad = rollout(dead, "--max-tool-failure-rate", "0.2")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    errors = [x for x in bad.stderr.splitlines() if x.startswith("error")]
    assert len(errors) == 1 and errors[0].startswith("error: 100% of tool calls failed") and "unreachable" in errors[0]
