"""Model-scored rewards: episodes scored per second by ``core/reward_model`` (builtin:tiny-rm) batched vs one at a
time, and by ``core/judge`` against ``agentbridge serve`` with one request in flight vs many (the server batches
concurrent requests into one generate call).

Run: ``python bench/reward_scoring.py`` (2 cores). Episodes: the calculator's scripted expert on held-out tasks.
Rounds alternate the settings so load on the machine falls on both; ratios are per round. The judge model is the
untrained builtin:tiny with a fixed reply budget: its replies hold no score (each is a counted reward error), which
does not change the work per request — what is measured is requests answered per second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any


def episodes(n: int) -> tuple[list[Any], list[Any]]:
    from agentbridge.rollout.agent import Agent
    from agentbridge.rollout.policy import ScriptedPolicy
    from agentbridge.spec import load_spec

    agent = Agent.from_spec(load_spec("examples/calculator.yaml", ["model.path=builtin:tiny"]))
    tasks = agent.tasks("eval", size=n)
    trajs = asyncio.run(agent.run(tasks, lambda env: ScriptedPolicy.for_env(env, agent.tokenizer)))
    return trajs, tasks


def timed(name: str, fn: Any, trajs: list[Any], tasks: list[Any], **args: Any) -> dict[str, Any]:
    async def all_of() -> int:
        out = await asyncio.gather(*(fn(t, task, **args) for t, task in zip(trajs, tasks, strict=True)),
                                   return_exceptions=True)
        return sum(not isinstance(x, BaseException) for x in out)

    started = time.perf_counter()
    scored = asyncio.run(all_of())
    took = time.perf_counter() - started
    row = {"case": name, "episodes": len(trajs), "scored": scored, "seconds": round(took, 2),
           "episodes_per_s": round(len(trajs) / took, 1)}
    print(json.dumps(row), flush=True)
    return row


def start_server(model: str) -> tuple[subprocess.Popen[bytes], str]:
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "agentbridge.cli", "serve", model, "--port", str(port),
                             "--max-batch", "64"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1, trust_env=False).status_code == 200:
                return proc, f"http://127.0.0.1:{port}/v1"
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("the server did not start in 120 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--judge-episodes", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32, help="reward-model batch / judge requests in flight")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from agentbridge.judge import judge_reward
    from agentbridge.reward_model import reward_model_reward

    trajs, tasks = episodes(args.episodes)
    results: list[dict[str, Any]] = []
    rm = {"path": "builtin:tiny-rm"}
    timed("warm-up", reward_model_reward, trajs[:4], tasks[:4], **rm, batch_size=1)
    timed("warm-up", reward_model_reward, trajs[:4], tasks[:4], **rm, batch_size=args.batch)
    ratios: dict[str, list[float]] = {"reward model": [], "judge": []}
    for r in range(args.rounds):
        one = timed(f"round {r + 1}: reward model, 1 per forward", reward_model_reward, trajs, tasks, **rm,
                    batch_size=1)
        many = timed(f"round {r + 1}: reward model, up to {args.batch} per forward", reward_model_reward, trajs,
                     tasks, **rm, batch_size=args.batch)
        results += [one, many]
        ratios["reward model"].append(many["episodes_per_s"] / one["episodes_per_s"])

    proc, url = start_server("builtin:tiny")
    n = args.judge_episodes
    judge = {"url": url, "max_tokens": 16, "retries": 0, "timeout_s": 120}
    try:
        timed("warm-up", judge_reward, trajs[:2], tasks[:2], **judge, max_concurrency=1)
        for r in range(args.rounds):
            one = timed(f"round {r + 1}: judge, 1 request in flight", judge_reward, trajs[:n], tasks[:n], **judge,
                        max_concurrency=1, rubric=f"Grade. (round {r}, one)")  # a new rubric: no cache hits
            many = timed(f"round {r + 1}: judge, {args.batch} requests in flight", judge_reward, trajs[:n],
                         tasks[:n], **judge, max_concurrency=args.batch, rubric=f"Grade. (round {r}, many)")
            results += [one, many]
            ratios["judge"].append(many["episodes_per_s"] / one["episodes_per_s"])
    finally:
        proc.terminate()
        proc.wait(20)
    for name, values in ratios.items():
        row = {"case": f"{name}: batched / one at a time", "ratio_per_round": [round(v, 1) for v in values]}
        print(json.dumps(row), flush=True)
        results.append(row)
    print("RESULTS_JSON " + json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
