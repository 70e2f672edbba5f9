"""The conformance suite's one stand-in: :class:`GoldenRouterStandIn`, a loopback HTTP server in place of slime's
SGLang router and engines (SGLang needs a GPU).

It answers what slime's rollout path asks of the router: ``POST /generate`` (``{"input_ids", "sampling_params",
"return_logprob"}`` in; ``{"text", "meta_info": {"output_token_logprobs": [[logprob, id, null], ...],
"finish_reason": {"type": "stop" | "length"}, "prompt_tokens", "completion_tokens", "cached_tokens"}}`` out, as
SGLang answers), with :func:`agentbridge.conformance.golden.golden_turn` cut to the request's ``max_new_tokens``;
and ``GET /workers`` (``{"workers": []}``: slime's ``abort`` finds no engine to stop). It binds 127.0.0.1 on a free
port and serves from a thread until closed. Plain standard library: no slime, no SGLang.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentbridge.adapter.conformance import golden_turn


class GoldenRouterStandIn:
    """Golden turns over SGLang's ``/generate`` protocol on 127.0.0.1; a context manager (``with ... as router``)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.requests: list[dict[str, Any]] = []  # every /generate request, in order of arrival
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="golden-router", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        """SGLang's reply to one ``/generate`` request: the golden turn for its prompt."""
        params = request.get("sampling_params") or {}
        ids, logprobs = golden_turn(self.tokenizer, [int(t) for t in request["input_ids"]],
                                    int(params["max_new_tokens"]))
        finish = "stop" if ids and ids[-1] == self.eos else "length"
        return {"text": self.tokenizer.decode(ids),
                "meta_info": {"output_token_logprobs": [[lp, t, None] for t, lp in zip(ids, logprobs, strict=True)],
                              "finish_reason": {"type": finish}, "prompt_tokens": len(request["input_ids"]),
                              "completion_tokens": len(ids), "cached_tokens": 0}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        router = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.rstrip("/") == "/workers":
                    self._send(200, {"workers": []})
                else:
                    self._send(404, {"error": f"no route {self.path}"})

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                if self.path.rstrip("/") != "/generate":
                    self._send(404, {"error": f"no route {self.path}"})
                    return
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with router._lock:
                    router.requests.append(request)
                try:
                    self._send(200, router.reply(request))
                except (KeyError, TypeError, ValueError) as e:
                    self._send(400, {"error": f"{type(e).__name__}: {e}"})

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

        return Handler

    def __enter__(self) -> GoldenRouterStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
