"""Dense retrieval, one query per call, on >= 100k passages: the exact scan (flat) and the HNSW graph side by side.

Run: ``python bench/dense_retrieval.py`` (it pins itself to 2 CPUs when it has more; one search thread).

Same corpus and queries as ``bench/search_retrieval.py`` (its world plus gensim's news sentences, ~106k
passages, embedded once by MiniLM and cached; the scripted expert's hop queries, topk 3). In one run, rounds in
rotating order, each asking the same distinct queries one per call from one caller (so the query-embedding cache
never hits):
  - before: the exact scan (``index="flat"``) with queries encoded by sentence-transformers' ``encode``;
  - flat: the exact scan with queries encoded straight through the transformer (``encode_queries``);
  - hnsw: the HNSW graph with ``encode_queries`` (the retriever's default from 20k passages on).
Then the HNSW retriever on an RL-shaped stream where each query comes 4 times (a group of 4 samples asking
alike). Also: the time to encode one query each way and to search one embedding per index, how often HNSW's
top-3 equals the exact top-3 (and for the differing ones, whether they are the same set or a near-tie in score),
and how often each finds the query's supporting passage in its top 3.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_retrieval import TOPK, WORLD, news_sentences, pct  # noqa: E402


def rate(name: str, lat: list[float], total: float) -> dict[str, Any]:
    row = {"case": name, "queries": len(lat), "qps": round(len(lat) / total, 1),
           "p50_ms": round(pct(lat, 0.5) * 1e3, 2), "p99_ms": round(pct(lat, 0.99) * 1e3, 2)}
    print(json.dumps(row), flush=True)
    return row


def one_per_call(r: Any, queries: list[str]) -> tuple[list[float], float]:
    lat = []
    start = time.perf_counter()
    for q in queries:
        t0 = time.perf_counter()
        r.search([q], TOPK)
        lat.append(time.perf_counter() - t0)
    return lat, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--queries", type=int, default=1000, help="distinct queries per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of before/flat/hnsw in rotating order")
    parser.add_argument("--world", default=json.dumps(WORLD), help="build_world arguments (smaller for a smoke run)")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "agentbridge-bench-search"))
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 2:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
    os.environ["AGENTBRIDGE_CACHE"] = args.cache
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from agentbridge_search.data import build_world
    from agentbridge_search.embeddings import embeddings_dir, encode
    from agentbridge_search.retrievers import DenseRetriever, corpus_key

    world = build_world(0, **json.loads(args.world))
    passages = world.passages + news_sentences()
    key = corpus_key(passages)
    print(f"corpus: {len(passages)} passages; load {os.getloadavg()[0]:.1f}", flush=True)
    cached = (embeddings_dir(key) / "embeddings.npy").is_file()
    t0, c0 = time.perf_counter(), time.process_time()
    flat = DenseRetriever(passages, threads=1, index="flat")
    embed = {"embeddings": "cached" if cached else "computed", "wall_s": round(time.perf_counter() - t0, 1),
             "cpu_s": round(time.process_time() - c0, 1)}
    print(f"embeddings ready: {embed}", flush=True)
    t0 = time.perf_counter()
    hnsw = DenseRetriever(passages, threads=1, index="hnsw", embeddings=flat.embeddings)
    print(f"hnsw index ready in {time.perf_counter() - t0:.1f}s", flush=True)
    before = DenseRetriever(passages, threads=1, index="flat", embeddings=flat.embeddings)
    before.encode = lambda texts, batch_size=128: encode(texts, batch_size=batch_size)  # type: ignore[method-assign]
    retrievers = {"before": before, "flat": flat, "hnsw": hnsw}

    rng = random.Random(0)
    gold: dict[str, str] = {}  # each query's supporting passage (the hop it is the expert's query for)
    for question in rng.sample(world.questions, len(world.questions)):
        for q, support in zip(question.queries, question.support, strict=True):
            gold.setdefault(q, support)
    queries = list(gold)[: args.queries]
    for r in retrievers.values():
        r.search(queries[:4], TOPK)  # warm up: model load, worker thread
    results: list[dict[str, Any]] = [{"case": "setup", "passages": len(passages), **embed}]

    # the parts of one query, each alone, in this thread with one torch/faiss thread as the worker has
    import faiss

    saved = (torch.get_num_threads(), faiss.omp_get_max_threads())
    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    parts: dict[str, Any] = {"case": "one query's parts (ms)"}
    sample = queries[:200]
    for name, r in (("encode_before", before), ("encode_now", flat)):
        t0 = time.perf_counter()
        for q in sample:
            r.encode([q], batch_size=1)
        parts[name] = round((time.perf_counter() - t0) / len(sample) * 1e3, 3)
    vecs = flat.encode(sample)
    for name, r in (("search_flat", flat), ("search_hnsw", hnsw)):
        t0 = time.perf_counter()
        for v in vecs:
            r.index.search(v[None, :], TOPK)
        parts[name] = round((time.perf_counter() - t0) / len(vecs) * 1e3, 3)
    torch.set_num_threads(saved[0])
    faiss.omp_set_num_threads(saved[1])
    print(json.dumps(parts), flush=True)
    results.append(parts)

    names = list(retrievers)
    lat: dict[str, list[float]] = {n: [] for n in names}
    total = dict.fromkeys(names, 0.0)
    for round_ in range(args.rounds):
        for name in names[round_ % 3:] + names[:round_ % 3]:
            r = retrievers[name]
            r._embedded.clear()  # distinct queries, no embedding reused across rounds
            got, took = one_per_call(r, queries)
            lat[name] += got
            total[name] += took
    rows = {n: rate(f"dense {n}, 1 query/call (distinct queries)", lat[n], total[n]) for n in names}
    results += rows.values()
    speed = {"case": "queries/s ratios", "hnsw/before": round(rows["hnsw"]["qps"] / rows["before"]["qps"], 2),
             "flat/before": round(rows["flat"]["qps"] / rows["before"]["qps"], 2),
             "hnsw/flat": round(rows["hnsw"]["qps"] / rows["flat"]["qps"], 2)}
    print(json.dumps(speed), flush=True)
    results.append(speed)

    hnsw._embedded.clear()
    grouped = [q for q in queries for _ in range(4)]
    got, took = one_per_call(hnsw, grouped)
    results.append(rate("dense hnsw, 1 query/call, each query 4 times (RL groups of 4)", got, took))

    exact = flat.search(queries, TOPK)
    approx = hnsw.search(queries, TOPK)
    same = [[i for i, _ in a] == [i for i, _ in b] for a, b in zip(exact, approx, strict=True)]
    differ = [(a, b) for a, b, s in zip(exact, approx, same, strict=True) if not s]
    near = sum(abs(a[-1][1] - b[-1][1]) < 1e-3 or {i for i, _ in a} == {i for i, _ in b} for a, b in differ)
    gap = [a[-1][1] - b[-1][1] for a, b in differ]
    agree = {"case": "hnsw top-3 == exact top-3", "queries": len(queries), "same": sum(same),
             "fraction": round(sum(same) / len(queries), 4), "differ": len(differ),
             "differ_same_set_or_score_within_1e-3": near,
             "differ_max_kth_score_gap": round(max(gap), 4) if gap else 0.0,
             "top1_same": sum(a[0][0] == b[0][0] for a, b in zip(exact, approx, strict=True)),
             "gold_in_top3_exact": sum(gold[q] in {passages[i].id for i, _ in row}
                                       for q, row in zip(queries, exact, strict=True)),
             "gold_in_top3_hnsw": sum(gold[q] in {passages[i].id for i, _ in row}
                                      for q, row in zip(queries, approx, strict=True))}
    print(json.dumps(agree), flush=True)
    results.append(agree)
    results.append({"case": "load", "loadavg_1min_end": round(os.getloadavg()[0], 1),
                    "median_before_ms": round(statistics.median(lat["before"]) * 1e3, 2)})
    for r in retrievers.values():
        r.close()
    print("RESULTS_JSON " + json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
