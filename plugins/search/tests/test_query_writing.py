"""The DeepRetrieval recipe's pieces: query-writing tasks, the environment that scores a query by what it retrieves,
its rewards, and a short CPU training run of examples/deepretrieval.yaml."""

from __future__ import annotations

import asyncio
import functools
import math
from pathlib import Path

import pytest
from small_world import SMALL, SMALL_SETS

from agentbridge.models import load_tokenizer
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.spec import load_spec
from agentbridge.testing import check_environment, short_training_run
from agentbridge_search.data import multihop_tasks
from agentbridge_search.query_writing import QueryEnv, query_ndcg, query_recall, query_tasks, ranking_metrics

TOKENIZER = load_tokenizer("builtin:tiny")
SPEC = "examples/deepretrieval.yaml"


def agent(*sets: str) -> Agent:
    return Agent.from_spec(load_spec(SPEC, [*SMALL_SETS, *sets]), TOKENIZER)


def play(a: Agent, texts: list[str] | None, n: int = 16) -> list:
    """Episodes where the policy answers with the expert's query (``texts`` None) or with ``texts`` in turn."""
    tasks = a.tasks("eval", size=n)
    if texts is None:
        return asyncio.run(a.run(tasks, lambda env: ScriptedPolicy.for_env(env, TOKENIZER)))
    return asyncio.run(a.run(tasks, lambda env: ScriptedPolicy(TOKENIZER, list(texts))))


def test_tasks_are_the_multihop_questions_with_their_first_hop_as_gold() -> None:
    tasks = query_tasks("eval", 12, world=SMALL)
    same = multihop_tasks("eval", 12, world=SMALL)
    assert [t.data["question"] for t in tasks] == [t.data["question"] for t in same]
    assert all(t.data["gold"] == t.data["support"][:1] and t.data["expert_query"] == t.data["queries"][0]
               for t in tasks)
    assert all(t.data["question"] in t.prompt and "<answer>QUERY</answer>" in t.prompt for t in tasks)
    assert [t.id for t in tasks] == [t.id for t in query_tasks("eval", 12, world=SMALL)]


def test_ranking_metrics() -> None:
    assert ranking_metrics(["a", "g", "b"], ["g"]) == {"query/recall": 1.0, "query/ndcg": 1 / math.log2(3),
                                                       "query/rank": 2.0}
    assert ranking_metrics(["g", "a"], ["g"])["query/ndcg"] == 1.0
    assert ranking_metrics(["a", "b"], ["g"]) == {"query/recall": 0.0, "query/ndcg": 0.0, "query/rank": 0.0}
    assert ranking_metrics(["a"], []) == {"query/recall": 0.0, "query/ndcg": 0.0, "query/rank": 0.0}


def test_the_experts_queries_retrieve_the_gold_passage_and_bad_queries_score_nothing() -> None:
    a = agent()
    expert = play(a, None)
    assert all(t.finish_reason == "done" and len(t.turns) == 1 for t in expert)
    assert sum(t.reward_components["search/query_recall"] for t in expert) / len(expert) >= 0.9
    assert all(t.reward_components["search/query_ndcg"] <= t.reward_components["search/query_recall"]
               for t in expert)
    assert all(t.metrics["query/written"] == 1.0 for t in expert)
    unrelated = play(a, ["<answer>zzzz qqqq</answer>"])
    assert all(t.reward_components["search/query_recall"] == 0.0 for t in unrelated)
    unwritten = play(a, ["I do not know."])  # no <answer>: no query, no retrieval
    assert all(t.metrics["query/written"] == 0.0 and t.reward == 0.0 for t in unwritten)
    assert query_recall(unwritten[0], None) == 0.0 and query_ndcg(unwritten[0], None) == 0.0


def test_check_environment() -> None:
    check_environment(functools.partial(QueryEnv, world=SMALL), query_tasks("eval", 8, world=SMALL),
                      rewards={"search/query_recall": query_recall})
    with pytest.raises(ValueError, match="topk: must be an integer from 1 to 100"):
        QueryEnv(world=SMALL, topk=0)


def test_a_short_training_run_on_cpu(tmp_path: Path) -> None:
    rows = short_training_run(SPEC, tmp_path / "run", [*SMALL_SETS, "algorithm.warm_start.demos=32",
                                                       "algorithm.warm_start.epochs=1"])
    assert [r["step"] for r in rows] == [1, 2]
    assert all("reward/search/query_recall" in r and "reward/search/query_ndcg" in r for r in rows)
    assert (tmp_path / "run" / "eval.json").is_file()
