"""A FastAPI retrieval server speaking the Search-R1 protocol.

``POST /retrieve`` with ``{"queries": [str], "topk": int, "return_scores": bool}`` answers
``{"result": [[{"document": {"id", "contents"}, "score": float}, ...], ...]}`` (documents without the wrapper
when ``return_scores`` is false), so it and a Search-R1 e5/FAISS server are interchangeable. Bad requests get
a 4xx whose JSON body is ``{"error": "<one line>"}``: invalid JSON (NaN/Infinity, lone surrogates, nesting deeper
than a few hundred levels) 400, wrong types or values 422, too many queries or too large a body 413. A full
server answers 503, a search slower than the request timeout 504, anything unexpected 500 — all JSON.
``GET /health`` reports the corpus size.
"""


import asyncio
import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError, from_json

from agentbridge_search.data import Passage
from agentbridge_search.retrievers import Retriever, as_documents

DEFAULT_HOST = "127.0.0.1"
MAX_BATCH = 256
MAX_TOPK = 100
MAX_QUERY_CHARS = 2000
MAX_BODY_BYTES = 1 << 20
MAX_CONCURRENCY = 4  # searches running at once (threads)
MAX_QUEUE = 64  # requests waiting for a search thread beyond those; more get 503
REQUEST_TIMEOUT_S = 30.0  # from admission to reply (504 after)
BODY_TIMEOUT_S = 10.0  # to receive the whole body (408 after)
SHUTDOWN_GRACE_S = 2.0  # after SIGTERM, how long running requests may finish


class RequestError(ValueError):
    """A request the server refuses: status code and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def _query_length(query: str, info: ValidationInfo) -> str:
    limit = (info.context or {}).get("max_query_chars", MAX_QUERY_CHARS)
    if len(query) > limit:
        raise PydanticCustomError("too_long", "longer than {limit} characters", {"limit": limit})
    return query


class RetrieveRequest(BaseModel):
    """A ``/retrieve`` body. The caps come from the validation context (``max_batch``, ``max_topk``,
    ``max_query_chars``); unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")
    queries: list[Annotated[StrictStr, AfterValidator(_query_length)]]
    topk: StrictInt | None = None
    return_scores: StrictBool = False

    @field_validator("queries")
    @classmethod
    def _batch(cls, queries: list[str], info: ValidationInfo) -> list[str]:
        limit = (info.context or {}).get("max_batch", MAX_BATCH)
        if len(queries) > limit:
            raise PydanticCustomError("too_many", "at most {limit} per request, got {n}",
                                      {"limit": limit, "n": len(queries)})
        return queries

    @field_validator("topk")
    @classmethod
    def _topk(cls, topk: int | None, info: ValidationInfo) -> int | None:
        limit = (info.context or {}).get("max_topk", MAX_TOPK)
        if topk is not None and not 1 <= topk <= limit:
            raise PydanticCustomError("out_of_range", "must be between 1 and {limit}, got {topk}",
                                      {"limit": limit, "topk": topk})
        return topk


_EXPECTED = {"queries": "a list of strings", "queries[]": "a string", "topk": "an integer",
             "return_scores": "true or false"}


def _json_type(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)


def check_request(body: Any, *, max_batch: int = MAX_BATCH, max_topk: int = MAX_TOPK, default_topk: int = 3,
                  max_query_chars: int = MAX_QUERY_CHARS) -> tuple[list[str], int, bool]:
    """Validate a decoded ``/retrieve`` body → (queries, topk, return_scores), or raise RequestError."""
    if not isinstance(body, dict):
        raise RequestError(422, f"body must be a JSON object, got {_json_type(body)}")
    context = {"max_batch": max_batch, "max_topk": max_topk, "max_query_chars": max_query_chars}
    try:
        request = RetrieveRequest.model_validate(body, context=context)
    except ValidationError as e:
        error = e.errors(include_url=False)[0]
        loc = error["loc"]
        where = "".join(f"[{part}]" if isinstance(part, int) else str(part) for part in loc)
        if error["type"] == "too_many":
            raise RequestError(413, f"{where}: {error['msg']}") from None
        if error["type"] == "missing" or error["type"].endswith("_type"):
            key = "queries[]" if len(loc) > 1 else str(loc[0])
            got = "nothing" if error["type"] == "missing" else _json_type(error["input"])
            raise RequestError(422, f"{where}: must be {_EXPECTED[key]}, got {got}") from None
        raise RequestError(422, f"{where}: {error['msg']}") from None
    topk = default_topk if request.topk is None else request.topk
    return request.queries, topk, request.return_scores


def parse_request(raw: bytes, **caps: Any) -> tuple[list[str], int, bool]:
    """Decode a ``/retrieve`` body and validate it (see :func:`check_request`), or raise RequestError (400 for
    bytes that are not strict JSON: NaN/Infinity, lone surrogates, invalid UTF-8, nesting beyond a few hundred)."""
    try:
        body = from_json(raw, allow_inf_nan=False)
    except ValueError as e:
        raise RequestError(400, f"body is not valid JSON: {str(e).splitlines()[0]}") from None
    return check_request(body, **caps)


async def read_body(request: Any, limit: int, timeout_s: float) -> bytes:
    """The request body; RequestError 413 when ``Content-Length`` or the bytes received exceed ``limit`` (checked
    before and while reading), 408 when it takes longer than ``timeout_s``."""
    from starlette.requests import ClientDisconnect

    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > limit):
        raise RequestError(413, f"body is larger than {limit} bytes")
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise RequestError(413, f"body is larger than {limit} bytes")
    except TimeoutError:
        raise RequestError(408, f"the body did not arrive within {timeout_s:g} s") from None
    except ClientDisconnect:
        raise RequestError(499, "the client closed the request") from None
    return bytes(body)


def create_app(retriever: Retriever, *, max_batch: int = MAX_BATCH, max_topk: int = MAX_TOPK,
               default_topk: int = 3, max_query_chars: int = MAX_QUERY_CHARS, max_body_bytes: int = MAX_BODY_BYTES,
               max_concurrency: int = MAX_CONCURRENCY, max_queue: int = MAX_QUEUE,
               request_timeout_s: float = REQUEST_TIMEOUT_S, body_timeout_s: float = BODY_TIMEOUT_S) -> Any:
    """The FastAPI app serving ``retriever``.

    Limits: ``max_batch`` queries per request (413 above), ``max_topk``, ``max_query_chars`` per query (422 above),
    ``max_body_bytes`` (413 above, checked before parsing), ``max_concurrency`` searches running at once in their
    own threads with ``max_queue`` more requests waiting (503 beyond), ``request_timeout_s`` from admission to reply
    (504 after; a search not started yet is dropped), ``body_timeout_s`` to receive the body (408 after).
    ``app.state.stats`` counts refusals by status; ``app.state.admitted["requests"]`` is the requests searching or
    queued now.
    """
    from collections import Counter
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="retrieve")
    caps = {"max_batch": max_batch, "max_topk": max_topk, "default_topk": default_topk,
            "max_query_chars": max_query_chars}
    admitted = {"requests": 0}
    stats: Counter[str] = Counter()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        yield
        pool.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="agentbridge-search retrieval server", docs_url=None, redoc_url=None, openapi_url=None,
                  lifespan=lifespan)
    app.state.stats = stats
    app.state.admitted = admitted

    def refuse(status: int, reason: str) -> JSONResponse:
        stats[str(status)] += 1
        return JSONResponse({"error": reason}, status_code=status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return refuse(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        return refuse(500, f"internal error: {type(exc).__name__}")

    async def search(queries: list[str], topk: int) -> Any:
        if admitted["requests"] >= max_concurrency + max_queue:
            raise RequestError(503, f"the server is busy ({admitted['requests']} requests running or queued); "
                                    "retry later")
        admitted["requests"] += 1
        job = pool.submit(retriever.search, queries, topk)
        waiter = asyncio.wrap_future(job)
        waiter.add_done_callback(lambda _: admitted.__setitem__("requests", admitted["requests"] - 1))
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), request_timeout_s)
        except TimeoutError:
            job.cancel()  # dropped if it has not started; a running search finishes and frees its slot then
            raise RequestError(504, f"no reply within {request_timeout_s:g} s") from None

    async def retrieve(request: Request) -> JSONResponse:
        try:
            raw = await read_body(request, max_body_bytes, body_timeout_s)
            queries, topk, return_scores = parse_request(raw, **caps)
            hits = await search(queries, topk)
        except RequestError as e:
            return refuse(e.status, str(e))
        return JSONResponse({"result": as_documents(retriever, hits, return_scores)})

    app.add_route("/retrieve", retrieve, methods=["POST"])

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "retriever": retriever.kind, "passages": len(retriever.passages)}

    return app


def read_corpus(path: str) -> list[Passage]:
    """A Search-R1 corpus JSONL (``{"id", "contents": "\\"Title\\"\\ntext"}`` rows) as passages."""
    passages = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                title, _, text = str(row["contents"]).partition("\n")
                passages.append(Passage(str(row["id"]), title.strip().strip('"'), text.strip()))
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{n}: not a corpus row ({type(e).__name__}: {e}); "
                                 'expected {"id": ..., "contents": ...}') from None
    return passages


def retriever_from_env() -> Retriever:
    """The retriever described by ``AGENTBRIDGE_SEARCH_{RETRIEVER,CORPUS,WORLD_SEED,WORLD}`` (serve's settings)."""
    from agentbridge_search.retrievers import make_retriever, world_retriever

    kind = os.environ.get("AGENTBRIDGE_SEARCH_RETRIEVER", "bm25")
    corpus = os.environ.get("AGENTBRIDGE_SEARCH_CORPUS")
    if corpus:
        return make_retriever(kind, read_corpus(corpus))
    world = json.loads(os.environ.get("AGENTBRIDGE_SEARCH_WORLD") or "{}")
    return world_retriever(kind, int(os.environ.get("AGENTBRIDGE_SEARCH_WORLD_SEED", "0")), **world)


def app_from_env() -> Any:
    """App factory for uvicorn workers (``uvicorn --factory agentbridge_search.server:app_from_env``); limits from
    ``AGENTBRIDGE_SEARCH_{MAX_BATCH,MAX_TOPK,MAX_BODY_BYTES,MAX_CONCURRENCY,MAX_QUEUE,REQUEST_TIMEOUT_S}``."""
    env = os.environ.get
    return create_app(retriever_from_env(), max_batch=int(env("AGENTBRIDGE_SEARCH_MAX_BATCH", MAX_BATCH)),
                      max_topk=int(env("AGENTBRIDGE_SEARCH_MAX_TOPK", MAX_TOPK)),
                      max_body_bytes=int(env("AGENTBRIDGE_SEARCH_MAX_BODY_BYTES", MAX_BODY_BYTES)),
                      max_concurrency=int(env("AGENTBRIDGE_SEARCH_MAX_CONCURRENCY", MAX_CONCURRENCY)),
                      max_queue=int(env("AGENTBRIDGE_SEARCH_MAX_QUEUE", MAX_QUEUE)),
                      request_timeout_s=float(env("AGENTBRIDGE_SEARCH_REQUEST_TIMEOUT_S", REQUEST_TIMEOUT_S)))


def serve(*, host: str = DEFAULT_HOST, port: int = 8000, workers: int = 1, log_level: str = "warning",
          shutdown_grace_s: float = SHUTDOWN_GRACE_S) -> None:
    """Run the server (settings from the environment variables above); ``workers`` > 1 runs replicas on one port.
    On SIGTERM it stops accepting connections and gives running requests ``shutdown_grace_s`` to finish."""
    import uvicorn

    retriever_from_env()  # build (and cache) the index once before the workers load it
    uvicorn.run("agentbridge_search.server:app_from_env", factory=True, host=host, port=port, workers=workers,
                log_level=log_level, timeout_graceful_shutdown=shutdown_grace_s)  # type: ignore[arg-type]
