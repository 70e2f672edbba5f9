"""Search plugin benchmark: retrieval queries/s and p50/p99 latency over >= 100k passages (BM25 and dense,
in-process and over HTTP), and episodes/s of the scripted expert with 256 episodes in flight.

Run: ``python bench/search_retrieval.py`` (2 cores: it pins itself and the server to CPUs 0-1 when it can).

Dense needs an embedding per passage; MiniLM manages ~100 short passages per CPU-second, so 100k real
embeddings cost ~17 CPU-minutes. By default the dense index embeds ``--embed`` real passages and fills the
rest with noisy copies of those vectors (same size and dimension, so faiss search cost is identical; every
query is still embedded by MiniLM). ``--embed 0`` embeds everything (cached afterwards). The bench uses its own
cache directory so the synthetic vectors never reach the plugin's real cache.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WORLD = {"towns": 2000, "companies": 3000, "people": 65000, "distractors": 4000}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def summary(name: str, lat_s: list[float], total_s: float, n_queries: int) -> dict[str, Any]:
    row = {"case": name, "queries": n_queries, "qps": round(n_queries / total_s, 1),
           "p50_ms": round(pct(lat_s, 0.5) * 1e3, 2), "p99_ms": round(pct(lat_s, 0.99) * 1e3, 2)}
    print(json.dumps(row), flush=True)
    return row


def in_process(r: Any, queries: list[str], batch: int) -> list[dict[str, Any]]:
    rows = []
    lat = []
    started = time.perf_counter()
    for q in queries:
        t0 = time.perf_counter()
        r.search([q], 3)
        lat.append(time.perf_counter() - t0)
    rows.append(summary(f"{r.kind} in-process, 1 query/call", lat, time.perf_counter() - started, len(queries)))
    lat = []
    started = time.perf_counter()
    for i in range(0, len(queries), batch):
        t0 = time.perf_counter()
        r.search(queries[i:i + batch], 3)
        lat.append(time.perf_counter() - t0)
    rows.append(summary(f"{r.kind} in-process, {batch} queries/call (latency per call)", lat,
                        time.perf_counter() - started, len(queries)))
    return rows


async def over_http(url: str, kind: str, queries: list[str], concurrency: int, batch: int) -> list[dict[str, Any]]:
    import httpx

    rows = []
    async with httpx.AsyncClient(timeout=60, trust_env=False,
                                 limits=httpx.Limits(max_connections=concurrency)) as client:
        for per_req in (1, batch):
            chunks = [queries[i:i + per_req] for i in range(0, len(queries), per_req)]
            lat: list[float] = []
            gate = asyncio.Semaphore(concurrency)

            async def one(chunk: list[str], gate: asyncio.Semaphore = gate, lat: list[float] = lat) -> None:
                async with gate:
                    t0 = time.perf_counter()
                    resp = await client.post(f"{url}/retrieve", json={"queries": chunk, "topk": 3,
                                                                      "return_scores": True})
                    resp.raise_for_status()
                    lat.append(time.perf_counter() - t0)

            started = time.perf_counter()
            await asyncio.gather(*(one(c) for c in chunks))
            rows.append(summary(f"{kind} HTTP, {per_req} queries/request, {concurrency} concurrent", lat,
                                time.perf_counter() - started, len(queries)))
    return rows


def start_server(kind: str, env: dict[str, str], cpus: str | None) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "agentbridge_search", "serve", "--retriever", kind, "--port", str(port),
           "--world", json.dumps(WORLD)]
    if cpus:
        cmd = ["taskset", "-c", cpus, *cmd]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    import httpx

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode()[-500:] if proc.stderr else ''}")
        try:
            if httpx.get(f"{url}/health", timeout=1, trust_env=False).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("server did not start within 300s")


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--embed", type=int, default=5000, help="real embeddings (0 = all passages)")
    parser.add_argument("--episodes", type=int, default=1024)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "agentbridge-bench-search"))
    args = parser.parse_args()
    cpus = None
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 2:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
    if len(os.sched_getaffinity(0)) <= 2:
        cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    os.environ["AGENTBRIDGE_CACHE"] = args.cache
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    import torch

    torch.set_num_threads(2)
    from agentbridge_search.data import build_world
    from agentbridge_search.retrievers import DenseRetriever, corpus_key, index_dir, world_retriever

    t0 = time.perf_counter()
    world = build_world(0, **WORLD)
    print(f"world: {len(world.passages)} passages, {len(world.questions)} questions "
          f"({time.perf_counter() - t0:.1f}s)", flush=True)
    rng = random.Random(0)
    queries = [q for qu in rng.sample(world.questions, args.queries) for q in qu.queries][: args.queries]
    results: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    bm25 = world_retriever("bm25", 0, **WORLD)
    print(f"bm25 index ready in {time.perf_counter() - t0:.1f}s", flush=True)
    results += in_process(bm25, queries, 32)
    emb_path = index_dir("dense", corpus_key(world.passages)) / "embeddings.npy"
    if not emb_path.is_file():
        t0 = time.perf_counter()
        n = len(world.passages) if args.embed <= 0 else min(args.embed, len(world.passages))
        real = DenseRetriever.encode([f"{p.title}. {p.text}" for p in world.passages[:n]])
        print(f"embedded {n} passages in {time.perf_counter() - t0:.1f}s", flush=True)
        vecs = np.empty((len(world.passages), real.shape[1]), dtype="float32")
        vecs[:n] = real
        if n < len(world.passages):
            g = np.random.default_rng(0)
            src = real[g.integers(0, n, len(world.passages) - n)]
            noisy = src + g.normal(0, 0.05, src.shape).astype("float32")
            vecs[n:] = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
        emb_path.parent.mkdir(parents=True, exist_ok=True)
        np.save(emb_path, vecs)
    dense = world_retriever("dense", 0, **WORLD)
    results += in_process(dense, queries[: max(200, args.queries // 2)], 32)
    env = {**os.environ, "AGENTBRIDGE_CACHE": args.cache, "OMP_NUM_THREADS": "2"}
    for kind, qs in (("bm25", queries), ("dense", queries[: max(200, args.queries // 2)])):
        proc, url = start_server(kind, env, cpus)
        try:
            results += asyncio.run(over_http(url, kind, qs, 8, 32))
        finally:
            proc.terminate()
            proc.wait(10)
    results.append(episodes(args.episodes, args.concurrency))
    print("RESULTS_JSON " + json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
