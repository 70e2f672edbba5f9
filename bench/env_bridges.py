"""What the Gymnasium and reasoning-gym bridges add to a step of the environment they wrap, measured side by side.

Gymnasium: for every toy-text env with a codec (FrozenLake-v1 on the example's random 4x4 maps, Taxi-v4,
Blackjack-v1, CliffWalking-v1) the same episodes (same reset seeds, the plugin's expert's moves, recorded once
untimed) are played by calling ``gymnasium.Env.step(action)`` directly and through the plugin's
``GymTextEnv.step(message)`` (parse ``<action>NAME</action>``, step, metrics, the codec's text of the observation,
``StepResult``), with the assistant message the driver builds for the expert's text (``assistant_action`` with the
hermes parser). Only the step calls are timed (``gymnasium.make`` and resets are not); episodes alternate which
side goes first, and the order flips every round.

reasoning-gym: one answer step is scoring an answer with the task's own verifier. Directly: ``dataset.score_answer
(answer, entry)`` with the entry in hand. Through the bridge, what the driver runs for the answer turn:
``AnswerEnv.step(message)`` (ends the episode) and the ``rg/verified`` reward ``verified_score(trajectory, task)``
(extract the ``<answer>``, look the entry up, reasoning-gym's ``get_score_answer_fn``). Same tasks (the example's
eval split), the reference answers, alternating per answer and per round; resets and the trajectory are not timed.

Run: ``python bench/env_bridges.py`` (about a minute). Toy-text steps take microseconds, so each row also gives
the added microseconds per step (bridge - direct) and the median step of each side with their ratio (one preemption
by another job can swamp a round's mean at this scale; the medians are robust to it). Every case whose median
ratio is over 1.10 gets a cProfile of one more bridge round: its top functions by own time, in µs per step
(``--profile 0`` skips it).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import statistics
import sys
import time
from typing import Any

BUDGET = 1.10  # the requirement: the bridges add at most 10 % to a step of the wrapped environment
GYM_MAP = {"size": 4, "frozen": 0.8, "is_slippery": False}  # examples/gymnasium.yaml
RG_TASKS: dict[str, dict[str, Any]] = {  # examples/reasoning_gym.yaml, and a second generator
    "basic_arithmetic": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2, "allow_negation": False},
    "leg_counting": {},
}


def gym_plans(env_id: str, episodes: int) -> tuple[list[Any], list[tuple[list[int], list[Any]]]]:
    """The episodes and, per episode, the expert's action indices and the driver's assistant messages for them
    (played once through the bridge, untimed)."""
    from agentbridge.rollout.driver import assistant_action
    from agentbridge.rollout.parsers import HermesParser
    from agentbridge_gymnasium.env import GymTextEnv, parse_action
    from agentbridge_gymnasium.tasks import gym_episodes

    tasks = gym_episodes("eval", episodes, 0, env_id=env_id)
    parser = HermesParser()

    async def play() -> list[tuple[list[int], list[Any]]]:
        env = GymTextEnv(env_id, map=GYM_MAP)
        out = []
        for task in tasks:
            await env.reset(task)
            indices, messages, done = [], [], False
            while not done:
                text = env.expert_action()
                message, _ = assistant_action(text, parser)
                index = parse_action(text, env.codec.actions)
                assert index is not None, text
                indices.append(index)
                messages.append(message)
                done = (await env.step(message)).done
                assert len(indices) < 200, f"{task.id}: the expert did not finish"
            out.append((indices, messages))
        await env.close()
        return out

    return tasks, asyncio.run(play())


def gym_round(env_id: str, tasks: list[Any], plans: list[tuple[list[int], list[Any]]], r: int,
              profiler: cProfile.Profile | None = None) -> tuple[list[float], list[float]]:
    """Every episode directly and through the bridge, back to back (which goes first alternates): the seconds of
    every direct step and of every bridge step."""
    import gymnasium

    from agentbridge_gymnasium.codecs import codec_for
    from agentbridge_gymnasium.env import GymTextEnv

    codec = codec_for(env_id)

    a_t: list[float] = []
    b_t: list[float] = []

    def direct(task: Any, actions: list[int]) -> None:
        seed = int(task.data["seed"])
        env = gymnasium.make(env_id, **codec.make_kwargs(seed, GYM_MAP))
        env.reset(seed=seed)
        terminated = truncated = False
        for a in actions:
            t0 = time.perf_counter()
            _, _, terminated, truncated, _ = env.step(a)
            a_t.append(time.perf_counter() - t0)
        assert terminated or truncated, f"{task.id}: direct replay did not end with the plan"
        env.close()

    async def bridged(env: GymTextEnv, task: Any, messages: list[Any]) -> None:
        await env.reset(task)
        result = None
        if profiler is not None:
            profiler.enable()
        for m in messages:
            t0 = time.perf_counter()
            result = await env.step(m)
            b_t.append(time.perf_counter() - t0)
        if profiler is not None:
            profiler.disable()
        assert result is not None and result.done, f"{task.id}: bridge replay did not end with the plan"

    async def run() -> tuple[list[float], list[float]]:
        env = GymTextEnv(env_id, map=GYM_MAP)
        for i, (task, (actions, messages)) in enumerate(zip(tasks, plans, strict=True)):
            if (i + r) % 2:
                await bridged(env, task, messages)
                direct(task, actions)
            else:
                direct(task, actions)
                await bridged(env, task, messages)
        await env.close()
        return a_t, b_t

    return asyncio.run(run())


def rg_setup(name: str, config: dict[str, Any], answers: int) -> list[tuple[Any, Any, dict[str, Any], str]]:
    """Per answer: the bridge's task, reasoning-gym's own dataset and entry for it (made apart from the bridge's
    cache), and the answer text."""
    import reasoning_gym

    from agentbridge_reasoning_gym.tasks import rg_tasks

    tasks = rg_tasks("eval", answers, 0, {name: config})
    top = max(t.data["rg"]["index"] for t in tasks) + 1
    dataset = reasoning_gym.create_dataset(name, size=top, seed=0, **config)
    out = []
    for t in tasks:
        item = dataset[t.data["rg"]["index"]]
        assert item["question"] == t.prompt and str(item["answer"]) == t.data["answer"], t.id
        out.append((t, dataset, item, t.data["answer"]))
    return out


def rg_round(cases: list[tuple[Any, Any, dict[str, Any], str]], r: int,
             profiler: cProfile.Profile | None = None) -> tuple[list[float], list[float], list[float]]:
    """Every answer scored directly and through the bridge (step + reward), alternating which goes first: the
    seconds of every direct score, of every bridge step + reward, and of the bridge's env.step part of it."""
    from agentbridge.rollout.driver import assistant_action
    from agentbridge.rollout.parsers import HermesParser
    from agentbridge.trajectory import Trajectory, Turn
    from agentbridge_reasoning_gym.env import AnswerEnv, verified_score

    parser = HermesParser()

    def direct(dataset: Any, item: dict[str, Any], answer: str) -> float:
        t0 = time.perf_counter()
        score = dataset.score_answer(answer, item)
        spent = time.perf_counter() - t0
        assert score == 1.0, (answer, item["answer"], score)
        return spent

    async def bridged(env: AnswerEnv, task: Any, answer: str) -> tuple[float, float]:
        await env.reset(task)
        text = f"<answer>{answer}</answer>"
        message, _ = assistant_action(text, parser)
        traj = Trajectory(task_id=task.id, prompt_ids=[0], turns=[Turn(text=text)])
        if profiler is not None:
            profiler.enable()
        t0 = time.perf_counter()
        result = await env.step(message)
        t1 = time.perf_counter()
        score = verified_score(traj, task)
        t2 = time.perf_counter()
        if profiler is not None:
            profiler.disable()
        assert result.done and score == 1.0, (task.id, score)
        return t2 - t0, t1 - t0

    async def run() -> tuple[list[float], list[float], list[float]]:
        env = AnswerEnv()
        a_t, b_t, b_step = [], [], []
        for i, (task, dataset, item, answer) in enumerate(cases):
            if (i + r) % 2:
                b, s = await bridged(env, task, answer)
                a = direct(dataset, item, answer)
            else:
                a = direct(dataset, item, answer)
                b, s = await bridged(env, task, answer)
            a_t.append(a)
            b_t.append(b)
            b_step.append(s)
        await env.close()
        return a_t, b_t, b_step

    return asyncio.run(run())


def timer_overhead_us(n: int = 100_000) -> float:
    """What one ``t0 = perf_counter(); ...; spent += perf_counter() - t0`` costs around nothing, in µs (both sides
    pay it once per timed step; it matters only next to sub-microsecond direct calls)."""
    spent = 0.0
    for _ in range(n):
        t0 = time.perf_counter()
        spent += time.perf_counter() - t0
    return spent / n * 1e6


def top_of(profiler: cProfile.Profile, n: int, steps: int) -> str:
    """The top ``n`` functions by own time, in µs per bridge step, and own time summed by where the code lives
    (cProfile's own overhead inflates small functions; read the shares, not the absolute numbers)."""
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = []
    groups: dict[str, float] = {}
    for (path, line, func), (_, calls, tt, ct, _) in stats.items():
        where = ("agentbridge" if "/agentbridge/" in path or "/plugins/" in path else
                 next((k for k in ("gymnasium", "reasoning_gym", "numpy", "random", "json") if k in path), "other"))
        groups[where] = groups.get(where, 0.0) + tt
        short = path.split("site-packages/")[-1].split("/work/main/")[-1].split("/lib/python3.11/")[-1]
        rows.append((tt, ct, calls, f"{short}:{line}({func})" if line else func))
    total = sum(groups.values())
    out = [f"  {steps} bridge steps, {total / steps * 1e6:.2f} us/step under cProfile; own time by where the code "
           "lives: " + ", ".join(f"{k} {v / total:.0%}" for k, v in sorted(groups.items(), key=lambda kv: -kv[1])),
           "  own_us/step  cum_us/step  calls/step  function"]
    for tt, ct, calls, name in sorted(rows, reverse=True)[:n]:
        out.append(f"  {tt / steps * 1e6:11.2f}  {ct / steps * 1e6:11.2f}  {calls / steps:10.2f}  {name}")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--envs", nargs="*", default=["FrozenLake-v1", "Taxi-v4", "Blackjack-v1", "CliffWalking-v1"])
    parser.add_argument("--episodes", type=int, default=150, help="episodes per env and round")
    parser.add_argument("--rg-tasks", nargs="*", default=list(RG_TASKS), help="reasoning-gym tasks")
    parser.add_argument("--answers", type=int, default=500, help="answers per reasoning-gym task and round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile", type=int, default=12, metavar="N",
                        help="for a case whose median ratio is above 1.10, profile one more bridge round and print "
                             "its top N functions (0: never)")
    args = parser.parse_args()

    results: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    profiles: list[tuple[str, str]] = []

    def report(case: str, r: int, a_t: list[float], b_t: list[float], rows: list[dict[str, Any]],
               extra: dict[str, Any] | None = None) -> None:
        """One round's row: mean times per step (total / steps) and their ratio, the added µs per step, and the
        same from the median step of each side (robust to the other jobs' preemptions on this machine)."""
        n, a_s, b_s = len(a_t), sum(a_t), sum(b_t)
        a_med, b_med = statistics.median(a_t), statistics.median(b_t)
        row = {"case": f"{case} round {r + 1}", "steps": n, "direct_ms_per_step": round(a_s / n * 1e3, 4),
               "bridge_ms_per_step": round(b_s / n * 1e3, 4), "bridge_over_direct": round(b_s / a_s, 3),
               "added_us_per_step": round((b_s - a_s) / n * 1e6, 2),
               "median_step_us": [round(a_med * 1e6, 2), round(b_med * 1e6, 2)],
               "median_step_ratio": round(b_med / a_med, 3), **(extra or {})}
        print(json.dumps(row), flush=True)
        results.append(row)
        rows.append(row)

    def summarize(case: str, rows: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> bool:
        """Prints the case's summary; True when its median is over the 10 % budget (and it is to be profiled)."""
        ratios = [row["bridge_over_direct"] for row in rows]
        summary = {"case": f"{case}: bridge / direct per step", "median": round(statistics.median(ratios), 3),
                   "per_round": ratios,
                   "added_us_per_step_median": round(statistics.median(row["added_us_per_step"] for row in rows), 2),
                   "median_step_ratio_median": round(statistics.median(row["median_step_ratio"] for row in rows), 3),
                   **(extra or {})}
        print(json.dumps(summary), flush=True)
        summaries.append(summary)
        return bool(args.profile) and summary["median"] > BUDGET

    for env_id in args.envs:
        tasks, plans = gym_plans(env_id, args.episodes)
        gym_round(env_id, tasks, plans, 0)  # warm-up, not reported
        rows: list[dict[str, Any]] = []
        for r in range(args.rounds):
            report(f"gym {env_id}", r, *gym_round(env_id, tasks, plans, r), rows)
        if summarize(f"gym {env_id}", rows):
            profiler = cProfile.Profile()
            _, b_t = gym_round(env_id, tasks, plans, 0, profiler)
            profiles.append((f"gym {env_id}", top_of(profiler, args.profile, len(b_t))))

    timer_us = timer_overhead_us()
    for name in args.rg_tasks:
        cases = rg_setup(name, RG_TASKS.get(name, {}), args.answers)
        rg_round(cases, 0)  # warm-up, not reported
        rows = []
        for r in range(args.rounds):
            a_t, b_t, b_step = rg_round(cases, r)
            extra = {"bridge_env_step_us": round(sum(b_step) / len(b_step) * 1e6, 2),
                     "bridge_reward_us": round((sum(b_t) - sum(b_step)) / len(b_t) * 1e6, 2)}
            report(f"rg {name}", r, a_t, b_t, rows, extra)
        if summarize(f"rg {name}", rows, {"timer_overhead_us_per_step": round(timer_us, 3)}):
            profiler = cProfile.Profile()
            _, b_t, _ = rg_round(cases, 0, profiler)
            profiles.append((f"rg {name}", top_of(profiler, args.profile, len(b_t))))

    for case, text in profiles:
        print(f"--- profile of the bridge loop: {case} (cProfile, by own time) ---")
        print(text.rstrip())
    print("RESULTS_JSON " + json.dumps([*results, *summaries]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
