"""Query writing, as DeepRetrieval trains it: the policy reads a question and writes one search query; the reward is
how well that query retrieves the passage that answers the question (recall@k, NDCG@k), not an answer.

Tasks are the multi-hop world's questions; the gold passage is each question's first supporting passage (the one a
query written from the question alone can reach). The environment retrieves with the query in the policy's
``<answer>...</answer>`` when it answers, and reports ``query/recall``, ``query/ndcg`` and ``query/rank`` as step
metrics; the rewards read them. The expert (the warm start's teacher) answers with the world's own first-hop query.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from agentbridge import Message, StepResult, Task, ToolEnvironment, ToolSpec, declares_capacity, extract_answer
from agentbridge_search.data import multihop_capacity, multihop_tasks
from agentbridge_search.env import MAX_QUERY_CHARS, make_backend

PROMPT = ("Write a search query that finds the passage answering the question. Give only the query, as "
          "<answer>QUERY</answer>.\nQuestion: {question}")


@declares_capacity(multihop_capacity)
def query_tasks(split: str = "train", size: int = 100, seed: int = 0, world_seed: int = 0,
                world: dict[str, Any] | None = None, kinds: list[str] | None = None) -> list[Task]:
    """``size`` query-writing tasks of ``split``: the questions of ``search/multihop`` (same arguments, same
    questions, the same capacity), each with its gold passage and the expert's query."""
    out = []
    for t in multihop_tasks(split, size, seed, world_seed, world, kinds):
        data = dict(t.data)
        data.update({"gold": data["support"][:1], "expert_query": data["queries"][0]})
        out.append(Task(id=t.id.replace("search-", "query-", 1), prompt=PROMPT.format(question=data["question"]),
                        data=data))
    return out


def _doc_id(row: dict[str, Any]) -> str:
    doc = row.get("document", row)
    return str(doc.get("id", "")) if isinstance(doc, dict) else ""


def ranking_metrics(retrieved: Sequence[str], gold: Sequence[str]) -> dict[str, float]:
    """recall@k, NDCG@k (binary relevance) and the first gold passage's rank (0: not retrieved) of one ranking."""
    if not gold:
        return {"query/recall": 0.0, "query/ndcg": 0.0, "query/rank": 0.0}
    hits = [i for i, d in enumerate(retrieved) if d in set(gold)]
    dcg = sum(1.0 / math.log2(i + 2) for i in hits)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(gold), len(retrieved))))
    return {"query/recall": len(hits) / len(gold), "query/ndcg": dcg / ideal if ideal else 0.0,
            "query/rank": float(hits[0] + 1) if hits else 0.0}


class QueryEnv(ToolEnvironment):
    """One turn: the policy answers with a query, the environment retrieves ``topk`` passages with it and measures
    them against the task's gold passage. Args as ``search/multihop``'s (``retriever``, ``topk``, ``url``,
    ``http_timeout_s``, ``world_seed``, ``world``)."""

    def __init__(self, tools: Sequence[ToolSpec] | None = None, retriever: str = "bm25", topk: int = 10,
                 url: str | None = None, http_timeout_s: float = 5.0, world_seed: int = 0,
                 world: dict[str, Any] | None = None) -> None:
        if not isinstance(topk, int) or not 1 <= topk <= 100:
            raise ValueError(f"environment.args.topk: must be an integer from 1 to 100, got {topk!r}")
        self.topk = topk
        self.backend = make_backend(retriever, url, http_timeout_s, world_seed, world)
        super().__init__(list(tools or []))

    async def step(self, action: Message) -> StepResult:
        result = await super().step(action)
        if not result.done:
            return result
        query = extract_answer(str(action.get("content") or ""))
        gold = self.task.data.get("gold", []) if self.task is not None else []
        if not query or len(query) > MAX_QUERY_CHARS:
            result.metrics.update(ranking_metrics([], gold))
            result.metrics["query/written"] = 0.0
            return result
        rows = (await self.backend.retrieve([query], self.topk))[0]
        result.metrics.update(ranking_metrics([_doc_id(r) for r in rows], gold))
        result.metrics["query/written"] = 1.0
        return result

    def expert_action(self) -> str:
        """The world's own query for the question's first hop."""
        assert self.task is not None, "expert_action() before reset()"
        return f"<answer>{self.task.data['expert_query']}</answer>"

    async def close(self) -> None:
        await self.backend.close()


def query_recall(trajectory: Any, task: Any) -> float:
    """recall@k of the written query's passages against the gold passage (0 when no query was written)."""
    return float(trajectory.metrics.get("query/recall", 0.0))


def query_ndcg(trajectory: Any, task: Any) -> float:
    """NDCG@k of the written query's ranking: 1 when the gold passage comes first, less the lower it comes."""
    return float(trajectory.metrics.get("query/ndcg", 0.0))
