"""Stand-in for the vLLM reward-model server veRL starts (vLLM cannot run on CPU): a real HTTP server answering
``POST /classify`` in vLLM's request and response format over a real ``AutoModelForSequenceClassification``.

Only what veRL's reward loop and agentbridge's driver use: ``model`` (must name the served model, else vLLM's 404),
``input`` (a text or a list), ``use_activation`` (false: raw logits), ``truncate_prompt_tokens`` (the last tokens
kept); the answer is ``{"object": "list", "model", "data": [{"index", "label", "probs", "num_classes"}], "usage"}``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ClassifyServerStandIn:
    """The vLLM ``/classify`` stand-in over the model at ``path``, served under that name; ``requests`` records each
    request's body."""

    def __init__(self, path: str) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.name = path
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.tokenizer.truncation_side = "left"  # vLLM's truncate_prompt_tokens keeps the last tokens
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32).eval()
        self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def classify(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON answer) for one ``/classify`` request."""
        import torch

        if body.get("model") not in (None, self.name):
            return 404, {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                   "type": "NotFoundError", "code": 404}}
        texts = [body["input"]] if isinstance(body["input"], str) else list(body["input"])
        limit = body.get("truncate_prompt_tokens")
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, truncation=limit is not None,
                             max_length=limit)
        with self._lock, torch.no_grad():
            logits = self.model(**enc).logits.float()
        probs = logits if body.get("use_activation") is False else (
            torch.sigmoid(logits) if logits.shape[-1] == 1 else torch.softmax(logits, -1))
        self.requests.append(body)
        tokens = int(enc["attention_mask"].sum())
        return 200, {"id": f"classify-{len(self.requests)}", "object": "list", "model": self.name,
                     "data": [{"index": i, "label": str(int(p.argmax())), "probs": p.tolist(),
                               "num_classes": int(p.shape[-1])} for i, p in enumerate(probs)],
                     "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0}}


@contextmanager
def serving(standin: ClassifyServerStandIn) -> Iterator[str]:
    """Serve ``standin`` on a free port of 127.0.0.1 in a thread; yields its ``host:port`` (a router address)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            if self.path.rstrip("/") != "/classify":
                status, answer = 404, {"detail": "Not Found"}
            else:
                status, answer = standin.classify(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
