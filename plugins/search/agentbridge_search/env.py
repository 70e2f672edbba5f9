"""The search environment, its ``search`` tool and the scripted expert."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentbridge import Message, StepResult, Task, ToolEnvironment, ToolSpec, text_of, tool
from agentbridge_search.client import (
    HttpBackend,
    InProcessBackend,
    SearchBackend,
    default_url,
    format_results,
    retrieved_ids,
)

MAX_QUERY_CHARS = 500
SYSTEM_PROMPT = ("Answer the question by searching. Call the search tool once per fact you need, "
                 "then give the final answer as <answer>...</answer>.")


def make_backend(retriever: str = "bm25", url: str | None = None, http_timeout_s: float = 5.0,
                 world_seed: int = 0, world_args: dict[str, Any] | None = None) -> SearchBackend:
    """HTTP when ``url`` (or ``$AGENTBRIDGE_SEARCH_URL``) is set, else an in-process retriever over the world."""
    url = url or default_url()
    if url:
        return HttpBackend(url, timeout_s=http_timeout_s)
    from agentbridge_search.retrievers import world_retriever

    return InProcessBackend(world_retriever(retriever, world_seed, **(world_args or {})))


def search_tool(backend: SearchBackend, topk: int = 3) -> ToolSpec:
    """The ``search`` tool bound to ``backend``."""

    @tool(name="search")
    async def search(query: str) -> str:
        """Search the knowledge base and return the best matching passages, each as "[id] Title: text".

        Args:
            query: What to look for, e.g. a name or "currency of France".
        """
        query = query.strip()
        if not query:
            raise ValueError("query is empty")
        if len(query) > MAX_QUERY_CHARS:
            raise ValueError(f"query is longer than {MAX_QUERY_CHARS} characters")
        rows = await backend.retrieve([query], topk)
        return format_results(rows[0])

    return search


class _LazyDefault:
    backend: SearchBackend | None = None

    async def retrieve(self, queries: Sequence[str], topk: int) -> list[list[dict[str, Any]]]:
        if self.backend is None:
            self.backend = make_backend()
        return await self.backend.retrieve(queries, topk)

    async def close(self) -> None:
        return None


search = search_tool(_LazyDefault())  # the registered tool: $AGENTBRIDGE_SEARCH_URL or in-process BM25, world 0


class SearchEnv(ToolEnvironment):
    """Multi-hop QA with a ``search`` tool; ends when the model answers without a tool call.

    Args mirror the spec's ``environment.args``: ``retriever`` (bm25 | bm25s | dense), ``topk``, ``url`` (a Search-R1
    server, or several comma-separated replicas; default in-process), ``http_timeout_s``, ``world_seed`` and
    ``world`` (extra ``build_world`` arguments; must match the data's). ``support_reward``: the step reward a turn
    earns for each supporting passage its searches retrieve for the first time in the episode (a per-search process
    reward, as R1-Searcher's retrieval reward; 0 = none). ``expert_in_head``: per question kind, the share of
    questions on which the scripted expert skips the last search and names the answer from memory (see
    :func:`answers_in_head`) — an imperfect expert whose demonstrations imitation cannot turn into a perfect policy.
    """

    def __init__(self, tools: Sequence[ToolSpec] | None = None, retriever: str = "bm25", topk: int = 3,
                 url: str | None = None, http_timeout_s: float = 5.0, world_seed: int = 0,
                 world: dict[str, Any] | None = None, timeout_s: float = 10.0, max_output_chars: int = 2000,
                 backend: SearchBackend | None = None, support_reward: float = 0.0,
                 expert_in_head: Mapping[str, float] | None = None) -> None:
        if not isinstance(topk, int) or not 1 <= topk <= 50:
            raise ValueError(f"environment.args.topk: must be an integer from 1 to 50, got {topk!r}")
        for kind, rate in (expert_in_head or {}).items():
            if not isinstance(rate, int | float) or not 0.0 <= rate <= 1.0:
                raise ValueError(f"environment.args.expert_in_head.{kind}: must be a share from 0 to 1, got {rate!r}")
        self.expert_in_head = {str(k): float(v) for k, v in (expert_in_head or {}).items()}
        self._owns_backend = backend is None
        self.backend = backend or make_backend(retriever, url, http_timeout_s, world_seed, world)
        own = search_tool(self.backend, topk)
        others = [t for t in (tools or []) if getattr(t, "name", None) != "search"]
        super().__init__([own, *others], timeout_s=timeout_s, max_output_chars=max_output_chars)
        self.support_reward = float(support_reward)
        self._found: set[str] = set()

    async def reset(self, task: Task) -> list[Message]:
        self._found = set()
        return await super().reset(task)

    async def step(self, action: Message) -> StepResult:
        result = await super().step(action)
        if not result.done:
            result.metrics["search/queries"] = float(sum(c["function"].get("name") == "search"
                                                         for c in action.get("tool_calls") or []))
            support = set(self.task.data.get("support") or []) if self.task is not None else set()
            new = {i for m in result.observation if m.get("role") == "tool" and m.get("name") == "search"
                   for i in retrieved_ids(text_of(m))} & support - self._found
            self._found |= new
            result.metrics["search/new_support"] = float(len(new))
            result.reward += self.support_reward * len(new)
        return result

    def expert_action(self) -> str:
        """Search each hop's query in turn, then answer with the first gold answer; with ``expert_in_head``, some
        questions are answered one search early."""
        assert self.task is not None, "expert_action() before reset()"
        done = sum(1 for m in self.history if m.get("role") == "tool")
        queries: list[str] = self.task.data["queries"]
        rate = self.expert_in_head.get(str(self.task.data.get("kind", "")), 0.0)
        if done == len(queries) - 1 and done > 0 and answers_in_head(self.task.prompt, rate):
            return f"<answer>{self.task.data['answer'][0]}</answer>"
        if done < len(queries):
            call = json.dumps({"name": "search", "arguments": {"query": queries[done]}})
            return f"<tool_call>\n{call}\n</tool_call>"
        return f"<answer>{self.task.data['answer'][0]}</answer>"

    async def close(self) -> None:
        if self._owns_backend:
            await self.backend.close()


def answers_in_head(prompt: str, rate: float) -> bool:
    """Whether the imperfect expert skips this question's last search: fixed per question (a hash of its text), so
    it is always demonstrated the same way, while from the wording the choice looks random — a policy that imitates
    the expert skips that search on about ``rate`` of the questions of the kind, and must then know the answer."""
    if rate <= 0:
        return False
    band = int.from_bytes(hashlib.sha256(f"in-head:{prompt}".encode()).digest()[:4], "big") / 2**32
    return band < rate


def observed_text(messages: Sequence[Message]) -> str:
    return "\n".join(text_of(m) for m in messages if m.get("role") == "tool")
