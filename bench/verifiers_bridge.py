"""What the verifiers bridge adds to an episode: verifiers 0.4.0 running the episode itself (``Env.run_episode``:
its chat program, MCP toolsets, limits and scoring, its model an OpenAI-compatible endpoint that answers at once
with the expert's reply) vs the same episode through the bridge (``VerifiersEnvironment.reset``/``step`` from the
training environment, the verifiers server parking each model call until the step answers it).

Run: ``.venv/bin/python bench/verifiers_bridge.py`` (starts ``.venv-verifiers``'s python twice: the bridge's server
and this script in ``--native`` mode, the baseline). Each round plays every task once natively and once through the
bridge, back to back (alternating which goes first); the ratio is per round. Same tasks, same expert replies. The
model is free on both sides: the ratio is the bridge's transport and bookkeeping over verifiers' own work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "plugins" / "verifiers" / "agentbridge_verifiers" / "server.py"
EXAMPLES: dict[str, dict[str, Any]] = {
    "reverse": {"taskset": "vf_reverse_text", "expert": "vf_reverse_text:expert", "max_turns": 4},
    "calculator": {"taskset": {"id": "vf_calculator"}, "expert": "vf_calculator:expert", "max_turns": 4},
    "guess": {"taskset": "vf_guess", "expert": "vf_guess:expert", "max_turns": 6},
}


# ------------------------------------------------------------------------------------------------ native (verifiers)


def native(example: str) -> None:
    """In the verifiers venv: serve ``{"tasks": [...]}`` lines on stdin with one native episode each, answering
    ``{"seconds": [...], "rewards": [...]}``."""
    import importlib.util

    from aiohttp import web

    spec = importlib.util.spec_from_file_location("agentbridge_verifiers_server", SERVER)
    assert spec is not None and spec.loader is not None
    server = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(server)
    import verifiers.v1 as vf

    loaded = server.Loaded(EXAMPLES[example])
    expert = server._expert(EXAMPLES[example]["expert"])
    tasks_by_trace: dict[str, Any] = {}

    async def chat(request: Any) -> Any:
        body = await request.json()
        task = tasks_by_trace[request.headers[server.SESSION_HEADER]]
        turn = expert(task.data.model_dump(mode="json"), body["messages"], body.get("tools") or [])
        turn = {"content": turn} if isinstance(turn, str) else turn
        calls = [{"index": i, "id": f"call_{i}", "type": "function",
                  "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments") or {})}}
                 for i, c in enumerate(turn.get("tool_calls") or [])]
        delta: dict[str, Any] = {"role": "assistant", "content": turn.get("content") or ""}
        if calls:
            delta["tool_calls"] = calls
        head = {"id": "x", "created": 0, "model": body.get("model"), "object": "chat.completion.chunk"}
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in ({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                      {**head, "choices": [{"index": 0, "delta": {}, "finish_reason":
                                            "tool_calls" if calls else "stop"}]},
                      {**head, "choices": [], "usage": {"prompt_tokens": 0, "completion_tokens": 0,
                                                        "total_tokens": 0}}):
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    async def run() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        import os

        os.environ.setdefault(server.API_KEY_VAR, "bench")
        ctx = vf.ModelContext(model="expert", client=vf.EvalClientConfig(
            base_url=f"http://127.0.0.1:{port}/v1", api_key_var=server.API_KEY_VAR))
        async with loaded.env.serving():
            print("READY", flush=True)
            loop = asyncio.get_running_loop()
            while line := await loop.run_in_executor(None, sys.stdin.readline):
                seconds, rewards = [], []
                for data in json.loads(line)["tasks"]:
                    task = loaded.task(data)
                    t0 = time.perf_counter()
                    episode = await loaded.env.run_episode(
                        task, ctx, on_trace=lambda trace, task=task: tasks_by_trace.__setitem__(trace.id, task))
                    seconds.append(time.perf_counter() - t0)
                    rewards.append(episode.traces[-1].reward if episode.ok else None)
                print(json.dumps({"seconds": seconds, "rewards": rewards}), flush=True)
        await runner.cleanup()

    asyncio.run(run())


# ------------------------------------------------------------------------------------------------ the bridge


async def bridged(args: dict[str, Any], tasks: list[Any]) -> tuple[list[float], list[float]]:
    """Each task through ``VerifiersEnvironment`` (the expert's replies as the driver's assistant messages)."""
    from agentbridge.rollout.parsers import HermesParser
    from agentbridge_verifiers.env import VerifiersEnvironment

    parser = HermesParser()
    seconds, rewards = [], []
    for task in tasks:
        env = VerifiersEnvironment(**args)
        t0 = time.perf_counter()
        await env.reset(task)
        while True:
            text = env.expert_action()
            parsed = parser.parse(text)
            action: dict[str, Any] = {"role": "assistant", "content": text}
            if parsed.tool_calls:
                action["tool_calls"] = parsed.tool_calls
            result = await env.step(action)  # type: ignore[arg-type]
            if result.done:
                break
        seconds.append(time.perf_counter() - t0)
        rewards.append(result.metrics["verifiers/reward"])
        await env.close()
    return seconds, rewards


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--example", choices=list(EXAMPLES), default=None, help="default: each in turn")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--native", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.native:
        native(options.example)
        return 0
    from agentbridge_verifiers.client import verifiers_python
    from agentbridge_verifiers.data import verifiers_tasks

    python = verifiers_python()
    results: list[dict[str, Any]] = []
    for example in [options.example] if options.example else list(EXAMPLES):
        args = EXAMPLES[example]
        tasks = verifiers_tasks("eval", options.episodes, 0, **args)
        helper = subprocess.Popen([str(python), __file__, "--native", "--example", example], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert helper.stdin is not None and helper.stdout is not None
        assert helper.stdout.readline().strip() == "READY"

        def run_native(tasks: list[Any], helper: Any = helper) -> tuple[list[float], list[float]]:
            helper.stdin.write(json.dumps({"tasks": [t.data["verifiers"] for t in tasks]}) + "\n")
            helper.stdin.flush()
            reply = json.loads(helper.stdout.readline())
            return reply["seconds"], reply["rewards"]

        run_native(tasks[:2])  # warm both sides up (imports, first connections), untimed
        asyncio.run(bridged(args, tasks[:2]))
        ratios = []
        for r in range(options.rounds):
            a: list[float] = []
            b: list[float] = []
            for i, task in enumerate(tasks):  # one task at a time, alternating which side goes first
                if i % 2:
                    b_s, b_r = asyncio.run(bridged(args, [task]))
                    a_s, a_r = run_native([task])
                else:
                    a_s, a_r = run_native([task])
                    b_s, b_r = asyncio.run(bridged(args, [task]))
                assert rounded(a_r) == rounded(b_r), (task.id, a_r, b_r)  # the same episode, the same scores
                a += a_s
                b += b_s
            ratio = sum(b) / sum(a)
            ratios.append(ratio)
            row = {"case": f"{example} round {r + 1}", "episodes": len(tasks),
                   "verifiers_ms_per_episode": round(sum(a) / len(a) * 1e3, 2),
                   "bridge_ms_per_episode": round(sum(b) / len(b) * 1e3, 2), "bridge_over_verifiers": round(ratio, 3)}
            print(json.dumps(row), flush=True)
            results.append(row)
        helper.stdin.close()
        helper.wait(30)
        summary = {"case": f"{example}: bridge / verifiers per episode", "median": round(statistics.median(ratios), 3),
                   "per_round": [round(x, 3) for x in ratios]}
        print(json.dumps(summary), flush=True)
        results.append(summary)
    print("RESULTS_JSON " + json.dumps(results))
    return 0


def rounded(values: list[Any]) -> list[Any]:
    return [None if v is None else round(float(v), 9) for v in values]


if __name__ == "__main__":
    sys.exit(main())
