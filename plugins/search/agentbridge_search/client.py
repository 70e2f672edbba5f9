"""Search backends for the ``search`` tool: an in-process retriever, or Search-R1 retrieval servers over HTTP."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import time
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


class _RequestRefused(RetrievalError):
    """A server answered that the request itself is bad (400/413/422): another replica would say the same."""


REFUSED = (400, 413, 422)
PROBE_QUERY = "health check"
# what this process knows of each url: (when it was last seen, its problem or None when it answered); shared by
# every HttpBackend, so the per-episode environments do not each probe the same servers again
_HEALTH: dict[str, tuple[float, str | None]] = {}


class HttpBackend:
    """POSTs to ``{url}/retrieve`` of one or more replicas, round robin over the healthy ones.

    Each url is health-checked (a one-query ``/retrieve``, so any Search-R1 server passes) before its first use in
    this process. A replica that does not answer, answers 5xx or 404, or sends a reply that is not Search-R1's is
    left out for ``retry_after_s`` and the request fails over to the next one; after that it is probed again. Only
    when no replica answers does a search fail, with one line naming each url's problem.
    """

    def __init__(self, urls: str | Sequence[str], timeout_s: float = 5.0, retry_after_s: float = 10.0) -> None:
        import httpx

        self.urls = [u.rstrip("/") for u in ([urls] if isinstance(urls, str) else urls) for u in u.split(",")
                     if u.strip()]
        if not self.urls:
            raise ValueError("url: no retrieval server given")
        self._next = itertools.cycle(range(len(self.urls)))
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self._httpx = httpx
        self._client: Any = None

    async def check(self) -> dict[str, str | None]:
        """Probe every url now; returns each one's problem (None when it answers) and marks the failing ones down."""
        problems = await asyncio.gather(*(self._probe(url) for url in self.urls))
        return dict(zip(self.urls, problems, strict=True))

    async def _probe(self, url: str) -> str | None:
        try:
            await self._post(url, [PROBE_QUERY], 1)
        except RetrievalError as e:
            _HEALTH[url] = (time.monotonic(), str(e))
            return str(e)
        _HEALTH[url] = (time.monotonic(), None)
        return None

    def _order(self) -> list[str]:
        start = next(self._next)
        return self.urls[start:] + self.urls[:start]

    async def retrieve(self, queries: Sequence[str], topk: int) -> list[list[dict[str, Any]]]:
        now = time.monotonic()
        due = [u for u in self.urls if u not in _HEALTH
               or (_HEALTH[u][1] is not None and now - _HEALTH[u][0] >= self.retry_after_s)]
        if due:
            await asyncio.gather(*(self._probe(u) for u in due))
        for url in self._order():
            if _HEALTH[url][1] is not None:
                continue
            try:
                return await self._post(url, queries, topk)
            except _RequestRefused:
                raise
            except RetrievalError as e:
                _HEALTH[url] = (time.monotonic(), str(e))
        now = time.monotonic()
        reasons = "; ".join(f"{why} (retrying in {max(0.0, self.retry_after_s - (now - when)):.0f}s)"
                            for when, why in (_HEALTH[u] for u in dict.fromkeys(self.urls)) if why)
        raise RetrievalError(f"no retrieval server answers: {reasons}")

    async def _post(self, url: str, queries: Sequence[str], topk: int) -> list[list[dict[str, Any]]]:
        httpx = self._httpx
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s, trust_env=False)
        body = {"queries": list(queries), "topk": topk, "return_scores": True}
        try:
            resp = await self._client.post(f"{url}/retrieve", json=body)
        except httpx.TimeoutException:
            raise RetrievalError(f"retrieval server {url} did not answer within {self.timeout_s:g}s") from None
        except httpx.HTTPError as e:
            raise RetrievalError(f"retrieval server {url} unreachable ({type(e).__name__})") from None
        if resp.status_code != 200:
            error = _RequestRefused if resp.status_code in REFUSED else RetrievalError
            text = " ".join(resp.text.split())[:200]
            raise error(f"retrieval server {url} answered {resp.status_code}: {text}")
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
