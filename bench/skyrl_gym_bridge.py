"""What the SkyRL-gym bridge adds to a step of a SkyRL-gym env, measured side by side in one run.

Directly: ``skyrl_gym.make(env_class, env_config=, extras=row)``, ``env.init(prompt)``, then ``env.step(text)`` with
each scripted turn's text — what SkyRL's generator calls. Through the bridge: ``SkyRLGymEnv.reset(task)`` then
``SkyRLGymEnv.step(message)`` with the assistant message the driver builds for the same text, both with
``env.step`` in a worker thread (``in_thread=True``, as SkyRL's generator does with ``max_env_workers``; the bridge's
default for envs with tools) and inline (``in_thread=False``, its default for the regex-scored gsm8k and aime). Same
rows, same texts; only step calls are timed (make/init/reset are not); episodes alternate which side goes first and
the order flips every round. Each round's ratio is of the summed step times (text2sql's two kinds of step differ
tenfold, so a median step would be one or the other); the median step of each side is shown too.

Cases: ``gsm8k_multi_turn`` (three turns: a well-formed wrong answer, no answer, the right one: SkyRL-gym's regex
scoring, microseconds) and ``text2sql`` (two turns: a ``<sql>`` query run by its SQL tool group on a generated
SQLite database, then the ``<solution>`` scored by running it and the gold query).

Run: ``python bench/skyrl_gym_bridge.py`` (about a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from typing import Any


def scripts(env_class: str, row: dict[str, Any]) -> list[str]:
    truth = row["reward_spec"]["ground_truth"]
    if env_class == "gsm8k_multi_turn":
        return ["So it is #### 100000", "Let me think again.", f"#### {truth}"]
    return [f"<think>Run the query.</think>\n<sql>{truth}</sql>",
            f"<think>It answers the question.</think>\n<solution>{truth}</solution>"]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import skyrl_gym
    from omegaconf import OmegaConf

    from agentbridge.rollout.driver import assistant_action
    from agentbridge.rollout.parsers import HermesParser
    from agentbridge_skyrl_gym.env import SkyRLGymEnv
    from agentbridge_skyrl_gym.tasks import arithmetic_tasks, ensure_database, sql_tasks

    db_path = tempfile.mkdtemp(prefix="skyrl-bench-")
    hermes = HermesParser()
    cases = {"gsm8k_multi_turn": (arithmetic_tasks("eval", args.episodes, env_class="gsm8k_multi_turn"), {}),
             "text2sql": (sql_tasks("eval", args.episodes), {"db_path": db_path})}
    for task in cases["text2sql"][0]:  # the direct side needs the databases on disk (the bridge writes missing ones)
        ensure_database(db_path, task.data["skyrl"]["db_id"])
    results: list[dict[str, Any]] = []
    def bench_case(env_class: str, tasks: list[Any], config: dict[str, Any]) -> None:
        plans = [scripts(env_class, t.data["skyrl"]) for t in tasks]
        messages = [[assistant_action(text, hermes)[0] for text in plan] for plan in plans]

        def direct(i: int) -> list[float]:
            row = tasks[i].data["skyrl"]
            extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
            extras["max_turns"] = 5
            env = skyrl_gym.make(env_class, env_config=OmegaConf.create(config), extras=extras)
            env.init(row["prompt"])
            spent = []
            for text in plans[i]:
                t0 = time.perf_counter()
                out = env.step(text)
                spent.append(time.perf_counter() - t0)
            assert out["done"] and out["reward"] == 1.0, out
            return spent

        async def bridged(i: int, in_thread: bool) -> list[float]:
            env = SkyRLGymEnv(env_class, env_config=config, max_turns=5, in_thread=in_thread)
            await env.reset(tasks[i])
            spent = []
            for message in messages[i]:
                t0 = time.perf_counter()
                result = await env.step(message)
                spent.append(time.perf_counter() - t0)
            assert result.done and result.reward == 1.0, result
            await env.close()
            return spent

        async def one_round(r: int) -> dict[str, list[float]]:
            sides: dict[str, list[float]] = {"direct": [], "thread": [], "inline": []}
            for i in range(len(tasks)):
                order = ["direct", "thread", "inline"]
                if (i + r) % 2:
                    order.reverse()
                for side in order:
                    sides[side] += direct(i) if side == "direct" else await bridged(i, side == "thread")
            return sides

        ratios: dict[str, list[float]] = {"thread": [], "inline": []}
        for r in range(args.rounds):
            sides = asyncio.run(one_round(r))
            med = {k: statistics.median(v) for k, v in sides.items()}
            total = {k: sum(v) for k, v in sides.items()}
            n = len(sides["direct"])
            row = {"case": f"{env_class} round {r + 1}", "steps": n,
                   "direct_us_per_step": round(total["direct"] / n * 1e6, 1),
                   "bridge_thread_us_per_step": round(total["thread"] / n * 1e6, 1),
                   "bridge_inline_us_per_step": round(total["inline"] / n * 1e6, 1),
                   "median_step_us": {k: round(v * 1e6, 1) for k, v in med.items()},
                   "thread_over_direct": round(total["thread"] / total["direct"], 3),
                   "inline_over_direct": round(total["inline"] / total["direct"], 3)}
            for k in ratios:
                ratios[k].append(total[k] / total["direct"])
            print(json.dumps(row), flush=True)
            results.append(row)
        summary = {"case": f"{env_class}: bridge / direct, summed step time (median of rounds)",
                   "in_thread": round(statistics.median(ratios["thread"]), 3),
                   "inline": round(statistics.median(ratios["inline"]), 3)}
        print(json.dumps(summary), flush=True)
        results.append(summary)

    for env_class, (tasks, config) in cases.items():
        bench_case(env_class, tasks, config)
    print("RESULTS_JSON " + json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
