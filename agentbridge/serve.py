"""``agentbridge serve MODEL``: an OpenAI-compatible chat-completions server over a local model.

The protocol vLLM and SGLang serve (``POST /v1/chat/completions``, ``GET /v1/models``), so anything written
against it — an LLM judge (``core/judge``), an evaluation script — moves to a real inference server by changing
its URL. Concurrent requests are batched into one ``generate`` call (``HFPolicy``). Non-streaming, ``n`` = 1.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentbridge.rollout.trajectory import SamplingParams


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = ""


class ChatRequest(BaseModel):
    """The fields of OpenAI's chat-completions request this server honours (others are accepted and ignored)."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = None
    n: int = Field(default=1, ge=1, le=1)
    stream: Literal[False] = False


def make_app(model_path: str, *, name: str | None = None, max_batch: int = 32, max_tokens: int = 256,
             seed: int = 0) -> Any:
    """The FastAPI app serving ``model_path`` (a local model directory or a builtin) under ``name``."""
    from fastapi import FastAPI, HTTPException

    from agentbridge.models import load_tokenizer
    from agentbridge.rollout.hf_policy import HFPolicy

    tokenizer = load_tokenizer(model_path)
    policy = HFPolicy.from_pretrained(model_path, tokenizer, max_batch=max_batch, seed=seed)
    served = name or model_path
    context = int(getattr(policy.model.config, "max_position_embeddings", 4096))
    app = FastAPI(title=f"agentbridge serve {served}")

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok", "model": served}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": served, "object": "model", "owned_by": "agentbridge"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: ChatRequest) -> dict[str, Any]:
        if request.model not in (None, served):
            raise HTTPException(404, f"model {request.model!r} is not served here (this server: {served!r})")
        messages = [m.model_dump(exclude_none=True) for m in request.messages]
        prompt = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                    return_dict=False))
        budget = min(request.max_completion_tokens or request.max_tokens or max_tokens, context - len(prompt))
        if budget < 1:
            raise HTTPException(400, f"the prompt is {len(prompt)} tokens; this model's context is {context}")
        sampling = SamplingParams(temperature=request.temperature, top_p=request.top_p, max_tokens=budget,
                                  seed=request.seed)
        gen = await policy.generate(prompt, sampling)
        ids = [t for t in gen.token_ids if t != policy.eos_id]
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": served,
            "choices": [{"index": 0, "message": {"role": "assistant",
                                                 "content": tokenizer.decode(ids, skip_special_tokens=True)},
                         "finish_reason": gen.finish_reason}],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(gen.token_ids),
                      "total_tokens": len(prompt) + len(gen.token_ids)},
        }

    return app


def serve(model_path: str, *, host: str = "127.0.0.1", port: int = 8000, **kwargs: Any) -> None:
    """Serve ``model_path`` until interrupted (uvicorn, one worker)."""
    import uvicorn

    uvicorn.run(make_app(model_path, **kwargs), host=host, port=port, log_level="warning")
