"""What the TextWorld bridge adds to a step: TextWorld's own ``env.step(command)`` vs the bridge's
``TextWorldEnv.step(message)`` (parse the action, step, clean the text, metrics) on the same games and commands.

Run: ``python bench/textworld_bridge.py`` (games generated once into the bench's cache). Each round plays every
game's walkthrough once directly and once through the bridge, alternating, so load falls on both; the ratio is
per round. Resets are timed apart (the bridge's reset also looks the game up in its cache).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--games", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--challenge", default="tw-simple")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "agentbridge-bench-textworld"))
    args = parser.parse_args()
    os.environ["AGENTBRIDGE_CACHE"] = args.cache
    import textworld

    from agentbridge_textworld.env import TextWorldEnv
    from agentbridge_textworld.games import game_file, textworld_games

    tasks = textworld_games("eval", args.games, challenge=args.challenge)
    infos = textworld.EnvInfos(policy_commands=True, max_score=True, won=True, lost=True, objective=True,
                               description=True, score=True)
    plans: list[tuple[Any, list[str]]] = []
    for t in tasks:
        path = game_file(t.data["challenge"], t.data["settings"], int(t.data["game_seed"]))
        env = textworld.start(str(path), request_infos=infos)
        plans.append((path, list(env.reset().policy_commands)))
        env.close()

    def direct() -> tuple[float, int]:
        spent, steps = 0.0, 0
        for path, commands in plans:
            env = textworld.start(str(path), request_infos=infos)
            env.reset()
            for c in commands:
                t0 = time.perf_counter()
                env.step(c)
                spent += time.perf_counter() - t0
                steps += 1
            env.close()
        return spent, steps

    async def bridged() -> tuple[float, int]:
        spent, steps = 0.0, 0
        env = TextWorldEnv()
        for task, (_, commands) in zip(tasks, plans, strict=True):
            await env.reset(task)
            for c in commands:
                message = {"role": "assistant", "content": f"<action>{c}</action>"}
                t0 = time.perf_counter()
                await env.step(message)
                spent += time.perf_counter() - t0
                steps += 1
        await env.close()
        return spent, steps

    results: list[dict[str, Any]] = []
    ratios = []
    for r in range(args.rounds):
        a_s, n = direct()
        b_s, m = asyncio.run(bridged())
        assert n == m
        row = {"case": f"round {r + 1}", "steps": n, "direct_ms_per_step": round(a_s / n * 1e3, 3),
               "bridge_ms_per_step": round(b_s / m * 1e3, 3), "bridge_over_direct": round(b_s / a_s, 3)}
        ratios.append(b_s / a_s)
        print(json.dumps(row), flush=True)
        results.append(row)
    summary = {"case": "bridge / direct per step", "median": round(statistics.median(ratios), 3),
               "per_round": [round(x, 3) for x in ratios]}
    print(json.dumps(summary), flush=True)
    print("RESULTS_JSON " + json.dumps([*results, summary]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
