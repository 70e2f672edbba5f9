"""Retrievers over a list of passages: BM25 (tantivy; or bm25s, the earlier engine) and dense (MiniLM + faiss inner
product, exact or HNSW).

Both BM25 engines tokenize alike (runs of two or more word characters, lower-cased, bm25s's English stopwords) and
score with Lucene's BM25 (k1 1.2, b 0.75). tantivy keeps each document's length in one byte (a lossy length norm),
so passages whose scores are within that rounding can swap ranks; its scores are Lucene's times (k1 + 1).

Indexes are built once per corpus content, this code and the packages that build them, and cached under
``agentbridge.cache.cache_dir()/search/index``.
"""

from __future__ import annotations

import hashlib
import os
import queue
import shutil
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, cast

from agentbridge_search.data import Passage
from agentbridge_search.embeddings import QueryEncoder, passage_embeddings, passage_text

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


# what builds each kind of index, besides this module's code and the corpus
INDEX_PACKAGES = {"bm25": ("tantivy", "bm25s"), "bm25s": ("bm25s",), "dense": ("faiss-cpu",)}


def index_dir(kind: str, key: str) -> Path:
    """The cache entry of a ``kind`` index over the corpus of ``key``, keyed also on this module's code and the
    versions of the packages that build it; recorded as used by this run (``--no-cache`` rebuilds it)."""
    from agentbridge import cache_dir, cache_key
    from agentbridge_search import embeddings

    full = cache_key(kind, key, code=(__file__, embeddings.__file__), packages=INDEX_PACKAGES[kind])
    return cache_dir() / "search" / "index" / f"{kind}-{full}"


def reusable(kind: str, path: Path) -> bool:
    """Whether the cached index at ``path`` may be used as it is (see ``agentbridge.models.use_cache_entry``)."""
    from agentbridge import use_cache_entry

    return use_cache_entry(f"search/{kind}-index", path)


def _publish(kind: str, built: Path, path: Path) -> None:
    """Move the index just built in ``built`` to its cache entry ``path`` (a stale entry is replaced; when another
    process saved the same index first, its copy is kept and this one dropped)."""
    from agentbridge import mark_built

    mark_built(built)
    if not reusable(kind, path):  # a --no-cache rebuild replaces the old entry
        shutil.rmtree(path, ignore_errors=True)
    try:
        built.replace(path)
    except OSError:  # another process saved it first
        shutil.rmtree(built, ignore_errors=True)


TOKEN_PATTERN = r"(?u)\b\w\w+\b"  # bm25s's tokens: two or more word characters


def _tantivy_analyzer() -> Any:
    """The text analyzer both BM25 engines share: bm25s's token pattern, lower-cased, its English stopwords."""
    import tantivy
    from bm25s.stopwords import STOPWORDS_EN

    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(TOKEN_PATTERN)).filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.custom_stopword(list(STOPWORDS_EN))).build())


class TantivyRetriever:
    """BM25 by tantivy (a Rust full-text index): the default ``bm25``; the index is saved in the cache and opened
    from there on reload. Each query is one OR of its terms, analyzed as the passages were."""

    kind = "bm25"
    ANALYZER = "agentbridge_bm25"

    def __init__(self, passages: Sequence[Passage], *, cache: bool = True) -> None:
        import tantivy

        self.passages = list(passages)
        self._tantivy = tantivy
        self.analyzer = _tantivy_analyzer()
        path = index_dir("bm25", corpus_key(self.passages))
        if cache and reusable("bm25", path) and (path / "meta.json").is_file():
            self.index = tantivy.Index.open(str(path))
        else:
            target = path.with_name(f"{path.name}.tmp{os.getpid()}") if cache else None
            self.index = self._build(target)
            if target is not None:
                _publish("bm25", target, path)
                self.index = tantivy.Index.open(str(path))
        self.index.register_tokenizer(self.ANALYZER, self.analyzer)
        self.schema = self.index.schema
        self.searcher = self.index.searcher()

    def _build(self, directory: Path | None) -> Any:
        tantivy = self._tantivy
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("text", stored=False, tokenizer_name=self.ANALYZER)
        builder.add_unsigned_field("idx", stored=True, indexed=False)
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
        index = tantivy.Index(builder.build(), path=str(directory) if directory is not None else None)
        index.register_tokenizer(self.ANALYZER, self.analyzer)
        writer = index.writer(heap_size=256_000_000, num_threads=1)
        for i, p in enumerate(self.passages):
            writer.add_document(tantivy.Document(text=passage_text(p), idx=i))
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        return index

    def search(self, queries: Sequence[str], topk: int) -> Hits:
        tantivy = self._tantivy
        k = max(1, min(topk, len(self.passages)))
        out: Hits = []
        for q in queries:
            terms = self.analyzer.analyze(q)
            if not terms:
                out.append([])
                continue
            query = tantivy.Query.boolean_query(
                [(tantivy.Occur.Should, tantivy.Query.term_query(self.schema, "text", t)) for t in terms])
            hits = self.searcher.search(query, k).hits
            out.append([(int(self.searcher.doc(addr)["idx"][0]), float(score)) for score, addr in hits if score > 0])
        return out


class BM25Retriever:
    """BM25 by bm25s (English stopwords, no stemming), the earlier engine (``bm25s``); the index is saved and
    memory-mapped on reload."""

    kind = "bm25s"

    def __init__(self, passages: Sequence[Passage], *, cache: bool = True) -> None:
        import bm25s

        self.passages = list(passages)
        self._bm25s = bm25s
        path = index_dir("bm25s", corpus_key(self.passages))
        if cache and reusable("bm25s", path) and (path / "params.index.json").is_file():
            self.model = bm25s.BM25.load(str(path), mmap=True)
        else:
            tokens = bm25s.tokenize([passage_text(p) for p in self.passages], stopwords="en", show_progress=False)
            self.model = bm25s.BM25()
            self.model.index(tokens, show_progress=False)
            if cache:
                tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
                self.model.save(str(tmp))
                _publish("bm25s", tmp, path)

    def search(self, queries: Sequence[str], topk: int) -> Hits:
        if not queries:
            return []
        k = max(1, min(topk, len(self.passages)))
        tokens = self._bm25s.tokenize(list(queries), stopwords="en", return_ids=False, show_progress=False)
        docs, scores = self.model.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return [[(int(d), float(s)) for d, s in zip(row_d, row_s, strict=True) if s > 0]
                for row_d, row_s in zip(docs, scores, strict=True)]


def search_threads() -> int:
    """Intra-op threads for dense query search: ``$AGENTBRIDGE_SEARCH_THREADS``, default 1."""
    raw = os.environ.get("AGENTBRIDGE_SEARCH_THREADS", "1")
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"AGENTBRIDGE_SEARCH_THREADS must be a positive integer, got {raw!r}") from None
    if n < 1:
        raise ValueError(f"AGENTBRIDGE_SEARCH_THREADS must be a positive integer, got {raw!r}")
    return n


BLAS_MIN_QUERIES = 4  # batches of at least this many queries use faiss's BLAS path (flat index)
HNSW_MIN_PASSAGES = 20_000  # index="auto": an HNSW graph from this many passages on, an exact scan below
HNSW_M = 32  # graph neighbours per vector
HNSW_EF_CONSTRUCTION = 400  # a denser graph: the corpus has many near-duplicate passages of one template
HNSW_EF_SEARCH = 256  # candidates kept per query (99.4% of top-3 sets exact on the 106k benchmark)


@dataclass
class _Request:
    queries: list[str]
    topk: int
    future: Future[Hits] = field(default_factory=Future)


class DenseRetriever:
    """MiniLM embeddings (normalized, 384-d) searched by inner product in a faiss index; embeddings are cached.

    ``index``: ``flat`` (exact), ``hnsw`` (faiss HNSW graph, M ``HNSW_M``, ``ef_search`` candidates per query:
    approximate, a few hundred times less work per query on 100k passages; built once per corpus and cached) or
    ``auto`` (hnsw from ``HNSW_MIN_PASSAGES`` passages on, else flat). Queries are encoded by ONNX Runtime
    (``onnx``; see ``embeddings.QueryEncoder``: the same embeddings, checked at start, torch otherwise), and their
    embeddings kept for the latest ``query_cache`` distinct queries (RL's groups and epochs ask them again).

    Searches run in one worker thread per retriever that uses ``threads`` intra-op threads for both torch
    (query encoding) and faiss, and encodes and searches the queries of concurrent callers as one batch (at
    most ``max_batch`` queries; one BLAS product from ``BLAS_MIN_QUERIES`` on for flat). While calls overlap,
    the worker waits up to ``linger_s`` for more callers before a batch; a lone caller never waits. The caller's
    torch and faiss thread settings are left as they were.
    """

    kind = "dense"

    def __init__(self, passages: Sequence[Passage], *, cache: bool = True, batch_size: int = 128,
                 embeddings: Any = None, threads: int | None = None, max_batch: int = 64,
                 linger_s: float = 0.002, index: str = "auto", ef_search: int = HNSW_EF_SEARCH,
                 query_cache: int = 4096, onnx: bool = True) -> None:
        import numpy as np

        if index not in ("auto", "flat", "hnsw"):
            raise ValueError(f"index must be auto, flat or hnsw, got {index!r}")
        self.passages = list(passages)
        self.threads = search_threads() if threads is None else threads
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1, got {self.threads}")
        self.max_batch = max_batch
        self.linger_s = linger_s
        key = corpus_key(self.passages)
        if embeddings is None:
            embeddings = passage_embeddings(self.passages, key, cache=cache, batch_size=batch_size)
        self.embeddings = np.ascontiguousarray(embeddings, dtype="float32")
        if len(self.embeddings) != len(self.passages):
            raise ValueError(f"{len(self.embeddings)} embeddings for {len(self.passages)} passages")
        if index == "auto":
            index = "hnsw" if len(self.passages) >= HNSW_MIN_PASSAGES else "flat"
        self.index_kind = index
        self.index_path: Path | None = None  # where the HNSW graph is cached
        self.index = self._hnsw(key, ef_search, cache) if index == "hnsw" else self._flat()
        self.query_cache = query_cache
        self.onnx = onnx
        self.query_encoder: QueryEncoder | None = None  # made in the worker thread, with its threads
        self._embedded: OrderedDict[str, Any] = OrderedDict()  # query -> embedding, the latest last
        self._queue: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._worker_pid = 0
        self._start_lock = threading.Lock()
        self.worker_threads: tuple[int, int] | None = None  # (torch, faiss) threads the worker runs with
        self.batches: deque[int] = deque(maxlen=1000)  # queries per worker batch, the latest last

    def _flat(self) -> Any:
        import faiss

        index = faiss.IndexFlatIP(self.embeddings.shape[1])
        index.add(self.embeddings)
        return index

    def _hnsw(self, key: str, ef_search: int, cache: bool) -> Any:
        import faiss

        from agentbridge_search.embeddings import embeddings_dir

        # keyed on the embeddings it is built from, besides this code and faiss
        path = index_dir("dense", f"{embeddings_dir(key).name}-hnsw{HNSW_M}-{HNSW_EF_CONSTRUCTION}") / "hnsw.faiss"
        if cache and reusable("dense", path.parent) and path.is_file():
            index = cast("faiss.IndexHNSWFlat", faiss.read_index(str(path)))  # faiss gives the stored class
        else:
            index = faiss.IndexHNSWFlat(self.embeddings.shape[1], HNSW_M, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
            index.add(self.embeddings)
            if cache:
                built = path.parent.with_name(f"{path.parent.name}.tmp{os.getpid()}")
                built.mkdir(parents=True, exist_ok=True)
                faiss.write_index(index, str(built / path.name))
                _publish("dense", built, path.parent)
        self.index_path = path if cache else None
        if index.ntotal != len(self.passages):
            raise ValueError(f"{path}: {index.ntotal} vectors for {len(self.passages)} passages")
        index.hnsw.efSearch = ef_search
        return index

    def encode(self, texts: Sequence[str], batch_size: int = 128) -> Any:
        """Normalized float32 MiniLM embeddings of the queries ``texts`` by this retriever's query encoder (ONNX
        Runtime, or torch with the calling thread's threads; ``batch_size`` is ignored: the batches are small)."""
        if self.query_encoder is None:
            self.query_encoder = QueryEncoder(self.threads, onnx=self.onnx)
            if self.query_encoder.why_torch and self.onnx:
                print(f"[search] dense queries encoded by torch: {self.query_encoder.why_torch}", file=sys.stderr)
        return self.query_encoder(texts)

    def search(self, queries: Sequence[str], topk: int) -> Hits:
        if not queries:
            return []
        request = _Request(list(queries), max(1, min(topk, len(self.passages))))
        self._ensure_worker()
        self._queue.put(request)
        return request.future.result()

    def close(self) -> None:
        """Stop the worker thread (a later search starts a new one)."""
        with self._start_lock:
            if self._worker is not None and self._worker_pid == os.getpid():
                self._queue.put(None)
                self._worker.join()
            self._worker = None

    def _ensure_worker(self) -> None:
        if self._worker is not None and self._worker_pid == os.getpid():
            return
        with self._start_lock:
            if self._worker is not None and self._worker_pid == os.getpid():
                return
            import torch

            before = torch.get_num_threads()
            self._queue = queue.SimpleQueue()  # after a fork the parent's worker is gone
            ready = threading.Event()
            self._worker = threading.Thread(target=self._run, args=(ready,), name="dense-search", daemon=True)
            self._worker_pid = os.getpid()
            self._worker.start()
            ready.wait()
            # torch.set_num_threads in the worker also changed torch's process-wide default (which new
            # threads copy); restore it. Threads already running, the worker included, keep their own.
            torch.set_num_threads(before)

    def _run(self, ready: threading.Event) -> None:
        import faiss
        import torch

        torch.get_num_threads()  # makes torch give this thread its own OpenMP setting before we change it
        torch.set_num_threads(self.threads)
        faiss.omp_set_num_threads(self.threads)  # faiss's OpenMP setting is per thread already
        # faiss scans the index once per query below nq * d = 128000 (334 MiniLM queries); from 4 queries on,
        # one BLAS matrix product is several times faster (process-wide setting, only ever lowered here)
        faiss.cvar.distance_compute_blas_threshold = min(faiss.cvar.distance_compute_blas_threshold,
                                                          BLAS_MIN_QUERIES * self.index.d)
        self.worker_threads = (torch.get_num_threads(), faiss.omp_get_max_threads())
        ready.set()
        concurrent = False
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            size = len(first.queries)
            # wait up to linger_s for more callers, but only while calls are overlapping (the last batch had
            # several): a lone caller never waits
            deadline = time.monotonic() + (self.linger_s if concurrent else 0.0)
            while size < self.max_batch:
                try:
                    more = self._queue.get(timeout=max(0.0, deadline - time.monotonic())) \
                        if deadline > time.monotonic() else self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._queue.put(None)  # stop after this batch
                    break
                batch.append(more)
                size += len(more.queries)
            self.batches.append(size)
            concurrent = len(batch) > 1
            try:
                hits = self._search_batch([q for r in batch for q in r.queries], max(r.topk for r in batch))
            except BaseException as e:  # noqa: BLE001 - handed to every caller of this batch
                for r in batch:
                    r.future.set_exception(e)
                continue
            start = 0
            for r in batch:
                r.future.set_result([row[:r.topk] for row in hits[start:start + len(r.queries)]])
                start += len(r.queries)

    def _embed(self, queries: list[str]) -> Any:
        """The queries' embeddings: the cached ones reused, the others encoded in one batch (worker thread)."""
        import numpy as np

        missing = list(dict.fromkeys(q for q in queries if q not in self._embedded))
        if missing:
            for q, row in zip(missing, self.encode(missing, batch_size=len(missing)), strict=True):
                self._embedded[q] = row
        for q in queries:
            self._embedded.move_to_end(q)
        out = np.stack([self._embedded[q] for q in queries])
        while len(self._embedded) > self.query_cache:
            self._embedded.popitem(last=False)
        return out

    def _search_batch(self, queries: list[str], k: int) -> Hits:
        scores, ids = self.index.search(self._embed(queries), k)
        return [[(int(i), float(s)) for i, s in zip(row_i, row_s, strict=True) if i >= 0]
                for row_i, row_s in zip(ids, scores, strict=True)]


RETRIEVERS: dict[str, Callable[[Sequence[Passage]], Retriever]] = {"bm25": TantivyRetriever, "bm25s": BM25Retriever,
                                                                   "dense": DenseRetriever}
_CACHE: dict[tuple[str, str], Retriever] = {}
_CACHE_LOCK = threading.Lock()


def make_retriever(kind: str, passages: Sequence[Passage]) -> Retriever:
    """A retriever of ``kind`` (bm25 | bm25s | dense) over ``passages``; one per corpus and kind per process."""
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
