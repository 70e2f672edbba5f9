"""The MiniWoB environment: observations, actions, the scripted expert, bad input as error observations."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest
from helpers import call, play_expert, result_text, task

from agentbridge.env import text_of
from agentbridge.testing import check_environment
from agentbridge_gui.browser import BrowserPool, BrowserUnavailable, find_binaries
from agentbridge_gui.env import MiniWoBEnv, render_dom, task_reward
from agentbridge_gui.expert import EXPERT_TASKS
from agentbridge_gui.page import ActionError, Element, PageState, parse_key
from agentbridge_gui.tasks import available_tasks, miniwob_tasks


@pytest.mark.parametrize("name", EXPERT_TASKS)
def test_expert_solves_task_types_through_the_dom(pool: BrowserPool, name: str) -> None:
    async def run() -> None:
        for seed in (1, 2):
            env = MiniWoBEnv(observation="dom", pool=pool)
            messages = await env.reset(task(name, seed))
            assert isinstance(messages[0]["content"], str) and "Instruction:" in messages[0]["content"]
            assert "[" in messages[0]["content"]  # elements with refs
            result = await play_expert(env)
            await env.close()
            assert result.done and result.reward > 0 and result.metrics["gui/success"] == 1.0, result_text(result)

    asyncio.run(run())


@pytest.mark.parametrize("name", ["click-button", "enter-text", "click-checkboxes"])
def test_expert_solves_with_screenshots_and_coordinates(pool: BrowserPool, name: str) -> None:
    async def run() -> None:
        env = MiniWoBEnv(observation="screenshot", pool=pool)
        messages = await env.reset(task(name, 3))
        assert set(env.tools) == {"click_xy", "type", "press", "scroll"}
        image = messages[0]["content"][0]["image"]
        assert image.size == (160, 210) and image.getextrema() != ((255, 255),) * 3
        result = await play_expert(env)
        await env.close()
        assert result.done and result.reward > 0

    asyncio.run(run())


def test_bad_actions_are_error_observations(pool: BrowserPool) -> None:
    async def run() -> None:
        env = MiniWoBEnv(observation="both", pool=pool)
        await env.reset(task("enter-text", 5))
        bad = [
            (call("click", ref=99999), "no element with ref 99999"),
            (call("click", ref="submit"), "must be integer"),
            (call("click_xy", x=500, y=20), "off the screen"),
            (call("click_xy", x=-1, y=20), "off the screen"),
            (call("scroll", direction="down", x=10, y=4000), "off the screen"),
            (call("scroll", direction="sideways"), "bad arguments"),
            (call("type", text="x" * 100_000), "type at most 200"),
            (call("type", text="hi", ref=424242), "no element with ref"),
            (call("type", text="a\x00b"), "control characters"),
            (call("press", key="FooBar"), "unknown key"),
            (call("press", key="Hyper+a"), "unknown modifier"),
            (call("press", key=""), "unknown key"),
            (call("press", key="Enter" * 500), "unknown key"),
            (call("teleport", to="moon"), "unknown tool"),
        ]
        for action, needle in bad:
            result = await env.step(action)
            assert not result.done and result.metrics["tools/failures"] == 1.0, needle
            assert needle in result_text(result), (needle, result_text(result))
        for key in ("Enter", "<Tab>", "Ctrl+a", "C-a", "ArrowLeft"):
            result = await env.step(call("press", key=key))
            assert result.metrics["tools/failures"] == 0.0, (key, result_text(result))
        solved = await play_expert(env)  # the page is still usable after all that
        await env.close()
        assert solved.done and solved.reward > 0

    asyncio.run(run())


def test_actions_after_the_task_ended_are_errors(pool: BrowserPool) -> None:
    async def run() -> None:
        env = MiniWoBEnv(observation="dom", pool=pool)
        await env.reset(task("click-test", 1))
        ref = next(e.ref for e in env.state.elements if e.tag == "button")  # type: ignore[union-attr]
        both = call("click", ref=ref)
        both["tool_calls"] = both["tool_calls"] * 2  # two calls in one turn: the second finds the task over
        result = await env.step(both)
        await env.close()
        assert result.done and result.reward > 0 and "already over" in result_text(result)

    asyncio.run(run())


def test_time_limit_ends_the_episode_with_the_tasks_own_reward(pool: BrowserPool) -> None:
    async def run() -> None:
        env = MiniWoBEnv(observation="dom", pool=pool, time_limit_s=0.3)
        await env.reset(task("click-checkboxes", 1))
        await asyncio.sleep(0.6)
        result = await env.step(call("press", key="Tab"))
        await env.close()
        assert result.done and result.reward == -1.0 and result.metrics["gui/timeout"] == 1.0

    asyncio.run(run())


def test_answer_without_tool_call_ends_with_no_reward(pool: BrowserPool) -> None:
    async def run() -> None:
        env = MiniWoBEnv(pool=pool)
        await env.reset(task("click-button", 1))
        result = await env.step({"role": "assistant", "content": "<answer>done</answer>"})
        await env.close()
        assert result.done and result.reward == 0.0

    asyncio.run(run())


def test_dom_rendering_is_compact() -> None:
    state = PageState(utterance="Click", screenshot=None, done=False, reward=0, raw_reward=0, reason=None, elements=[
        Element(1, "body", "", None, 0, 0, 160, 210, leaf=False),
        Element(2, "div", "", None, 0, 0, 160, 50, leaf=False),
        Element(3, "button", "Submit", None, 10, 10, 40, 20),
        Element(4, "input_text", "", "ab", 10, 40, 80, 20, focused=True),
        Element(5, "input_checkbox", "", True, 10, 70, 10, 10)])
    assert render_dom(state) == '[3] button "Submit"\n[4] input_text value="ab" focused\n[5] input_checkbox value=true'
    assert render_dom(state, max_elements=1).endswith("... 2 more elements")


def test_parse_key() -> None:
    assert parse_key("a") == (["a"], [])
    assert parse_key("Enter") == parse_key("<Enter>") == parse_key("enter")
    keys, mods = parse_key("Ctrl+Shift+a")
    assert keys == ["a"] and len(mods) == 2
    for bad in ("", "NoSuchKey", "Super+x", "x" * 41):
        with pytest.raises(ActionError):
            parse_key(bad)


def test_env_args_and_dataset_are_checked() -> None:
    with pytest.raises(ValueError, match="observation: must be"):
        MiniWoBEnv(observation="pixels")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="actions: unknown"):
        MiniWoBEnv(actions=["click", "drag"])
    with pytest.raises(ValueError, match="unknown MiniWoB"):
        miniwob_tasks(tasks=["click-buton"])
    a = miniwob_tasks("train", 12, seed=0)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in miniwob_tasks("train", 12, seed=0)]
    seeds = {s: {t.data["seed"] for t in miniwob_tasks(s, 50, seed=0)} for s in ("train", "dev", "eval")}
    assert not seeds["train"] & seeds["eval"] and not seeds["dev"] & (seeds["train"] | seeds["eval"])
    assert [t.data["group"] for t in miniwob_tasks("dev", 3, tasks=["click-test", "enter-text"])] == \
        ["click-test", "enter-text", "click-test"]
    with pytest.raises(ValueError, match="split must be train, dev or eval"):
        miniwob_tasks("validation")
    assert "click-button" in available_tasks() and len(available_tasks()) > 100


def test_unknown_task_fails_before_any_browser(pool: BrowserPool) -> None:
    env = MiniWoBEnv(pool=pool)
    with pytest.raises(ValueError, match="unknown MiniWoB"):
        asyncio.run(env.reset(task("no-such-task")))
    assert env.browser is None


def test_missing_chromium_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MINIWOB_CHROME_BINARY", raising=False)
    monkeypatch.delenv("MINIWOB_CHROMEDRIVER", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(BrowserUnavailable, match="apt-get install -y chromium chromium-driver") as info:
        find_binaries()
    assert "\n" not in str(info.value)


def test_tool_schemas_describe_the_actions() -> None:
    env = MiniWoBEnv(observation="both")
    schemas = {s["function"]["name"]: s["function"] for s in env.tool_schemas()}
    assert set(schemas) == {"click", "click_xy", "type", "press", "scroll"}
    assert schemas["click"]["parameters"]["required"] == ["ref"]
    assert schemas["scroll"]["parameters"]["properties"]["direction"]["enum"] == ["up", "down"]
    assert text_of({"content": [{"type": "text", "text": "x"}]}) == "x"


def test_each_action_is_one_browser_call_and_an_ended_page_is_not_walked(pool: BrowserPool) -> None:
    async def run() -> None:
        env = MiniWoBEnv(observation="both", pool=pool)
        await env.reset(task("enter-text", 6))
        browser, calls = env.browser, []
        assert browser is not None
        real_call = browser.call

        async def counting(fn: Any, *args: Any) -> Any:
            calls.append(fn.__name__)
            return await real_call(fn, *args)

        browser.call = counting  # type: ignore[method-assign]
        try:
            result = await play_expert(env)  # type the text, click submit
        finally:
            del browser.call
        await env.close()
        assert result.done and result.reward > 0
        assert calls == ["act", "act"]  # action + observation together: one thread hand-off per step
        assert env.state is not None and env.state.elements == [] and env.state.screenshot is None

    asyncio.run(run())


@pytest.mark.parametrize("observation", ["dom", "screenshot"])
def test_check_environment(pool: BrowserPool, observation: str) -> None:
    """agentbridge's environment checker: messages and step results well-typed, tools documented, the expert
    succeeds, bad actions are survived."""
    check_environment(functools.partial(MiniWoBEnv, observation=observation, pool=pool),
                      [task("click-button", 4), task("enter-text", 5)], rewards={"gui/success": task_reward})


def test_a_task_without_an_expert_is_a_clear_error_for_the_scripted_policy() -> None:
    from agentbridge_gui.env import MiniWoBEnv

    env = MiniWoBEnv(task="book-flight")
    with pytest.raises(ValueError, match="MiniWoB task 'book-flight' has no scripted expert \\(experts: click-test"):
        env.expert_action()


def test_the_grounding_reward_scores_clicks_by_the_target_elements_box(pool: BrowserPool) -> None:
    """A coordinate click counts as grounded when it lands inside the box of the element the task's expert would
    act on (from the DOM): a miss beside the target, then the expert's own click at its centre, scores 1/2."""
    from agentbridge.trajectory import Trajectory
    from agentbridge_gui.env import grounding_reward
    from agentbridge_gui.expert import next_action

    async def run() -> dict[str, float]:
        env = MiniWoBEnv(observation="screenshot", pool=pool)
        await env.reset(task("click-button", 3))
        assert env.state is not None
        step = next_action("click-button", env.state)
        assert step is not None
        box = env.state.by_ref()[step[1]["ref"]]
        miss = (int(box.left + box.width) + 2, int(box.top + box.height) + 2)  # just beyond its corner
        totals: dict[str, float] = {}
        first = await env.step(call("click_xy", x=min(miss[0], 159), y=min(miss[1], 209)))
        for result in (first, await play_expert(env)):
            for k, v in result.metrics.items():
                totals[k] = totals.get(k, 0.0) + v
        await env.close()
        assert first.metrics["gui/grounded_clicks"] == 1.0 and first.metrics["gui/grounding_hits"] == 0.0
        return totals

    totals = asyncio.run(run())
    assert totals["gui/grounded_clicks"] == 2.0 and totals["gui/grounding_hits"] == 1.0
    assert grounding_reward(Trajectory(task_id="t", prompt_ids=[], metrics=totals), None) == 0.5
    assert grounding_reward(Trajectory(task_id="t", prompt_ids=[]), None) == 0.0  # no coordinate clicks
