"""Search backends for the ``search`` tool: an in-process retriever, or Search-R1 retrieval servers over HTTP."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
from collections.abc import Sequence
from typing import Any, Protocol

from agentbridge_search.retrievers import Retriever, as_documents

RESULT_LINE = re.compile(r"^\[([^\]\s]+)\] ", re.M)


class SearchBackend(Protocol):
    """Answers one batch of queries with Search-R1 rows of ``{"document": {"id", "contents"}, "score"}``."""

    async def retrieve(self, queries: Sequence[str], topk: int) -> list[list[dict[str, Any]]]: ...

    async def close(self) -> None: ...


class InProcessBackend:
    """Runs the retriever in a worker thread of this process."""

    def __init__(self, retriever: Retriever) -> None:
        self.retriever = retriever

    async def retrieve(self, queries: Sequence[str], topk: int) -> list[list[dict[str, Any]]]:
        hits = await asyncio.to_thread(self.retriever.search, list(queries), topk)
        return as_documents(self.retriever, hits, return_scores=True)

    async def close(self) -> None:
        return None


class RetrievalError(RuntimeError):
    """The retrieval server could not answer (unreachable, slow, or it refused the request)."""


class HttpBackend:
    """POSTs to ``{url}/retrieve`` of one or more replicas (round robin), with a timeout per request."""

    def __init__(self, urls: str | Sequence[str], timeout_s: float = 5.0) -> None:
        import httpx

        self.urls = [u.rstrip("/") for u in ([urls] if isinstance(urls, str) else urls) for u in u.split(",")
                     if u.strip()]
        if not self.urls:
            raise ValueError("url: no retrieval server given")
        self._next = itertools.cycle(range(len(self.urls)))
        self.timeout_s = timeout_s
        self._httpx = httpx
        self._client: Any = None

    async def retrieve(self, queries: Sequence[str], topk: int) -> list[list[dict[str, Any]]]:
        httpx = self._httpx
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s, trust_env=False)
        url = self.urls[next(self._next)]
        body = {"queries": list(queries), "topk": topk, "return_scores": True}
        try:
            resp = await self._client.post(f"{url}/retrieve", json=body)
        except httpx.TimeoutException:
            raise RetrievalError(f"retrieval server {url} did not answer within {self.timeout_s:g}s") from None
        except httpx.HTTPError as e:
            raise RetrievalError(f"retrieval server {url} unreachable ({type(e).__name__})") from None
        if resp.status_code != 200:
            raise RetrievalError(f"retrieval server {url} answered {resp.status_code}: {resp.text[:200]}")
        try:
            result = resp.json()["result"]
        except (ValueError, KeyError, TypeError):
            raise RetrievalError(f"retrieval server {url} sent a reply without 'result'") from None
        if not isinstance(result, list) or len(result) != len(queries):
            raise RetrievalError(f"retrieval server {url} sent {type(result).__name__} for {len(queries)} queries")
        return result

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def format_results(rows: list[dict[str, Any]]) -> str:
    """Search-R1 rows → tool text, one passage per line: ``[id] Title: text``."""
    if not rows:
        return "No results."
    lines = []
    for row in rows:
        doc = row.get("document", row) if isinstance(row, dict) else {}
        contents = str(doc.get("contents", ""))
        title, _, text = contents.partition("\n")
        lines.append(f"[{doc.get('id', '?')}] {title.strip(chr(34))}: {text.strip()}")
    return "\n".join(lines)


def retrieved_ids(text: str) -> list[str]:
    """Passage ids in a ``search`` tool result."""
    return RESULT_LINE.findall(text)


def default_url() -> str | None:
    """``$AGENTBRIDGE_SEARCH_URL`` (comma-separated replicas), if set."""
    return os.environ.get("AGENTBRIDGE_SEARCH_URL") or None
