"""The browser pool: a killed or hung chromium ends its episode with an error, the pool recovers; clean exit."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from helpers import task

from agentbridge.models import load_tokenizer
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.driver import run_episode
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.rollout.trajectory import Generation, SamplingParams, Trajectory
from agentbridge.spec import load_spec
from agentbridge_gui.browser import BrowserPool
from agentbridge_gui.env import MiniWoBEnv

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def agent() -> Agent:
    spec = load_spec(ROOT / "examples" / "gui_text.yaml")
    return Agent(spec, load_tokenizer(spec.model.path))


class Sabotage:
    """Plays the expert, but first does ``harm(browser)`` to the env's browser before its first turn."""

    def __init__(self, env: MiniWoBEnv, tokenizer: Any, harm: Any) -> None:
        self.env, self.harm, self.expert = env, harm, ScriptedPolicy.for_env(env, tokenizer)
        self.done = False

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams,
                       images: list[Any] | None = None) -> Generation:
        if not self.done:
            self.done = True
            self.harm(self.env.browser)
        return await self.expert.generate(prompt_ids, sampling, images)


def episode(agent: Agent, pool: BrowserPool, name: str, seed: int, harm: Any = None) -> Trajectory:
    env = MiniWoBEnv(observation="dom", pool=pool)
    policy = Sabotage(env, agent.tokenizer, harm) if harm else ScriptedPolicy.for_env(env, agent.tokenizer)
    return asyncio.run(run_episode(policy, env, task(name, seed), agent.renderer, agent.limits,
                                   parser=agent.parser, rewards=agent.rewards))


def kill_chromium(browser: Any) -> None:
    os.kill(browser.chromium_pid(), signal.SIGKILL)


def freeze_chromium(browser: Any) -> None:
    for pid in browser.pids():  # chromedriver keeps answering; every chromium process stops
        if pid != browser.driver.service.process.pid:
            os.kill(pid, signal.SIGSTOP)


@pytest.mark.parametrize("harm, name", [(kill_chromium, "killed"), (freeze_chromium, "hung")])
def test_broken_browser_ends_episode_with_error_and_pool_recovers(agent: Agent, harm: Any, name: str) -> None:
    with BrowserPool(1, op_timeout_s=4.0) as pool:
        ok = episode(agent, pool, "click-button", 1)
        assert ok.finish_reason == "done" and ok.reward > 0
        first = pool.browsers[0]
        old_pids = first.pids()
        t0 = time.perf_counter()
        broken = episode(agent, pool, "click-button", 2, harm=harm)
        assert time.perf_counter() - t0 < 15
        assert broken.finish_reason == "error" and "browser" in (broken.error or ""), broken.error
        assert broken.reward == 0.0 and broken.reward_components["process"] == 0.0  # never a silent reward
        assert first.dead and pool.stats.replaced == 1
        for seed in (3, 4, 5):  # later episodes get a fresh browser and succeed
            later = episode(agent, pool, "enter-text", seed)
            assert later.finish_reason == "done" and later.reward > 0, later.error
        assert pool.browsers and pool.browsers[0] is not first and pool.stats.started == 2
        time.sleep(0.5)
        assert not [p for p in old_pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


def test_pool_bounds_browsers_and_reuses_them() -> None:
    async def run() -> None:
        with BrowserPool(2, op_timeout_s=10.0, max_episodes=3) as pool:
            envs = [MiniWoBEnv(pool=pool) for _ in range(5)]

            async def one(env: MiniWoBEnv, seed: int) -> float:
                await env.reset(task("click-test", seed))
                await asyncio.sleep(0.05)
                await env.close()
                return 0.0

            await asyncio.gather(*(one(e, i) for i, e in enumerate(envs)))
            assert len(pool.browsers) <= 2 and pool.stats.episodes == 5
            # reused, not one per episode; a browser that reached max_episodes may already have been replaced
            assert pool.stats.started - pool.stats.recycled - pool.stats.replaced <= 2 and pool.stats.started <= 3
            await asyncio.gather(*(one(MiniWoBEnv(pool=pool), 10 + i) for i in range(3)))
            assert pool.stats.recycled >= 1  # max_episodes=3: old browsers are replaced
            assert len(pool.browsers) <= 2

    asyncio.run(run())


SCRIPT = textwrap.dedent("""
    import asyncio, json, signal, sys, time
    # a job started in the background by a non-interactive shell inherits SIGINT as ignored; a terminal's Ctrl-C
    # reaches a Python that has its default handler, so put it back
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from agentbridge.env import Task
    from agentbridge_gui.browser import BrowserPool
    from agentbridge_gui.env import MiniWoBEnv

    async def main():
        pool = BrowserPool(1)
        env = MiniWoBEnv(pool=pool)
        await env.reset(Task("t", "t", {"task": "click-test", "seed": 1}))
        print(json.dumps(pool.browsers[0].pids()), flush=True)
        while True:
            await asyncio.sleep(0.1)

    asyncio.run(main())
""")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_browsers_are_cleaned_up_on_ctrl_c_and_sigterm(sig: signal.Signals) -> None:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # own group: only the python process gets the signal
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        pids = json.loads(line)
        assert len(pids) >= 2, proc.stderr.read()  # type: ignore[union-attr]
        proc.send_signal(sig)
        proc.wait(timeout=90)  # generous: a loaded 2-core machine can take long to quit chromium
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.time() + 15
    while time.time() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
        if not alive:
            break
        time.sleep(0.1)
    assert not alive, f"left behind after {sig.name}: {alive}"
