"""Registers the search agent with agentbridge."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentbridge import hookimpl
from agentbridge_search.data import multihop_tasks
from agentbridge_search.env import SearchEnv, search
from agentbridge_search.query_writing import QueryEnv, query_ndcg, query_recall, query_tasks
from agentbridge_search.rewards import answer_format, exact_match, support_recall, token_f1


@hookimpl
def register_environments(register: Callable[[str, Any], None]) -> None:
    register("search/multihop", SearchEnv)
    register("search/query_writing", QueryEnv)


@hookimpl
def register_tools(register: Callable[[Any], None]) -> None:
    register(search)


@hookimpl
def register_rewards(register: Callable[[str, Any], None]) -> None:
    register("search/exact_match", exact_match)
    register("search/f1", token_f1)
    register("search/format", answer_format)
    register("search/support", support_recall)
    register("search/query_recall", query_recall)
    register("search/query_ndcg", query_ndcg)


@hookimpl
def register_datasets(register: Callable[[str, Any], None]) -> None:
    register("search/multihop", multihop_tasks)
    register("search/query_writing", query_tasks)
