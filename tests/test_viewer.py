"""The trajectory viewer, opened in headless Chromium: what a person sees (episodes, filters, mask colours,
log-probs, escaped text), from episodes made by the real driver."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agentbridge.env import Task
from agentbridge.rewards import RewardSet, WeightedReward, exact_answer
from agentbridge.rollout import Limits, Renderer, ScriptedPolicy, run_episode
from agentbridge.rollout.agent import Agent
from agentbridge.spec import load_spec
from agentbridge.tools import ToolEnvironment, tool
from agentbridge.training.logger import RunLogger
from agentbridge.viewer import write_view

HOSTILE = "<script>window.injected = 1</script><b>bold?</b>"
HOSTILE_PROMPT = '<img src=x onerror="window.injected = 2"> What is the note?'


@tool
def read_note(name: str) -> str:
    """Read a note.

    Args:
        name: The note's name.
    """
    return HOSTILE


def hostile_episode(tokenizer: Any) -> Any:
    """One episode whose prompt and tool result are HTML that must be shown as text."""
    env = ToolEnvironment([read_note], timeout_s=5.0)
    call = '<tool_call>\n{"name": "read_note", "arguments": {"name": "a"}}\n</tool_call>'
    policy = ScriptedPolicy(tokenizer, [call, "<answer>done</answer>"])
    task = Task(id="hostile-0", prompt=HOSTILE_PROMPT, data={"answer": "done"})
    rewards = RewardSet([WeightedReward("core/exact_answer", exact_answer, 1.0)])
    return asyncio.run(run_episode(policy, env, task, Renderer(tokenizer, tools=env.tool_schemas()), Limits(),
                                   rewards=rewards, system_prompt="Read notes."))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """A training-style run directory: step 1 the hostile episode and 3 scripted ones (the last 2 without token
    lists), step 2 two episodes sampled from builtin:tiny (cut by the token budget); and its page."""
    from agentbridge.rollout.hf_policy import HFPolicy

    root = tmp_path_factory.mktemp("viewer")
    spec = load_spec("examples/calculator.yaml")
    agent = Agent.from_spec(spec)
    tasks = agent.tasks("eval", size=3)
    scripted = asyncio.run(agent.run(tasks, lambda env: ScriptedPolicy.for_env(env, agent.tokenizer)))
    hf = HFPolicy.from_pretrained(spec.model.path, tokenizer=agent.tokenizer, seed=0)
    agent.limits = replace(agent.limits, max_tokens_per_turn=16)  # short sampled turns: a quicker test
    sampled = asyncio.run(agent.run(tasks[:2], hf))
    job = root / "job"
    job.mkdir()
    (job / "spec.yaml").write_text(Path("examples/calculator.yaml").read_text())
    run_dir = root / "run"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text(json.dumps({"kind": "run", "job": str(job)}))
    logger = RunLogger(run_dir, prefix="test")
    logger.add_batch([hostile_episode(agent.tokenizer), *scripted], 0.0)
    logger.log(1, {})
    logger.add_batch(sampled, 0.0)
    logger.log(2, {})
    path, n, notes = write_view(run_dir)
    assert (path, n, notes) == (run_dir / "view.html", 6, [])
    episodes = [json.loads(line) for line in (run_dir / "episodes.jsonl").read_text().splitlines()]
    return path, episodes



def open_page(browser: Any, path: Path) -> None:
    browser.get(path.as_uri())


def open_episode(browser: Any, number: int) -> Any:
    """Click episode ``#number``'s summary, as a person would; returns its section."""
    from selenium.webdriver.common.by import By

    section = browser.find_elements(By.CSS_SELECTOR, ".episode")[number - 1]
    summary = section.find_element(By.TAG_NAME, "summary")
    assert summary.text.startswith(f"#{number} ")
    summary.click()
    return section


def visible_numbers(browser: Any) -> list[int]:
    from selenium.webdriver.common.by import By

    return [i for i, e in enumerate(browser.find_elements(By.CSS_SELECTOR, ".episode"), 1) if e.is_displayed()]


def tokens(browser: Any, section: Any) -> list[dict[str, str]]:
    """Each token span of ``section``: its mask class, computed background colour, text and title."""
    return browser.execute_script(
        "return [...arguments[0].querySelectorAll('.tok')].map(t => ({cls: t.className, "
        "bg: getComputedStyle(t).backgroundColor, text: t.textContent, title: t.title, shown: t.offsetWidth > 0}))",
        section)


def test_every_episode_is_listed_and_filters_hide_the_others(run: tuple[Path, list[dict[str, Any]]],
                                                             browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    path, episodes = run
    finishes = [e["finish_reason"] for e in episodes]
    assert set(finishes) == {"done", "length"}  # the expert finishes, the untrained model is cut
    open_page(browser, path)
    assert visible_numbers(browser) == [1, 2, 3, 4, 5, 6]
    assert browser.find_element(By.ID, "count").text == "6 of 6 episodes shown"
    summaries = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".episode summary")]
    assert summaries[0].startswith("#1 step 1 · hostile-0 · reward 1.000 · done · 2 turns")
    assert summaries[5].startswith(f"#6 step 2 · {episodes[5]['task_id']} · reward {episodes[5]['reward']:.3f}")

    Select(browser.find_element(By.ID, "finish")).select_by_value("length")
    cut = [i for i, f in enumerate(finishes, 1) if f == "length"]
    assert visible_numbers(browser) == cut
    assert browser.find_element(By.ID, "count").text == f"{len(cut)} of 6 episodes shown"

    Select(browser.find_element(By.ID, "finish")).select_by_value("")
    browser.find_element(By.ID, "min-reward").send_keys("1")
    solved = [i for i, e in enumerate(episodes, 1) if e["reward"] >= 1]
    assert 0 < len(solved) < 6 and visible_numbers(browser) == solved
    browser.find_element(By.ID, "max-reward").send_keys("0.5")  # an empty range hides everything
    assert visible_numbers(browser) == [] and browser.find_element(By.ID, "count").text == "0 of 6 episodes shown"


def test_tokens_are_coloured_by_the_loss_mask_with_log_probs_in_their_titles(
        run: tuple[Path, list[dict[str, Any]]], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    path, episodes = run
    open_page(browser, path)
    legend = {cls: browser.execute_script("return getComputedStyle(arguments[0]).backgroundColor",
                                          browser.find_element(By.CSS_SELECTOR, f".legend-{cls}"))
              for cls in ("trained", "env")}
    assert legend["trained"] != legend["env"]

    spans = tokens(browser, open_episode(browser, 1))  # the expert: a tool call, the tool's result, an answer
    assert len(spans) == len(episodes[0]["response_ids"]) and all(s["shown"] for s in spans)
    trained = [s for s in spans if s["cls"] == "tok m1"]
    written = [s for s in spans if s["cls"] == "tok m0"]
    assert len(trained) == sum(episodes[0]["response_mask"]) and written
    assert {s["bg"] for s in trained} == {legend["trained"]} and {s["bg"] for s in written} == {legend["env"]}
    assert '"read_note"' in "".join(s["text"] for s in trained)
    assert HOSTILE in "".join(s["text"] for s in written)  # the tool's result is environment-written
    assert all(s["title"].startswith("environment-written, not trained") for s in written)

    sampled = episodes[4]  # sampled from the model: real log-probs
    spans = tokens(browser, open_episode(browser, 5))
    assert [s["cls"] for s in spans] == [f"tok m{m}" for m in sampled["response_mask"]]
    for span, logprob in list(zip(spans, sampled["logprobs"], strict=True))[:5]:
        assert logprob < 0 and span["title"].startswith(f"log-prob {logprob:.4f} · trained on")


def test_html_in_prompts_and_tool_results_is_shown_as_text(run: tuple[Path, list[dict[str, Any]]],
                                                          browser: Any) -> None:
    from selenium.webdriver.common.by import By

    path, _ = run
    open_page(browser, path)
    section = open_episode(browser, 1)
    assert HOSTILE_PROMPT in section.find_element(By.CSS_SELECTOR, ".prompt").text
    assert "Read notes." in section.find_element(By.CSS_SELECTOR, ".prompt").text  # the system prompt, decoded
    assert section.find_element(By.CSS_SELECTOR, ".tool-call").text == 'read_note({"name": "a"})'
    assert section.find_element(By.CSS_SELECTOR, ".tool-result").text == HOSTILE
    assert browser.execute_script("return window.injected") is None
    assert len(browser.find_elements(By.TAG_NAME, "script")) == 1  # the page's own
    assert browser.find_elements(By.TAG_NAME, "img") == [] and browser.find_elements(By.TAG_NAME, "b") != []


def test_episodes_without_token_lists_show_their_text_and_say_so(run: tuple[Path, list[dict[str, Any]]],
                                                                 browser: Any) -> None:
    from selenium.webdriver.common.by import By

    path, episodes = run
    assert ["response_ids" in e for e in episodes] == [True, True, False, False, True, True]
    open_page(browser, path)
    assert "2 of 6 episodes have no token lists" in browser.find_element(By.TAG_NAME, "body").text
    section = open_episode(browser, 3)
    assert "token lists were not kept" in section.find_element(By.CSS_SELECTOR, ".no-tokens").text
    assert section.find_elements(By.CSS_SELECTOR, ".tok") == []
    assert section.find_elements(By.CSS_SELECTOR, ".prompt") == []
    generated = [e.text for e in section.find_elements(By.CSS_SELECTOR, ".generated")]
    assert generated == [t["text"].strip() for t in episodes[2]["turns"]] and generated[-1].startswith("<answer>")


def test_view_cli_on_a_rollout_directory(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from agentbridge.cli import main

    out = tmp_path / "rollout"
    made = CliRunner().invoke(main, ["rollout", "examples/calculator.yaml", "--policy", "scripted", "-n", "3", "-o",
                                     str(out)])
    assert made.exit_code == 0, made.output
    res = CliRunner().invoke(main, ["view", str(out), "-o", str(tmp_path / "page.html"), "--model", "builtin:tiny"])
    assert res.exit_code == 0 and res.stderr == "", res.output
    assert res.stdout.strip() == f"wrote {tmp_path / 'page.html'} (3 episodes)"
    page = (tmp_path / "page.html").read_text()
    assert page.count('<section class="episode"') == 3 and "&lt;tool_call&gt;" in page

    res = CliRunner().invoke(main, ["view", str(out)])  # a rollout does not record its model
    assert res.exit_code == 0 and (out / "view.html").is_file()
    assert res.stderr.startswith("note: ") and "pass --model" in res.stderr

    res = CliRunner().invoke(main, ["view", str(tmp_path)])
    assert res.exit_code == 1 and res.stdout == ""
    assert res.stderr.splitlines() == [f"error: {tmp_path}: no episodes.jsonl or trajectories.jsonl (not a run "
                                       "directory, or no step has finished yet)"]
