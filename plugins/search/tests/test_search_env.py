"""The environment end to end: the expert solves tasks in-process and over HTTP; dead or slow servers fail softly."""

from __future__ import annotations

import asyncio
import functools
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from serving import free_port, serving
from small_world import DEV_SETS, SMALL, SMALL_SETS

from agentbridge.models import load_tokenizer
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.spec import load_spec
from agentbridge.testing import check_environment
from agentbridge_search.data import multihop_tasks
from agentbridge_search.env import SearchEnv
from agentbridge_search.retrievers import world_retriever
from agentbridge_search.rewards import answer_format, exact_match, token_f1
from agentbridge_search.server import create_app

TOKENIZER = load_tokenizer("builtin:tiny")


PERFECT = "environment.args.expert_in_head.fic_company_leader=0.0"  # the example's expert is imperfect on purpose


def agent(*sets: str) -> Agent:
    """The search example on the small world, with the perfect expert unless ``sets`` say otherwise."""
    return Agent.from_spec(load_spec("examples/search.yaml", [*SMALL_SETS, *DEV_SETS, PERFECT, *sets]), TOKENIZER)


def run_expert(a: Agent, n: int) -> list:
    tasks = a.tasks("eval", size=n)
    return asyncio.run(a.run(tasks, lambda env: ScriptedPolicy.for_env(env, TOKENIZER)))


def test_expert_solves_in_process() -> None:
    trajs = run_expert(agent(), 24)
    assert all(t.finish_reason == "done" for t in trajs), [t.error for t in trajs]
    for name in ("search/exact_match", "search/f1", "search/format"):
        assert all(t.reward_components[name] == 1.0 for t in trajs), name
    assert sum(t.reward_components["search/support"] for t in trajs) / len(trajs) >= 0.9
    assert all(t.metrics["tools/failures"] == 0 and t.metrics["search/queries"] >= 2 for t in trajs)


def test_imperfect_expert_names_some_answers_one_search_early() -> None:
    """With ``expert_in_head``, the expert skips the last search on about that share of the kind's questions — the
    same questions every time — and its answers stay right; the other kinds keep one search per hop."""
    a = agent("environment.args.expert_in_head.fic_company_leader=0.6")
    trajs = run_expert(a, 60)
    assert all(t.reward_components["search/exact_match"] == 1.0 for t in trajs)
    searches = [(task.data["kind"], t.metrics["search/queries"]) for task, t in zip(a.tasks("eval", size=60), trajs,
                                                                                  strict=True)]
    leader = [n for kind, n in searches if kind == "fic_company_leader"]
    assert all(n == 2 for kind, n in searches if kind != "fic_company_leader")
    assert set(leader) == {1, 2} and 0.35 <= leader.count(1) / len(leader) <= 0.85, leader
    again = [t.metrics["search/queries"] for t in run_expert(a, 60)]
    assert again == [n for _, n in searches]


def test_check_environment() -> None:
    """agentbridge's environment checker: messages and step results well-typed, the search tool documented, the
    expert answers right, bad tool calls are survived."""
    check_environment(functools.partial(SearchEnv, world=SMALL), multihop_tasks("eval", 8, world=SMALL),
                      rewards={"search/exact_match": exact_match, "search/f1": token_f1,
                               "search/format": answer_format})


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with serving(create_app(world_retriever("bm25", 0, **SMALL))) as url:
        yield url


def test_expert_solves_over_http(server_url: str) -> None:
    trajs = run_expert(agent(f"environment.args.url={server_url},{server_url}"), 12)  # two "replicas"
    assert all(t.reward_components["search/exact_match"] == 1.0 for t in trajs), [t.error for t in trajs]
    assert sum(t.reward_components["search/support"] for t in trajs) / len(trajs) >= 0.9


def test_dead_server_gives_tool_errors() -> None:
    trajs = run_expert(agent(f"environment.args.url=http://127.0.0.1:{free_port()}"), 4)
    for t in trajs:
        assert t.finish_reason == "done" and t.metrics["tools/failures"] == t.metrics["tools/calls"] >= 2
        assert "unreachable" in t.turns[0].observations[0]["content"]
        assert t.reward_components["search/support"] == 0.0


def test_slow_server_times_out() -> None:
    hold: list[socket.socket] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)  # accepts connections, never answers

    def accept() -> None:
        while True:
            try:
                hold.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    port = listener.getsockname()[1]
    try:
        started = time.monotonic()
        trajs = run_expert(agent(f"environment.args.url=http://127.0.0.1:{port}",
                                 "environment.args.http_timeout_s=0.3"), 4)
        assert time.monotonic() - started < 30
    finally:
        listener.close()
        for s in hold:
            s.close()
    for t in trajs:
        assert t.finish_reason == "done" and t.metrics["tools/failures"] >= 2
        assert "did not answer within 0.3s" in t.turns[0].observations[0]["content"]


def test_bad_env_args_are_one_line() -> None:
    from agentbridge_search.env import SearchEnv

    with pytest.raises(ValueError, match="topk: must be an integer from 1 to 50"):
        SearchEnv(topk=0, url="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="expert_in_head.fic_company_leader: must be a share from 0 to 1, got 1.5"):
        SearchEnv(expert_in_head={"fic_company_leader": 1.5}, url="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="retriever must be one of"):
        SearchEnv(retriever="nope", world=SMALL)
