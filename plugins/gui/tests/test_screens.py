"""Screenshots that reach the model are the ones the browser rendered at that step (on a page that changes)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from helpers import task

from agentbridge.models import load_tokenizer
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.driver import run_episode
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.spec import load_spec
from agentbridge.trajectory import Generation, SamplingParams
from agentbridge_gui import page
from agentbridge_gui.browser import BrowserPool
from agentbridge_gui.env import MiniWoBEnv

ROOT = Path(__file__).resolve().parents[3]


def browser_screenshot(driver: Any) -> Any:
    """What the browser shows right now, read straight from it."""
    return page.screenshot(driver, tuple(driver.execute_script("return [window.innerWidth, window.innerHeight];")))


class Witness:
    """The expert, recording before each turn the images the model receives and a fresh browser screenshot."""

    def __init__(self, env: MiniWoBEnv, tokenizer: Any) -> None:
        self.env, self.expert = env, ScriptedPolicy.for_env(env, tokenizer)
        self.seen: list[tuple[list[Any], Any]] = []

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams,
                       images: list[Any] | None = None) -> Generation:
        assert self.env.browser is not None
        self.seen.append((list(images or []), await self.env.browser.call(browser_screenshot)))
        return await self.expert.generate(prompt_ids, sampling, images)


def test_model_sees_the_screenshot_rendered_at_each_step() -> None:
    # the example's agent, with turns and tokens for a task of several clicks (the example's own tasks take one)
    spec = load_spec(ROOT / "examples" / "gui.yaml", ["agent.max_turns=6", "agent.max_response_tokens=512",
                                                      "agent.max_tokens_per_turn=48"])
    agent = Agent(spec, load_tokenizer(spec.model.path))
    assert not agent.renderer.check()  # the plugin's template renders tools and tool calls
    with BrowserPool(1) as pool:
        env = MiniWoBEnv(observation="screenshot", pool=pool)
        witness = Witness(env, agent.tokenizer)
        traj = asyncio.run(run_episode(witness, env, task("click-checkboxes", 7), agent.renderer, agent.limits,
                                       parser=agent.parser, rewards=agent.rewards))
    assert traj.finish_reason == "done" and traj.reward > 0, (traj.error, len(traj.prompt_ids), len(traj.response_ids))
    assert len(witness.seen) >= 3  # each checkbox click changes the page, then submit
    for turn, (images, fresh) in enumerate(witness.seen):
        assert len(images) == turn + 1  # the prompt screenshot plus one per action so far
        assert images[-1].tobytes() == fresh.tobytes(), f"turn {turn}: the model got a stale screenshot"
        if turn:
            assert images[-1].tobytes() != images[-2].tobytes(), f"turn {turn}: the page did not change"
    assert [im.tobytes() for im in traj.images] == [im.tobytes() for im in env.screenshots]
    pad = agent.renderer.image_token_id
    ids = traj.prompt_ids + traj.response_ids
    assert ids.count(pad) == sum(agent.renderer.image_tokens(im) for im in traj.images)


@pytest.mark.parametrize("observation", ["dom", "both"])
def test_dom_text_shows_the_page_after_each_action(observation: str) -> None:
    async def run() -> None:
        with BrowserPool(1) as pool:
            env = MiniWoBEnv(observation=observation, pool=pool)  # type: ignore[arg-type]
            await env.reset(task("enter-text", 4))
            box = next(e for e in env.state.elements if e.tag == "input_text")  # type: ignore[union-attr]
            result = await env.step({"role": "assistant", "content": "", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "type", "arguments": {"text": "Zed",
                                                                                           "ref": box.ref}}}]})
            content = result.observation[0]["content"]
            text = content if isinstance(content, str) else content[-1]["text"]
            assert f'[{box.ref}] input_text value="Zed" focused' in text
            assert isinstance(content, str) == (observation == "dom")
            await env.close()

    asyncio.run(run())
