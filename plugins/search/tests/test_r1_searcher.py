"""The R1-Searcher recipe: a per-search process reward (each supporting passage retrieved for the first time earns
that turn ``support_reward``) beside the outcome rewards, through the driver, and a short CPU training run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from small_world import SMALL_SETS

from agentbridge.models import load_tokenizer
from agentbridge.rewards import PROCESS
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.spec import load_spec
from agentbridge.testing import short_training_run

TOKENIZER = load_tokenizer("builtin:tiny")
SPEC = "examples/r1_searcher.yaml"


def agent(*sets: str) -> Agent:
    return Agent.from_spec(load_spec(SPEC, [*SMALL_SETS, *sets]), TOKENIZER)


def test_each_search_turn_earns_the_supporting_passages_it_finds_first() -> None:
    a = agent()
    tasks = a.tasks("eval", size=12)
    trajs = asyncio.run(a.run(tasks, lambda env: ScriptedPolicy.for_env(env, TOKENIZER)))
    for t, task in zip(trajs, tasks, strict=True):
        found = t.metrics["search/new_support"]
        assert 1 <= found <= len(task.data["support"])
        assert all(round(turn.reward / 0.2, 6).is_integer() for turn in t.turns)  # 0.2 per passage found
        assert sum(turn.reward > 0 for turn in t.turns[:-1]) >= 1  # credit on the search turns themselves
        assert t.reward_components[PROCESS] == pytest.approx(0.2 * found)  # per step, summed for the episode
        assert t.turns[-1].reward == 0.0  # the answer turn searches nothing
    assert sum(t.metrics["search/new_support"] for t in trajs) / sum(len(k.data["support"]) for k in tasks) > 0.9


def test_searching_again_for_a_passage_already_found_earns_nothing() -> None:
    a = agent()
    [task] = a.tasks("eval", size=1)
    query = task.data["queries"][0]
    call = f'<tool_call>\n{json.dumps({"name": "search", "arguments": {"query": query}})}\n</tool_call>'
    [traj] = asyncio.run(a.run([task], lambda env: ScriptedPolicy(TOKENIZER, [call, call, "<answer>x</answer>"])))
    assert traj.turns[0].reward == pytest.approx(0.2) and traj.turns[1].reward == 0.0
    plain = agent("environment.args.support_reward=0.0")
    [traj] = asyncio.run(plain.run([task], lambda env: ScriptedPolicy(TOKENIZER, [call, "<answer>x</answer>"])))
    assert traj.turns[0].reward == 0.0 and traj.metrics["search/new_support"] == 1.0


def test_a_short_training_run_on_cpu(tmp_path: Path) -> None:
    rows = short_training_run(SPEC, tmp_path / "run", [*SMALL_SETS, "algorithm.warm_start.demos=16",
                                                       "algorithm.warm_start.epochs=1", "backend.options.eval_size=4"])
    assert [r["step"] for r in rows] == [1, 2] and all(f"reward/{PROCESS}" in r for r in rows)
