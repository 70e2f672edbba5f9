"""The browser pool: a killed or hung chromium ends its episode with an error, the pool recovers; clean exit."""

from __future__ import annotations

import asyncio
import contextlib
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
from agentbridge.spec import load_spec
from agentbridge.trajectory import Generation, SamplingParams, Trajectory
from agentbridge_gui.browser import BrowserPool
from agentbridge_gui.env import MiniWoBEnv
from agentbridge_gui.watchdog import ensure_watchdog, owned_processes

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
        assert not [p for p in old_pids if running(p)]
        assert first.user_data_dir is not None and not first.user_data_dir.exists()  # its profile is removed


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
    import asyncio, json, os, signal, sys, time
    # a job started in the background by a non-interactive shell inherits SIGINT as ignored; a terminal's Ctrl-C
    # reaches a Python that has its default handler, so put it back
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from agentbridge.env import Task
    from agentbridge_gui.browser import BrowserPool
    from agentbridge_gui.env import MiniWoBEnv

    from agentbridge_gui.watchdog import ensure_watchdog

    async def main():
        pool = BrowserPool(1)
        env = MiniWoBEnv(pool=pool)
        await env.reset(Task("t", "t", {"task": "click-test", "seed": 1}))
        watchdog = ensure_watchdog()
        if sys.argv[1] == "pause-watchdog":  # so that only this process's own exit handlers can clean up
            os.kill(watchdog.process.pid, signal.SIGSTOP)
        print(json.dumps({"pids": pool.browsers[0].pids(), "token": watchdog.token, "root": str(watchdog.root),
                          "watchdog": watchdog.process.pid}), flush=True)
        while True:
            await asyncio.sleep(0.1)

    asyncio.run(main())
""")


def start_child(mode: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """A Python process with one pool browser on a task page; returns it and what it printed."""
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # own group: only the python process gets the signal
    line = proc.stdout.readline()  # type: ignore[union-attr]
    if not line:
        proc.kill()
        pytest.fail(f"the child did not start a browser: {proc.stderr.read()}")  # type: ignore[union-attr]
    info = json.loads(line)
    assert len(info["pids"]) >= 2 and Path(info["root"]).is_dir()
    return proc, info


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie); one that ends while being asked is not."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def leftovers(pids: list[int], token: str, within_s: float) -> list[int]:
    """Pids still alive after ``within_s``: the child's browser tree, and any process that carries its token."""
    deadline = time.time() + within_s
    while True:
        alive = {p for p in pids if running(p)}
        alive |= {p.pid for p in owned_processes(token)}
        if not alive or time.time() > deadline:
            return sorted(alive)
        time.sleep(0.1)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_browsers_are_cleaned_up_on_ctrl_c_and_sigterm(sig: signal.Signals) -> None:
    proc, info = start_child("pause-watchdog")  # the process's own handlers must do it, not its watchdog
    try:
        proc.send_signal(sig)
        proc.wait(timeout=90)  # generous: a loaded 2-core machine can take long to quit chromium
        alive = [p for p in leftovers(info["pids"], info["token"], 30) if p != info["watchdog"]]
        assert not alive, f"left behind after {sig.name}: {alive}"
    finally:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(ProcessLookupError):
            os.kill(info["watchdog"], signal.SIGCONT)  # it finds its parent gone, sweeps and exits
    assert not leftovers([], info["token"], 30)


def test_sigkilled_parent_leaves_no_browsers_behind() -> None:
    proc, info = start_child("")
    tree = info["pids"]
    try:
        assert set(tree) <= {p.pid for p in owned_processes(info["token"])}
        proc.send_signal(signal.SIGKILL)  # no handler runs: only the watchdog can clean up
        proc.wait(timeout=10)
        alive = leftovers(tree, info["token"], 30)  # a bound for a loaded machine: it returns when all are gone
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not alive, f"left behind after SIGKILL: {alive}"  # chromedriver, chromium and the watchdog itself
    assert not Path(info["root"]).exists()  # the browser profiles went too


def test_a_dead_watchdog_is_replaced_under_the_same_token() -> None:
    first = ensure_watchdog()
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait(timeout=10)
    second = ensure_watchdog()  # browsers started before still carry the old token: the new one must know it
    assert second.process.pid != first.process.pid and second.process.poll() is None
    assert second.token == first.token and second.root.is_dir()
    assert ensure_watchdog() is second
