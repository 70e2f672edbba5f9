"""A FastAPI retrieval server speaking the Search-R1 protocol.

``POST /retrieve`` with ``{"queries": [str], "topk": int, "return_scores": bool}`` answers
``{"result": [[{"document": {"id", "contents"}, "score": float}, ...], ...]}`` (documents without the wrapper
when ``return_scores`` is false), so it and a Search-R1 e5/FAISS server are interchangeable. Bad requests get
a 4xx whose JSON body is ``{"error": "<one line>"}``. ``GET /health`` reports the corpus size.
"""


import json
import os
from typing import Any

from agentbridge_search.data import Passage
from agentbridge_search.retrievers import Retriever, as_documents

DEFAULT_HOST = "127.0.0.1"
MAX_BATCH = 256
MAX_TOPK = 100
MAX_QUERY_CHARS = 2000
MAX_BODY_BYTES = 1 << 20


class RequestError(ValueError):
    """A request the server refuses: status code and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def check_request(body: Any, *, max_batch: int = MAX_BATCH, max_topk: int = MAX_TOPK,
                  default_topk: int = 3) -> tuple[list[str], int, bool]:
    """Validate a decoded ``/retrieve`` body → (queries, topk, return_scores), or raise RequestError."""
    if not isinstance(body, dict):
        raise RequestError(422, f"body must be a JSON object, got {type(body).__name__}")
    queries = body.get("queries")
    if not isinstance(queries, list):
        raise RequestError(422, f"queries: must be a list of strings, got {type(queries).__name__}")
    if len(queries) > max_batch:
        raise RequestError(413, f"queries: at most {max_batch} per request, got {len(queries)}")
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise RequestError(422, f"queries[{i}]: must be a string, got {type(q).__name__}")
        if len(q) > MAX_QUERY_CHARS:
            raise RequestError(422, f"queries[{i}]: longer than {MAX_QUERY_CHARS} characters")
    topk = body.get("topk")
    if topk is None:
        topk = default_topk
    if not isinstance(topk, int) or isinstance(topk, bool):
        raise RequestError(422, f"topk: must be an integer, got {type(topk).__name__}")
    if not 1 <= topk <= max_topk:
        raise RequestError(422, f"topk: must be between 1 and {max_topk}, got {topk}")
    return_scores = body.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise RequestError(422, f"return_scores: must be true or false, got {type(return_scores).__name__}")
    return queries, topk, return_scores


def create_app(retriever: Retriever, *, max_batch: int = MAX_BATCH, max_topk: int = MAX_TOPK,
               default_topk: int = 3) -> Any:
    """The FastAPI app serving ``retriever``."""
    from fastapi import FastAPI, Request
    from fastapi.concurrency import run_in_threadpool
    from fastapi.responses import JSONResponse

    app = FastAPI(title="agentbridge-search retrieval server", docs_url=None, redoc_url=None)

    def refuse(status: int, reason: str) -> JSONResponse:
        return JSONResponse({"error": reason}, status_code=status)

    @app.post("/retrieve")
    async def retrieve(request: Request) -> Any:
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return refuse(413, f"body is larger than {MAX_BODY_BYTES} bytes")
        raw = await request.body()
        if len(raw) > MAX_BODY_BYTES:
            return refuse(413, f"body is larger than {MAX_BODY_BYTES} bytes")
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            return refuse(400, f"body is not valid JSON: {str(e).splitlines()[0]}")
        try:
            queries, topk, return_scores = check_request(body, max_batch=max_batch, max_topk=max_topk,
                                                         default_topk=default_topk)
        except RequestError as e:
            return refuse(e.status, str(e))
        hits = await run_in_threadpool(retriever.search, queries, topk)
        return {"result": as_documents(retriever, hits, return_scores)}

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
    """App factory for uvicorn workers (``uvicorn --factory agentbridge_search.server:app_from_env``)."""
    return create_app(retriever_from_env(), max_batch=int(os.environ.get("AGENTBRIDGE_SEARCH_MAX_BATCH", MAX_BATCH)),
                      max_topk=int(os.environ.get("AGENTBRIDGE_SEARCH_MAX_TOPK", MAX_TOPK)))


def serve(*, host: str = DEFAULT_HOST, port: int = 8000, workers: int = 1, log_level: str = "warning") -> None:
    """Run the server (settings from the environment variables above); ``workers`` > 1 runs replicas on one port."""
    import uvicorn

    retriever_from_env()  # build (and cache) the index once before the workers load it
    uvicorn.run("agentbridge_search.server:app_from_env", factory=True, host=host, port=port, workers=workers,
                log_level=log_level)
