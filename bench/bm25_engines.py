"""The two BM25 engines of the search plugin side by side on the same ~106k passages: tantivy (``bm25``, the
default) and bm25s (``bm25s``, the earlier engine) — index build time, queries/s with p50/p99 latency, and whether
they return the same passages.

Run: ``python bench/bm25_engines.py`` (2 cores: it pins itself to CPUs 0-1 when it has more).

Corpus and queries are those of ``bench/search_retrieval.py`` (the generator's world plus gensim's news sentences;
the scripted expert's hop queries, topk 3). Cases run one engine after the other in the same process, interleaved
(tantivy, bm25s, tantivy, bm25s) so that load on the machine falls on both; the ratio is per round.
Agreement: the fraction of queries whose top-1 (and top-3 set) are the same passages, and each engine's recall of
the hop's gold passage in its top 3.
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

sys.path.insert(0, str(Path(__file__).parent))
from search_retrieval import TOPK, WORLD, news_sentences, timed_calls  # noqa: E402


def explain_differences(bm25s_engine: Any, queries: list[str], a: list[list[int]],
                        b: list[list[int]]) -> dict[str, Any]:
    """Where the top-3 sets differ, score tantivy's passages with bm25s: a tie is the same bm25s score as the
    passage bm25s ranked there (within 1e-5), a near tie within 3% (tantivy's one-byte length norm)."""
    import bm25s

    exact = near = other = 0
    for q, x, y in zip(queries, a, b, strict=True):
        if set(x) == set(y):
            continue
        tokens = bm25s.tokenize([q], stopwords="en", return_ids=False, show_progress=False)[0]
        scores = bm25s_engine.model.get_scores(tokens)
        gaps = [abs(float(scores[i]) - float(scores[j])) / max(float(scores[j]), 1e-9) for i, j in zip(x, y,
                                                                                                   strict=False)]
        if len(x) == len(y) and max(gaps) <= 1e-5:
            exact += 1
        elif len(x) == len(y) and max(gaps) <= 0.03:
            near += 1
        else:
            other += 1
    row = {"case": "top-3 differences, scored by bm25s", "differing": exact + near + other, "ties": exact,
           "within_3pct": near, "other": other}
    print(json.dumps(row), flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--queries", type=int, default=2000, help="queries per case")
    parser.add_argument("--batch", type=int, default=32, help="queries per call in the batched case")
    parser.add_argument("--callers", type=int, default=8, help="concurrent callers")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of (tantivy, bm25s)")
    parser.add_argument("--world", default=json.dumps(WORLD), help="build_world arguments (smaller for a smoke run)")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 2:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
    import tempfile

    os.environ["AGENTBRIDGE_CACHE"] = tempfile.mkdtemp(prefix="bm25-bench-")  # both indexes built here, timed
    from agentbridge_search.data import build_world
    from agentbridge_search.retrievers import BM25Retriever, TantivyRetriever

    world = build_world(0, **json.loads(args.world))
    passages = world.passages + news_sentences()
    print(f"corpus: {len(passages)} passages; load average {os.getloadavg()[0]:.1f}", flush=True)
    rng = random.Random(0)
    hops = [(q, gold) for qu in rng.sample(world.questions, args.queries)
            for q, gold in zip(qu.queries, qu.support, strict=False)][: args.queries]
    queries = [q for q, _ in hops]

    engines: dict[str, Any] = {}
    results: list[dict[str, Any]] = []
    for name, cls in (("tantivy", TantivyRetriever), ("bm25s", BM25Retriever)):
        t0 = time.perf_counter()
        engines[name] = cls(passages)
        row = {"case": f"{name} index build (cold cache)", "seconds": round(time.perf_counter() - t0, 1)}
        print(json.dumps(row), flush=True)
        results.append(row)

    ratios: dict[str, list[float]] = {}
    for r in range(args.rounds):
        per_round: dict[str, dict[str, float]] = {}
        for name, engine in engines.items():
            def search(qs: list[str], engine: Any = engine) -> Any:
                return engine.search(qs, TOPK)

            search(queries[:8])
            for label, per_call, callers in (("1 query/call", 1, 1), (f"{args.batch}/call", args.batch, 1),
                                             (f"1/call, {args.callers} callers", 1, args.callers)):
                row = timed_calls(f"round {r + 1}: {name} {label}", search, queries, per_call, callers)
                per_round.setdefault(label, {})[name] = row["qps"]
                results.append(row)
        for label, qps in per_round.items():
            ratios.setdefault(label, []).append(qps["tantivy"] / qps["bm25s"])
    for label, values in ratios.items():
        row = {"case": f"tantivy / bm25s q/s, {label}", "ratio_per_round": [round(v, 1) for v in values]}
        print(json.dumps(row), flush=True)
        results.append(row)

    hits = {name: [[i for i, _ in row] for row in engine.search(queries, TOPK)] for name, engine in engines.items()}
    a, b = hits["tantivy"], hits["bm25s"]
    index_of = {p.id: i for i, p in enumerate(passages)}
    gold = [index_of[g] for _, g in hops]
    row = {"case": "agreement", "queries": len(queries),
           "top1_same": round(statistics.mean(x[:1] == y[:1] for x, y in zip(a, b, strict=True)), 4),
           "top3_same_set": round(statistics.mean(set(x) == set(y) for x, y in zip(a, b, strict=True)), 4),
           "gold_in_top3": {name: round(statistics.mean(g in h for g, h in zip(gold, hits[name], strict=True)), 4)
                            for name in hits}}
    print(json.dumps(row), flush=True)
    results.append(row)
    results.append(explain_differences(engines["bm25s"], queries, a, b))
    print("RESULTS_JSON " + json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
