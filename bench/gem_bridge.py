"""What the GEM bridge adds to a step of a GEM env, measured side by side in one run.

GEM runs in its own venv (``.venv-gem``), so its envs run in a worker process and every bridge step is a round
trip: the driver's message -> JSON line -> worker (restore the session's RNG state, ``env.step``, save it) -> JSON
line -> ``StepResult``. Three sides, same envs, same seeds, same actions:

- direct: ``env.step(action)`` in GEM's own process, each call timed there (the worker's ``play`` request: a GEM
  user's loop, no bridge);
- transport: the bare request/reply to the worker from this process (``Worker.request("step", ...)``), which
  includes the worker's step;
- bridge: ``GemEnvironment.step(message)`` (``asyncio.to_thread`` around the request, the observation and metrics).

Cases: ``game:GuessTheNumber-v0-hard`` (the expert's bisection: about 5 steps of string work), ``game:Game2048-v0-
easy`` (12 moves, numpy board updates), ``rg:basic_arithmetic`` (one answer scored by reasoning-gym), and
``rg:basic_arithmetic`` with GEM's ``python_tool`` wrapper (a ``<python>`` call run in a subprocess, then the
answer). Only steps are timed; rounds alternate which side goes first. Each round's ratio is of the summed step
times of the side over the direct side's.

Run: ``python bench/gem_bridge.py`` (makes ``.venv-gem`` on first use; about a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

CASES: dict[str, dict[str, Any]] = {
    "game:GuessTheNumber-v0-hard": {},
    "game:Game2048-v0-easy": {"moves": ["\\boxed{up}", "\\boxed{left}", "\\boxed{down}", "\\boxed{right}"] * 3},
    "rg:basic_arithmetic": {},
    "rg:basic_arithmetic+python_tool": {"wrappers": ["python_tool"], "tool": "<python>print(6 * 7)</python>"},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tool-episodes", type=int, default=10, help="episodes of the python_tool case (slow)")
    args = parser.parse_args()
    from agentbridge.rollout.driver import assistant_action
    from agentbridge.rollout.parsers import HermesParser
    from agentbridge_gem.client import pool
    from agentbridge_gem.env import GemEnvironment
    from agentbridge_gem.tasks import gem_episodes

    hermes = HermesParser()
    worker = pool(None, 1).worker()
    results: list[dict[str, Any]] = []

    async def plan(case: str, conf: dict[str, Any], task: Any) -> list[str]:
        """The episode's actions: the expert's (recorded once, untimed), or the fixed moves."""
        env_id = case.split("+")[0]
        if "moves" in conf:
            return list(conf["moves"])
        env = GemEnvironment(env_id, wrappers=conf.get("wrappers"))
        await env.reset(task)
        actions = [conf["tool"]] if "tool" in conf else []
        if actions:
            await env.step({"role": "assistant", "content": actions[0]})
        while True:
            actions.append(env.expert_action())
            if (await env.step({"role": "assistant", "content": actions[-1]})).done:
                break
        await env.close()
        return actions

    def bench_case(case: str, conf: dict[str, Any]) -> None:
        env_id, wrappers = case.split("+")[0], conf.get("wrappers") or []
        n = args.tool_episodes if wrappers else args.episodes
        tasks = gem_episodes("eval", n, env_id=env_id)
        plans = [asyncio.run(plan(case, conf, t)) for t in tasks]
        messages = [[assistant_action(a, hermes)[0] for a in p] for p in plans]

        def direct(i: int) -> list[float]:
            reply = worker.request("play", env_id=env_id, wrappers=wrappers, seed=tasks[i].data["seed"],
                                   actions=plans[i])
            return list(reply["step_s"])

        def transport(i: int) -> list[float]:
            session = worker.request("make", env_id=env_id, wrappers=wrappers)["session"]
            worker.request("reset", session=session, seed=tasks[i].data["seed"])
            spent = []
            for action in plans[i]:
                t0 = time.perf_counter()
                worker.request("step", session=session, action=action)
                spent.append(time.perf_counter() - t0)
            worker.request("close", session=session)
            return spent

        async def bridged(i: int) -> list[float]:
            env = GemEnvironment(env_id, wrappers=wrappers)
            await env.reset(tasks[i])
            spent = []
            for message in messages[i]:
                t0 = time.perf_counter()
                result = await env.step(message)
                spent.append(time.perf_counter() - t0)
            assert result.done or "moves" in conf, result  # the fixed 2048 moves need not end the game
            await env.close()
            return spent

        async def one_round(r: int) -> dict[str, list[float]]:
            sides: dict[str, list[float]] = {"direct": [], "transport": [], "bridge": []}
            for i in range(n):
                order = ["direct", "transport", "bridge"]
                if (i + r) % 2:
                    order.reverse()
                for side in order:
                    sides[side] += (direct(i) if side == "direct" else transport(i) if side == "transport"
                                    else await bridged(i))
            return sides

        ratios: dict[str, list[float]] = {"transport": [], "bridge": []}
        for r in range(args.rounds):
            sides = asyncio.run(one_round(r))
            total = {k: sum(v) for k, v in sides.items()}
            steps = len(sides["direct"])
            row = {"case": f"{case} round {r + 1}", "steps": steps,
                   **{f"{k}_us_per_step": round(v / steps * 1e6, 1) for k, v in total.items()},
                   "transport_over_direct": round(total["transport"] / total["direct"], 3),
                   "bridge_over_direct": round(total["bridge"] / total["direct"], 3)}
            for k in ratios:
                ratios[k].append(total[k] / total["direct"])
            print(json.dumps(row), flush=True)
            results.append(row)
        summary = {"case": f"{case}: side / direct, summed step time (median of rounds)",
                   "transport": round(statistics.median(ratios["transport"]), 3),
                   "bridge": round(statistics.median(ratios["bridge"]), 3)}
        print(json.dumps(summary), flush=True)
        results.append(summary)

    for case, conf in CASES.items():
        bench_case(case, conf)
    print("RESULTS_JSON " + json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
