"""The Search-R1 retrieval server: protocol, bad input → 4xx with a reason, default bind address."""

from __future__ import annotations

import inspect
import json

import pytest
from fastapi.testclient import TestClient
from test_retrieval import CORPUS

from agentbridge_search.retrievers import TantivyRetriever
from agentbridge_search.server import DEFAULT_HOST, create_app, read_corpus, serve


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(TantivyRetriever(CORPUS, cache=False), max_batch=8, max_topk=10))


def test_retrieve_protocol(client: TestClient) -> None:
    r = client.post("/retrieve", json={"queries": ["currency of Kenya", "Lyon"], "topk": 2, "return_scores": True})
    assert r.status_code == 200
    result = r.json()["result"]
    assert len(result) == 2 and result[0][0]["document"]["id"] == "p4" and "score" in result[0][0]
    plain = client.post("/retrieve", json={"queries": ["Lyon"], "topk": 1}).json()["result"]
    assert plain == [[{"id": "p2", "contents": '"Lyon"\n' + CORPUS[2].text}]]
    assert client.post("/retrieve", json={"queries": ["Lyon"]}).status_code == 200  # default topk
    assert client.post("/retrieve", json={"queries": []}).json() == {"result": []}
    assert client.get("/health").json() == {"status": "ok", "retriever": "bm25", "passages": len(CORPUS)}


@pytest.mark.parametrize("body, status, reason", [
    ("{not json", 400, "not valid JSON"),
    (b"\xff\xfe", 400, "not valid JSON"),
    ("[1, 2]", 422, "body must be a JSON object"),
    ({"queries": "Lyon"}, 422, "queries: must be a list"),
    ({"topk": 3}, 422, "queries: must be a list"),
    ({"queries": ["a", 3]}, 422, "queries[1]: must be a string"),
    ({"queries": ["a"], "topk": "3"}, 422, "topk: must be an integer"),
    ({"queries": ["a"], "topk": 2.5}, 422, "topk: must be an integer"),
    ({"queries": ["a"], "topk": True}, 422, "topk: must be an integer"),
    ({"queries": ["a"], "topk": 10**9}, 422, "topk: must be between 1 and 10"),
    ({"queries": ["a"], "topk": 0}, 422, "topk: must be between"),
    ({"queries": ["a"], "return_scores": "yes"}, 422, "return_scores"),
    ({"queries": ["a"] * 9}, 413, "at most 8 per request"),
    ({"queries": ["a" * 3000]}, 422, "longer than"),
    ({"queries": ["a" * 2000] * 8, "pad": "x" * (1 << 20)}, 413, "larger than"),
])
def test_bad_requests(client: TestClient, body: object, status: int, reason: str) -> None:
    content = body if isinstance(body, str | bytes) else json.dumps(body)
    r = client.post("/retrieve", content=content, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert reason in r.json()["error"] and "\n" not in r.json()["error"]


def test_binds_localhost_by_default() -> None:
    from agentbridge_search.cli import main

    assert DEFAULT_HOST == "127.0.0.1"
    assert inspect.signature(serve).parameters["host"].default == "127.0.0.1"
    seen: dict[str, object] = {}

    def fake_serve(**kwargs: object) -> None:
        seen.update(kwargs)

    import agentbridge_search.server as server

    mp = pytest.MonkeyPatch()
    mp.setattr(server, "serve", fake_serve)
    try:
        assert main(["serve", "--port", "9"]) == 0
    finally:
        mp.undo()
    assert seen["host"] == "127.0.0.1" and seen["workers"] == 1


def test_read_corpus(tmp_path) -> None:
    good = tmp_path / "c.jsonl"
    good.write_text(json.dumps({"id": "d1", "contents": '"T"\nsome text'}) + "\n")
    assert read_corpus(str(good))[0].title == "T"
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"id": 1}\n')
    with pytest.raises(ValueError, match="b.jsonl:1: not a corpus row"):
        read_corpus(str(bad))


def test_serve_threads_option(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import agentbridge_search.server as server
    from agentbridge_search.cli import main

    for name in ("AGENTBRIDGE_SEARCH_THREADS", "AGENTBRIDGE_SEARCH_RETRIEVER", "AGENTBRIDGE_SEARCH_WORLD_SEED",
                 "AGENTBRIDGE_SEARCH_WORLD", "AGENTBRIDGE_SEARCH_CORPUS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(server, "serve", lambda **kwargs: None)
    assert main(["serve", "--retriever", "dense", "--threads", "2"]) == 0
    assert os.environ["AGENTBRIDGE_SEARCH_THREADS"] == "2"
    assert main(["serve", "--threads", "0"]) == 2
