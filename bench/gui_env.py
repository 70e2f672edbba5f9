"""GUI env latency vs the raw ``miniwob`` gym env on the same tasks and seeds, and steps/s with 1, 2, 4 browsers.

    python bench/gui_env.py --episodes 30 --browsers 1,2,4

Latency: the same scripted DOM expert plays both envs with screenshots on (what a VLM agent needs); reset and
step are timed around the env call only, interleaved episode by episode so CPU noise hits both alike. The ratio
is agentbridge-gui / raw (target <= 1.1). Throughput: N concurrent expert episodes on a pool of N browsers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

TASKS = ("click-button", "click-link", "enter-text")


def raw_episode(env: Any, name: str, seed: int) -> tuple[float, list[float], float]:
    """One raw miniwob episode driven by the same expert; returns (reset_s, step_s list, reward)."""
    from miniwob.action import ActionTypes

    from agentbridge_gui.expert import next_action
    from agentbridge_gui.page import Element, PageState

    t0 = time.perf_counter()
    obs, _ = env.reset(seed=seed)
    reset_s = time.perf_counter() - t0
    steps, reward = [], 0.0
    for _ in range(6):
        elements = [Element(int(e["ref"]), e["tag"], e["text"] or "", e["value"], float(e["left"][0]),
                            float(e["top"][0]), float(e["width"][0]), float(e["height"][0]), e["classes"], e["id"],
                            bool(e["flags"][0])) for e in obs["dom_elements"]]
        state = PageState(obs["utterance"], elements, None, False, 0.0, 0.0, None, dict(obs["fields"]))
        step = next_action(name, state)
        if step is None:
            break
        tool, args = step
        if tool == "click":
            action = env.unwrapped.create_action(ActionTypes.CLICK_ELEMENT, ref=args["ref"])
        else:
            action = env.unwrapped.create_action(ActionTypes.FOCUS_ELEMENT_AND_TYPE_TEXT, ref=args["ref"],
                                                 text=args["text"])
        t0 = time.perf_counter()
        obs, reward, done, _, _ = env.step(action)
        steps.append(time.perf_counter() - t0)
        if done:
            break
    return reset_s, steps, float(reward)


async def ours_episode(env: Any, name: str, seed: int) -> tuple[float, list[float], float]:
    from agentbridge.env import Task
    from agentbridge.rollout.parsers import HermesParser

    parser = HermesParser()
    t0 = time.perf_counter()
    await env.reset(Task(f"{name}-{seed}", name, {"task": name, "seed": seed}))
    reset_s = time.perf_counter() - t0
    steps, reward = [], 0.0
    for _ in range(6):
        text = env.expert_action()
        calls = parser.parse(text).tool_calls
        if not calls:
            break
        t0 = time.perf_counter()
        result = await env.step({"role": "assistant", "content": text, "tool_calls": calls})
        steps.append(time.perf_counter() - t0)
        if result.done:
            reward = result.reward
            break
    await env.close()
    return reset_s, steps, reward


def latency(episodes: int) -> dict[str, Any]:
    import gymnasium
    import miniwob

    from agentbridge_gui.browser import BrowserPool
    from agentbridge_gui.env import MiniWoBEnv

    gymnasium.register_envs(miniwob)
    out: dict[str, Any] = {}
    pool = BrowserPool(1)
    loop = asyncio.new_event_loop()
    try:
        for name in TASKS:
            raw_env = gymnasium.make(f"miniwob/{name}-v1")
            raw_episode(raw_env, name, 0)  # warm both (browser start, page load)
            loop.run_until_complete(ours_episode(MiniWoBEnv(observation="both", pool=pool), name, 0))
            rows: dict[str, dict[str, list[float]]] = {k: {"reset": [], "step": [], "reward": []}
                                                       for k in ("raw", "ours")}
            for i in range(episodes):
                for kind in (("raw", "ours") if i % 2 == 0 else ("ours", "raw")):
                    if kind == "raw":
                        r, s, w = raw_episode(raw_env, name, 1 + i)
                    else:
                        r, s, w = loop.run_until_complete(
                            ours_episode(MiniWoBEnv(observation="both", pool=pool), name, 1 + i))
                    rows[kind]["reset"].append(r)
                    rows[kind]["step"] += s
                    rows[kind]["reward"].append(w)
            raw_env.close()
            med = {k: {m: statistics.median(v[m]) for m in ("reset", "step")} for k, v in rows.items()}
            out[name] = {"raw_reset_ms": 1000 * med["raw"]["reset"], "ours_reset_ms": 1000 * med["ours"]["reset"],
                         "raw_step_ms": 1000 * med["raw"]["step"], "ours_step_ms": 1000 * med["ours"]["step"],
                         "reset_ratio": med["ours"]["reset"] / med["raw"]["reset"],
                         "step_ratio": med["ours"]["step"] / med["raw"]["step"],
                         "raw_success": sum(w > 0 for w in rows["raw"]["reward"]) / episodes,
                         "ours_success": sum(w > 0 for w in rows["ours"]["reward"]) / episodes}
    finally:
        pool.close()
        loop.close()
    return out


def throughput(browsers: int, episodes: int) -> dict[str, float]:
    from agentbridge_gui.browser import BrowserPool
    from agentbridge_gui.env import MiniWoBEnv

    async def run() -> dict[str, float]:
        with BrowserPool(browsers) as pool:
            await asyncio.gather(*(ours_episode(MiniWoBEnv(observation="both", pool=pool), "click-button", i)
                                   for i in range(browsers)))  # start every browser first
            t0 = time.perf_counter()
            results = await asyncio.gather(*(ours_episode(MiniWoBEnv(observation="both", pool=pool),
                                                          TASKS[i % len(TASKS)], 100 + i) for i in range(episodes)))
            wall = time.perf_counter() - t0
        actions = sum(len(s) + 1 for _, s, _ in results)  # each reset counts as a step
        return {"browsers": browsers, "episodes": episodes, "env_calls_per_s": actions / wall,
                "episodes_per_s": episodes / wall, "success": sum(w > 0 for *_, w in results) / episodes}

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=30, help="latency episodes per task and env")
    parser.add_argument("--throughput-episodes", type=int, default=40)
    parser.add_argument("--browsers", default="1,2,4")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    try:
        sizes = [int(x) for x in args.browsers.split(",")]
    except ValueError:
        print(f"error: --browsers must be comma-separated integers, got {args.browsers!r}", file=sys.stderr)
        return 2
    from agentbridge_gui.browser import BrowserUnavailable, find_binaries

    try:
        find_binaries()
    except BrowserUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    import os

    chrome, driver = find_binaries()  # the raw env too: never let Selenium Manager look online
    os.environ.setdefault("MINIWOB_CHROME_BINARY", chrome)
    os.environ.setdefault("MINIWOB_CHROMEDRIVER", driver)
    lat = latency(args.episodes)
    print("| task | raw reset ms | ours reset ms | reset ratio | raw step ms | ours step ms | step ratio | "
          "success raw/ours |\n|---|---|---|---|---|---|---|---|")
    for name, r in lat.items():
        print(f"| {name} | {r['raw_reset_ms']:.1f} | {r['ours_reset_ms']:.1f} | {r['reset_ratio']:.2f} | "
              f"{r['raw_step_ms']:.1f} | {r['ours_step_ms']:.1f} | {r['step_ratio']:.2f} | "
              f"{r['raw_success']:.2f}/{r['ours_success']:.2f} |")
    thr = [throughput(n, args.throughput_episodes) for n in sizes]
    print("\n| browsers | env calls/s | episodes/s | success |\n|---|---|---|---|")
    for t in thr:
        print(f"| {t['browsers']} | {t['env_calls_per_s']:.1f} | {t['episodes_per_s']:.2f} | {t['success']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"latency": lat, "throughput": thr}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
