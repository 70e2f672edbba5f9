"""``agentbridge serve`` under hostile and heavy load, on loopback: a bounded run that prints what it measured.

Starts ``agentbridge serve builtin:tiny`` (default limits) in its own process and measures:

1. a 10 MB body: the 413's latency, and the server's resident memory meanwhile;
2. the short requests' latency (``--short-tokens`` tokens each, ``ignore_eos``): alone, ``--concurrent`` - 1 of
   them at once ("baseline"), and the same with one request at the ``max_tokens`` cap sent with them ("mixed");
   the mixed/baseline p99 ratio shows whether the long request holds the short ones (target <= 2). After each
   round the capped request's client goes away, and the round waits until the server has stopped generating;
3. SIGTERM while a capped request is generating: time until the process has exited (target < 5 s), and the
   status the capped request's client got.

Peak RSS is sampled every 20 ms over the whole run (target: < +200 MB over idle).

    python bench/serve_load.py [--concurrent 50] [--short-tokens 16] [--cap 2048] [--repeats 3] [--threads N]

``--threads`` sets ``OMP_NUM_THREADS`` for the server process (torch's intra-op threads); on a machine shared with
other jobs, one thread avoids OpenMP threads spinning against each other.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import httpx
import psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RssSampler:
    """Peak resident memory of one process, sampled in a thread."""

    def __init__(self, pid: int, every_s: float = 0.02) -> None:
        self.proc = psutil.Process(pid)
        self.peak = 0
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(self.every_s)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def body(tokens: int, i: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"Request {i}: say something."}], "max_tokens": tokens,
            "temperature": 0, "ignore_eos": True}


async def timed(client: httpx.AsyncClient, url: str, payload: dict[str, Any]) -> float:
    started = time.perf_counter()
    r = await client.post(url, json=payload)
    assert r.status_code == 200, r.text
    return time.perf_counter() - started


async def read_metrics(client: httpx.AsyncClient, base: str) -> dict[str, int]:
    text = (await client.get(f"{base}/metrics")).text
    return {line.split()[0].removeprefix("agentbridge_serve_"): int(line.split()[1])
            for line in text.splitlines() if line.strip()}


async def wait_metric(client: httpx.AsyncClient, base: str, name: str, value: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while (await read_metrics(client, base))[name] != value:
        assert time.monotonic() < deadline, f"{name} did not reach {value} in {timeout} s"
        await asyncio.sleep(0.05)


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def main(args: argparse.Namespace) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    url = f"{base}/v1/chat/completions"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    proc = subprocess.Popen([sys.executable, "-m", "agentbridge.cli", "serve", "builtin:tiny", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        await run(args, proc, base, url)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def run(args: argparse.Namespace, proc: subprocess.Popen[bytes], base: str, url: str) -> None:
    limits = httpx.Limits(max_connections=args.concurrent + 8, max_keepalive_connections=args.concurrent + 8)
    async with httpx.AsyncClient(trust_env=False, timeout=600, limits=limits) as client:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            try:
                if (await client.get(f"{base}/health", timeout=2)).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not start in 300 s"
            await asyncio.sleep(0.3)
        await timed(client, url, body(args.short_tokens, -1))  # warm up
        idle = psutil.Process(proc.pid).memory_info().rss
        sampler = RssSampler(proc.pid)

        big = b'{"messages": [{"role": "user", "content": "' + b"a" * 10_000_000 + b'"}]}'
        big_lat = []
        for _ in range(5):
            started = time.perf_counter()
            r = await client.post(url, content=big, headers={"content-type": "application/json"})
            big_lat.append(time.perf_counter() - started)
            assert r.status_code == 413 and "error" in r.json(), r.text
        big_peak = sampler.peak

        solo = [await timed(client, url, body(args.short_tokens, i)) for i in range(3)]
        others = args.concurrent - 1
        baseline: list[float] = []
        mixed: list[float] = []
        for rep in range(args.repeats):
            baseline += await asyncio.gather(*(timed(client, url, body(args.short_tokens, i)) for i in range(others)))
            long_task = asyncio.create_task(client.post(url, json=body(args.cap, 10_000)))
            mixed += await asyncio.gather(*(timed(client, url, body(args.short_tokens, i)) for i in range(others)))
            assert not long_task.done(), "the capped request finished before the short ones"
            long_task.cancel()  # the client goes away: the server stops its generation
            await wait_metric(client, base, "running_sequences", 0)
            print(f"round {rep + 1}: baseline p99 {p(baseline[-others:], 0.99):.3f} s, "
                  f"mixed p99 {p(mixed[-others:], 0.99):.3f} s", flush=True)
        metrics = await read_metrics(client, base)
        long_task = asyncio.create_task(client.post(url, json=body(args.cap, 20_000)))
        await wait_metric(client, base, "running_sequences", 1)
        started = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        exit_s = time.perf_counter() - started
        try:
            long_reply = await asyncio.wait_for(long_task, 10)
            long_status = f"{long_reply.status_code} {long_reply.json().get('error', {}).get('message', '')}"
        except (httpx.HTTPError, TimeoutError) as e:
            long_status = f"no reply ({type(e).__name__})"
        peak = sampler.stop()

    mb = 1 / (1 << 20)
    ratio = p(mixed, 0.99) / p(baseline, 0.99)
    threads = args.threads or "torch default"
    print(f"server: agentbridge serve builtin:tiny (default limits), pid {proc.pid}, threads {threads}")
    print(f"10 MB body -> 413: median {statistics.median(big_lat) * 1000:.1f} ms, max {max(big_lat) * 1000:.1f} ms; "
          f"RSS idle {idle * mb:.0f} MB, peak during the 413s {big_peak * mb:.0f} MB "
          f"(+{(big_peak - idle) * mb:.0f} MB)")
    print(f"short request ({args.short_tokens} tokens) alone: median {statistics.median(solo):.3f} s")
    print(f"{others} short requests at once, {args.repeats} rounds: baseline p50 {p(baseline, 0.5):.3f} s, "
          f"p99 {p(baseline, 0.99):.3f} s")
    print(f"same with one max_tokens={args.cap} request running: p50 {p(mixed, 0.5):.3f} s, "
          f"p99 {p(mixed, 0.99):.3f} s")
    print(f"mixed/baseline p99 = {ratio:.2f} (target <= 2)  [{'ok' if ratio <= 2 else 'over'}]")
    print(f"capped requests cancelled by their client going away: {metrics['requests_disconnected_total']} of "
          f"{args.repeats}; tokens generated in all: {metrics['tokens_generated_total']}")
    print(f"SIGTERM -> exit: {exit_s:.2f} s, return code {proc.returncode} (target < 5 s)  "
          f"[{'ok' if exit_s < 5 else 'over'}]; the capped request got: {long_status}")
    print(f"peak RSS over the run: {peak * mb:.0f} MB (+{(peak - idle) * mb:.0f} MB over idle; target < +200 MB)  "
          f"[{'ok' if peak - idle < 200 / mb else 'over'}]")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--concurrent", type=int, default=50, help="requests at once (one of them at the cap)")
    parser.add_argument("--short-tokens", type=int, default=16, help="tokens each short request generates")
    parser.add_argument("--cap", type=int, default=2048, help="the server's max_tokens cap (its default: 2048)")
    parser.add_argument("--repeats", type=int, default=3, help="baseline/mixed rounds")
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of the server process")
    asyncio.run(main(parser.parse_args()))
