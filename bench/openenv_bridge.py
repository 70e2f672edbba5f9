"""What the OpenEnv bridge adds to a step: a minimal client of the same transport (one ``/ws`` session per episode,
``{"type": "step", "data": ACTION}`` out, ``json.loads`` of the reply in) vs the bridge's
``OpenEnvEnvironment.step(message)`` (tool call → action, protocol checks, observation → tool message, reward,
done, metrics) against the same OpenEnv server, same seeds, same guesses.

Run: ``python bench/openenv_bridge.py`` (starts the bundled server from ``.venv-openenv``, made on first use;
``--kind mcp`` for the MCP face). Each round plays every episode once directly and once through the bridge, back
to back (alternating which goes first), so load falls on both; the ratio is per round. Resets are not timed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--kind", choices=["action", "mcp"], default="action")
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--high", type=int, default=1024, help="the range is 1..HIGH (log2(HIGH) steps an episode)")
    args = parser.parse_args()
    import websockets

    from agentbridge_openenv.data import openenv_seeds
    from agentbridge_openenv.env import OpenEnvEnvironment
    from agentbridge_openenv.protocol import ws_url
    from agentbridge_openenv.server import OpenEnvServer, server_python

    reset = {"low": 1, "high": args.high, "max_guesses": args.high.bit_length() + 1}
    tasks = openenv_seeds("eval", args.episodes, reset=reset)

    def action(guess: int) -> dict[str, Any]:
        if args.kind == "mcp":
            return {"type": "call_tool", "tool_name": "guess", "arguments": {"number": guess}}
        return {"guess": guess}

    async def plans(url: str) -> list[list[int]]:
        """Each episode's guesses (bisection), played once untimed so both sides replay the same ones."""
        out = []
        env = OpenEnvEnvironment(url=url)
        for task in tasks:
            await env.reset(task)
            guesses = []
            while not env.done:
                call = json.loads(env.expert_action().split("\n")[1])
                guesses.append(next(iter(call["arguments"].values())))
                await env.step({"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c", "type": "function", "function": call}]})
            out.append(guesses)
        await env.close()
        return out

    async def direct(url: str, task: Any, plan: list[int]) -> float:
        spent = 0.0
        async with websockets.connect(ws_url(url), ping_interval=None, compression=None) as ws:
            await ws.send(json.dumps({"type": "reset", "data": {**reset, "seed": task.data["seed"]}}))
            json.loads(await ws.recv())
            for g in plan:
                t0 = time.perf_counter()
                await ws.send(json.dumps({"type": "step", "data": action(g)}))
                reply = json.loads(await ws.recv())
                spent += time.perf_counter() - t0
            assert reply["data"]["done"], reply
            await ws.send(json.dumps({"type": "close"}))
        return spent

    async def bridged(url: str, task: Any, plan: list[int]) -> float:
        spent = 0.0
        name = "guess" if args.kind == "mcp" else "act"
        env = OpenEnvEnvironment(url=url)
        await env.reset(task)
        for g in plan:
            arguments = {"number": g} if args.kind == "mcp" else {"guess": g}
            message = {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": name, "arguments": arguments}}]}
            t0 = time.perf_counter()
            result = await env.step(message)  # type: ignore[arg-type]
            spent += time.perf_counter() - t0
        assert result.done and result.reward == 1.0, result
        await env.close()
        return spent

    async def one_round(url: str, guesses: list[list[int]]) -> tuple[float, float, int]:
        """Every episode directly and through the bridge, back to back (which goes first alternates)."""
        a_s = b_s = 0.0
        for i, (task, plan) in enumerate(zip(tasks, guesses, strict=True)):
            if i % 2:
                b_s += await bridged(url, task, plan)
                a_s += await direct(url, task, plan)
            else:
                a_s += await direct(url, task, plan)
                b_s += await bridged(url, task, plan)
        return a_s, b_s, sum(map(len, guesses))

    results: list[dict[str, Any]] = []
    ratios = []
    with OpenEnvServer(server_python(), args.kind) as server:
        guesses = asyncio.run(plans(server.url))
        for r in range(args.rounds):
            a_s, b_s, n = asyncio.run(one_round(server.url, guesses))
            m = n
            row = {"case": f"{args.kind} round {r + 1}", "steps": n, "direct_ms_per_step": round(a_s / n * 1e3, 3),
                   "bridge_ms_per_step": round(b_s / m * 1e3, 3), "bridge_over_direct": round(b_s / a_s, 3)}
            ratios.append(b_s / a_s)
            print(json.dumps(row), flush=True)
            results.append(row)
    summary = {"case": f"{args.kind}: bridge / direct per step", "median": round(statistics.median(ratios), 3),
               "per_round": [round(x, 3) for x in ratios]}
    print(json.dumps(summary), flush=True)
    print("RESULTS_JSON " + json.dumps([*results, summary]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
