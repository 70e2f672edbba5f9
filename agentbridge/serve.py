"""``agentbridge serve MODEL``: an OpenAI-compatible chat-completions server over a local model.

The protocol vLLM and SGLang serve (``POST /v1/chat/completions``, ``GET /v1/models``), so anything written
against it — an LLM judge (``core/judge``), an evaluation script — moves to a real inference server by changing
its URL. Non-streaming; ``n`` choices per request.

Generation runs in one worker thread (:class:`Engine`) that decodes every running sequence one token per step, so
a long request never holds the short ones behind it, and a request whose client went away, whose deadline passed
or whose server is shutting down stops generating at the next step. Every limit is in :class:`Limits`; a request
beyond one is refused, never trimmed. Errors are JSON in OpenAI's shape, ``{"error": {"message", "type", "param",
"code"}}``, with the message repeated under ``detail`` for clients that read FastAPI's errors. ``GET /metrics``
reports the queue and counters in Prometheus' text format.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import inspect
import threading
import time
import uuid
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError, from_json


@dataclass(frozen=True)
class Limits:
    """What one server accepts; requests beyond a limit are refused (4xx, or 503 when full), never trimmed."""

    max_batch: int = 32
    """Sequences decoded together (a request with ``n`` choices counts ``n``)."""
    max_queue: int = 128
    """Sequences that may wait for a decoding slot beyond ``max_batch``; a request that does not fit gets 503."""
    max_tokens: int = 256
    """Completion tokens of a request that sets none (at most ``max_tokens_limit`` and what the context leaves)."""
    max_tokens_limit: int = 2048
    """The most ``max_tokens`` / ``max_completion_tokens`` a request may ask for (422 above)."""
    max_n: int = 8
    """The most choices (``n``) per request (422 above); never more than ``max_batch``."""
    max_body_bytes: int = 1 << 20
    """Request body size, checked from ``Content-Length`` and while reading, before parsing (413 above)."""
    body_timeout_s: float = 30.0
    """Time a client has to send the whole body (408 after)."""
    request_timeout_s: float = 300.0
    """Time from admission to the reply, queueing included (504 after; its generation stops)."""
    shutdown_grace_s: float = 2.0
    """After SIGTERM, how long running requests may finish before they get 503 (waiting ones get it at once)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            if not getattr(self, f.name) > 0:
                raise ValueError(f"{f.name}: must be positive, got {getattr(self, f.name)}")


# ---------------------------------------------------------------------------------------------------- requests


class TextPart(BaseModel):
    """One text part of a message's content list."""

    model_config = ConfigDict(strict=True)
    type: Literal["text"]
    text: str


class FunctionCall(BaseModel):
    model_config = ConfigDict(strict=True)
    name: str = Field(min_length=1)
    arguments: str = ""


class ToolCall(BaseModel):
    """An assistant message's tool call, as OpenAI writes it (``arguments`` is a JSON string)."""

    model_config = ConfigDict(strict=True)
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    """One message; unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore", strict=True)
    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = ""
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @field_validator("content", mode="wrap")
    @classmethod
    def _content_shape(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError("content_type", "must be a string, a list of text parts "
                                                      "({\"type\": \"text\", \"text\": ...}), or null") from None

    @model_validator(mode="after")
    def _consistent(self) -> ChatMessage:
        if self.tool_calls is not None and self.role != "assistant":
            raise PydanticCustomError("tool_calls", "only assistant messages carry tool calls")
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise PydanticCustomError("content", "null is only allowed in an assistant message with tool_calls")
        return self

    def for_template(self) -> dict[str, Any]:
        """The message as a chat template expects it: string content, tool-call arguments decoded."""
        content = self.content
        text = "".join(p.text for p in content) if isinstance(content, list) else (content or "")
        out: dict[str, Any] = {"role": self.role, "content": text}
        if self.name is not None:
            out["name"] = self.name
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.tool_calls:
            out["tool_calls"] = [{"type": "function", **({"id": c.id} if c.id else {}),
                                  "function": {"name": c.function.name, "arguments": _arguments(c.function.arguments)}}
                                 for c in self.tool_calls]
        return out


def _arguments(text: str) -> Any:
    try:
        return from_json(text, allow_inf_nan=False) if text else {}
    except ValueError:
        return text


class ChatRequest(BaseModel):
    """The fields of OpenAI's chat-completions request this server honours (strictly typed: ``"2"`` is not a
    number); other fields are ignored.

    ``ignore_eos`` is vLLM's extension: generate exactly ``max_tokens`` tokens. Validate with
    ``ChatRequest.model_validate(body, context={"limits": Limits(...)})`` to apply a server's caps.
    """

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = None
    n: int | None = Field(default=None, ge=1)
    stream: Literal[False] | None = None
    ignore_eos: bool = False

    @field_validator("max_tokens", "max_completion_tokens")
    @classmethod
    def _tokens_cap(cls, value: int | None, info: ValidationInfo) -> int | None:
        limits = (info.context or {}).get("limits")
        if value is not None and limits is not None and value > limits.max_tokens_limit:
            raise PydanticCustomError("limit_exceeded", "must be at most {limit} on this server, got {value}",
                                      {"limit": limits.max_tokens_limit, "value": value})
        return value

    @field_validator("n")
    @classmethod
    def _n_cap(cls, value: int | None, info: ValidationInfo) -> int | None:
        limits = (info.context or {}).get("limits")
        if value is not None and limits is not None and value > min(limits.max_n, limits.max_batch):
            raise PydanticCustomError("limit_exceeded", "must be at most {limit} on this server, got {value}",
                                      {"limit": min(limits.max_n, limits.max_batch), "value": value})
        return value

    @property
    def requested_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


_FIELD_ERRORS = ("content", "tool_calls")  # ChatMessage's own errors, named after the field they concern


class ApiError(Exception):
    """A refusal: HTTP status, one-line message, OpenAI error type, and the offending parameter if one."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code},
                "detail": self.message}


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def parse_request(raw: bytes, limits: Limits) -> ChatRequest:
    """Decode and validate a request body, or raise :class:`ApiError` (400 for bad JSON, 422 for a bad request).

    The JSON parser refuses NaN/Infinity, lone surrogates, invalid UTF-8 and nesting deeper than a few hundred
    levels; pydantic then checks types, ranges and the server's caps.
    """
    try:
        body = from_json(raw, allow_inf_nan=False)
    except ValueError as e:
        raise ApiError(400, f"body is not valid JSON: {str(e).splitlines()[0]}") from None
    if not isinstance(body, dict):
        raise ApiError(422, f"body must be a JSON object, got {_json_type(body)}")
    try:
        return ChatRequest.model_validate(body, context={"limits": limits})
    except ValidationError as e:
        first = e.errors(include_url=False, include_input=False)[0]
        where = _loc(first["loc"] + ((first["type"],) if first["type"] in _FIELD_ERRORS else ()))
        more = e.error_count() - 1
        raise ApiError(422, f"{where}: {first['msg']}" + (f" (and {more} more)" if more else ""),
                       param=where or None, code=first["type"]) from None


def _json_type(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)


# ------------------------------------------------------------------------------------------------------ engine


class ShuttingDown(RuntimeError):
    """The server stopped before the request finished."""


@dataclass(eq=False)
class Job:
    """One request inside the engine: ``n`` sequences from one prompt."""

    prompt: list[int]
    n: int
    budget: int
    temperature: float
    top_p: float
    seed: int | None
    ignore_eos: bool
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[list[tuple[list[int], str]]]
    cancelled: bool = False
    outputs: list[tuple[list[int], str] | None] = field(default_factory=list)
    remaining: int = 0


@dataclass(eq=False)
class _Seq:
    job: Job
    index: int
    ids: list[int]
    generator: Any


@dataclass(eq=False)
class _Cohort:
    """Sequences admitted together: one key/value cache, decoded a step at a time; finished rows are dropped."""

    seqs: list[_Seq]
    cache: Any = None
    mask: Any = None
    positions: Any = None
    last: Any = None
    credit: float = 1.0  # rounds owed; a cohort is stepped when it reaches 1 (see Engine._due)


class Engine:
    """Decodes running sequences a token per step in a worker thread, admitting waiting ones between steps.

    Sequences admitted together form a cohort with one key/value cache; up to ``max_cohorts`` cohorts are stepped in
    turn (see :meth:`_due`), so requests that arrive while others run start at the next step instead of after them,
    and cohorts of similar length are merged (see :meth:`_coalesce`). When the engine was idle it waits
    ``gather_s`` for the rest of a burst before the first prefill. A sequence that finishes, or whose job is
    cancelled, leaves its cohort at its next step. ``stats`` counts tokens and outcomes.
    """

    def __init__(self, model: Any, *, eos_id: int, pad_id: int, max_batch: int = 32, max_cohorts: int = 4,
                 gather_s: float = 0.005, min_share: float = 0.25, seed: int = 0) -> None:
        import torch

        from agentbridge.rollout.hf_policy import cache_kwarg

        self.model = model
        self.eos_id, self.pad_id = eos_id, pad_id
        self.max_batch, self.max_cohorts, self.gather_s, self.min_share = max_batch, max_cohorts, gather_s, min_share
        self.device = next(model.parameters()).device
        self._cache_kw = cache_kwarg(model)
        self._keep_kw = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._generator = torch.Generator(self.device).manual_seed(seed)
        self._lock = threading.Condition()
        self._waiting: collections.deque[Job] = collections.deque()
        self._cohorts: list[_Cohort] = []
        self._stopping = False
        self.stats: dict[str, int] = collections.Counter(
            dict.fromkeys(("tokens_generated", "requests_finished", "requests_cancelled", "requests_disconnected",
                           "requests_timed_out", "cohorts_merged"), 0))
        self.running = 0
        self._thread = threading.Thread(target=self._run, name="agentbridge-serve-engine", daemon=True)
        self._thread.start()

    # -- called from the event loop

    @property
    def waiting(self) -> int:
        """Sequences waiting for a decoding slot."""
        with self._lock:
            return sum(j.n for j in self._waiting)

    @property
    def closing(self) -> bool:
        return self._stopping

    def submit(self, job: Job) -> None:
        job.outputs = [None] * job.n
        job.remaining = job.n
        with self._lock:
            if self._stopping:
                raise ShuttingDown("the server is shutting down")
            self._waiting.append(job)
            self._lock.notify()

    def cancel(self, job: Job, reason: str = "cancelled") -> None:
        """Stop ``job``: it leaves the queue now, or its sequences leave their cohort at the next step."""
        if job.cancelled or job.future.done():
            return
        job.cancelled = True
        with self._lock:
            self.stats[f"requests_{reason}"] += 1
            with contextlib.suppress(ValueError):
                self._waiting.remove(job)

    def reject_waiting(self) -> None:
        """Fail every job still waiting for a slot with :class:`ShuttingDown` (shutdown begins)."""
        with self._lock:
            jobs = list(self._waiting)
            self._waiting.clear()
        for job in jobs:
            _deliver(job, ShuttingDown("the server is shutting down"))

    def close(self, timeout: float = 5.0) -> None:
        """Stop the worker; every unfinished job fails with :class:`ShuttingDown`."""
        with self._lock:
            self._stopping = True
            self._lock.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    # -- the worker thread

    def _run(self) -> None:
        import torch

        with torch.inference_mode():
            while True:
                with self._lock:
                    idle = not self._cohorts
                    while not self._stopping and not self._waiting and not self._cohorts:
                        self._lock.wait()
                    deadline = time.monotonic() + (self.gather_s if idle else 0.0)
                    while not self._stopping and (left := deadline - time.monotonic()) > 0:
                        self._lock.wait(left)  # a burst is starting: let its other requests arrive
                    if self._stopping:
                        break
                    admitted = self._admit()
                try:
                    if admitted:
                        cohort = _Cohort(admitted)
                        self._cohorts.append(cohort)
                        self._guard(cohort, self._prefill)
                    for cohort in self._due():
                        self._guard(cohort, self._step)
                    self._coalesce()
                except Exception as e:  # noqa: BLE001 - never let the worker die with requests waiting on it
                    for job in {id(s.job): s.job for c in self._cohorts for s in c.seqs}.values():
                        _deliver(job, e)
                    self._cohorts.clear()
                self.running = sum(len(c.seqs) for c in self._cohorts)
        jobs = {id(s.job): s.job for c in self._cohorts for s in c.seqs}
        with self._lock:
            jobs.update({id(j): j for j in self._waiting})
            self._waiting.clear()
        self._cohorts.clear()
        self.running = 0
        for job in jobs.values():
            _deliver(job, ShuttingDown("the server is shutting down"))

    def _due(self) -> list[_Cohort]:
        """The cohorts to step this round. A forward costs about the same for one row as for many, so a cohort is
        stepped in proportion to its rows against the largest, and at least every ``1 / min_share`` rounds: a long
        request left alone in its cohort beside a burst slows the burst by at most ``min_share`` and still moves."""
        biggest = max((len(c.seqs) for c in self._cohorts), default=1) or 1
        due = []
        for cohort in list(self._cohorts):
            cohort.credit += max(len(cohort.seqs) / biggest, self.min_share)
            if cohort.credit >= 1.0 - 1e-9:
                cohort.credit -= 1.0
                due.append(cohort)
        return due

    def _guard(self, cohort: _Cohort, fn: Any) -> None:
        """Run one prefill or step of ``cohort``; if it raises, the cohort's requests fail with the error."""
        jobs = {id(s.job): s.job for s in cohort.seqs}
        try:
            fn(cohort)
        except Exception as e:  # noqa: BLE001 - a failed forward fails its requests, not the server
            if cohort in self._cohorts:
                self._cohorts.remove(cohort)
            for job in jobs.values():
                _deliver(job, e)

    def _coalesce(self) -> None:
        """Merge cohorts of similar length into one, so a burst that arrived over several steps decodes in one
        forward per step. Their caches and masks are left-padded to the longer one; cohorts whose lengths differ by
        more than ``max(64, longer // 4)`` stay apart (the padding would cost more than the extra forward)."""
        i = 0
        while i < len(self._cohorts):
            a = self._cohorts[i]
            for b in self._cohorts[i + 1:]:
                if self._merge(a, b):
                    self._cohorts.remove(b)
                    self.stats["cohorts_merged"] += 1
                    break
            else:
                i += 1

    def _merge(self, a: _Cohort, b: _Cohort) -> bool:
        """Fold ``b`` into ``a``; False (nothing changed) when their lengths are too far apart or the cache is not
        transformers' plain ``DynamicLayer`` list whose length matches the mask."""
        import torch

        la, lb = _plain_layers(a), _plain_layers(b)
        if not a.seqs or not b.seqs or la is None or lb is None or len(la) != len(lb):
            return False
        width = max(a.mask.shape[1], b.mask.shape[1])
        if width - min(a.mask.shape[1], b.mask.shape[1]) > max(64, width // 4):
            return False

        def pad(t: Any, dim: int) -> Any:  # left-pad along ``dim`` to ``width``
            missing = width - t.shape[dim]
            if missing == 0:
                return t
            shape = list(t.shape)
            shape[dim] = missing
            return torch.cat([t.new_zeros(shape), t], dim=dim)

        try:  # build everything first: a failure leaves both cohorts as they were
            merged = [(torch.cat([pad(x.keys, -2), pad(y.keys, -2)]),
                       torch.cat([pad(x.values, -2), pad(y.values, -2)])) for x, y in zip(la, lb, strict=True)]
            mask = torch.cat([pad(a.mask, 1), pad(b.mask, 1)])
            positions, last = torch.cat([a.positions, b.positions]), torch.cat([a.last, b.last])
        except (RuntimeError, ValueError):
            return False
        for layer, (keys, values) in zip(la, merged, strict=True):
            layer.keys, layer.values = keys, values
        a.mask, a.positions, a.last, a.seqs = mask, positions, last, a.seqs + b.seqs
        return True

    def _admit(self) -> list[_Seq]:
        """Waiting jobs that fit in the free slots, in arrival order, as the next cohort's sequences."""
        import torch

        if len(self._cohorts) >= self.max_cohorts:
            return []
        free = self.max_batch - sum(len(c.seqs) for c in self._cohorts)
        seqs: list[_Seq] = []
        while self._waiting and self._waiting[0].n <= free:
            job = self._waiting.popleft()
            free -= job.n
            for i in range(job.n):
                gen = (torch.Generator(self.device).manual_seed((job.seed + i) & (2**63 - 1))
                       if job.seed is not None else self._generator)
                seqs.append(_Seq(job, i, [], gen))
        return seqs

    def _forward(self, ids: Any, mask: Any, positions: Any, cache: Any = None) -> tuple[Any, Any]:
        from agentbridge.rollout.hf_policy import output_cache

        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "position_ids": positions,
                                  "use_cache": True}
        if cache is not None:
            kwargs[self._cache_kw] = cache
        if self._keep_kw:
            kwargs["logits_to_keep"] = 1
        out = self.model(**kwargs)
        return out.logits[:, -1, :].float(), output_cache(out)

    def _prefill(self, cohort: _Cohort) -> None:
        import torch

        prompts = [s.job.prompt for s in cohort.seqs]
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts], device=self.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits, cohort.cache = self._forward(ids, mask, positions)
        cohort.mask, cohort.positions = mask, positions[:, -1]
        self._advance(cohort, logits)

    def _step(self, cohort: _Cohort) -> None:
        import torch

        self._keep(cohort, [i for i, s in enumerate(cohort.seqs) if not s.job.cancelled])
        if not cohort.seqs:
            return
        cohort.mask = torch.cat([cohort.mask, cohort.mask.new_ones((len(cohort.seqs), 1))], dim=1)
        cohort.positions = cohort.positions + 1
        logits, cohort.cache = self._forward(cohort.last[:, None], cohort.mask, cohort.positions[:, None],
                                             cohort.cache)
        self._advance(cohort, logits)

    def _advance(self, cohort: _Cohort, logits: Any) -> None:
        """Sample each row's next token, finish the rows that stop, keep the rest."""
        import torch

        tokens = self._sample(logits, cohort.seqs)
        keep = []
        for i, (s, token) in enumerate(zip(cohort.seqs, tokens, strict=True)):
            if s.job.cancelled:
                continue
            s.ids.append(token)
            self.stats["tokens_generated"] += 1
            if token == self.eos_id and not s.job.ignore_eos:
                self._finish(s, "stop")
            elif len(s.ids) >= s.job.budget:
                self._finish(s, "length")
            else:
                keep.append(i)
        cohort.last = torch.tensor(tokens, device=self.device)
        self._keep(cohort, keep)

    def _keep(self, cohort: _Cohort, rows: list[int]) -> None:
        import torch

        if len(rows) == len(cohort.seqs):
            return
        if not rows:
            cohort.seqs = []
            self._cohorts.remove(cohort)
            return
        index = torch.tensor(rows, device=self.device)
        cohort.cache.batch_select_indices(index)
        cohort.seqs = [cohort.seqs[i] for i in rows]
        cohort.mask, cohort.positions, cohort.last = cohort.mask[index], cohort.positions[index], cohort.last[index]

    def _sample(self, logits: Any, seqs: list[_Seq]) -> list[int]:
        import torch

        greedy = logits.argmax(-1).tolist()
        out = []
        for i, s in enumerate(seqs):
            job = s.job
            if job.temperature < 1e-5:
                out.append(int(greedy[i]))
                continue
            probs = torch.softmax(logits[i] / job.temperature, dim=-1)
            if job.top_p < 1.0:
                sorted_p, order = probs.sort(descending=True)
                sorted_p[(sorted_p.cumsum(0) - sorted_p) > job.top_p] = 0.0
                out.append(int(order[torch.multinomial(sorted_p, 1, generator=s.generator)]))
            else:
                out.append(int(torch.multinomial(probs, 1, generator=s.generator)))
        return out

    def _finish(self, s: _Seq, reason: str) -> None:
        job = s.job
        job.outputs[s.index] = (s.ids, reason)
        job.remaining -= 1
        if job.remaining == 0:
            self.stats["requests_finished"] += 1
            _deliver(job, [o for o in job.outputs if o is not None])


def _plain_layers(cohort: _Cohort) -> list[Any] | None:
    """The cache's layers when they are transformers' plain ``DynamicLayer`` list in step with the mask, else None."""
    layers = getattr(cohort.cache, "layers", None)
    if not isinstance(layers, list) or not layers or cohort.mask is None:
        return None
    for layer in layers:
        keys = getattr(layer, "keys", None)
        if type(layer).__name__ != "DynamicLayer" or keys is None or keys.shape[-2] != cohort.mask.shape[1]:
            return None
    return layers


def _deliver(job: Job, result: Any) -> None:
    """Resolve ``job.future`` from any thread (a result, or an exception to raise in the handler)."""

    def settle() -> None:
        if job.future.done():
            return
        if isinstance(result, BaseException):
            job.future.set_exception(result)
        else:
            job.future.set_result(result)

    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        job.loop.call_soon_threadsafe(settle)


# --------------------------------------------------------------------------------------------------------- app


async def read_body(request: Any, limit: int, timeout_s: float) -> bytes:
    """The request body; 413 when ``Content-Length`` or the bytes received exceed ``limit`` (checked before and
    while reading, so an oversized body is never held), 408 when it takes longer than ``timeout_s``."""
    from starlette.requests import ClientDisconnect

    length = request.headers.get("content-length")
    if length is not None and not length.isdigit():
        raise ApiError(400, "Content-Length is not a number")
    too_big = ApiError(413, f"body is larger than {limit} bytes", code="body_too_large")
    if length is not None and int(length) > limit:
        raise too_big
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise too_big
    except TimeoutError:
        raise ApiError(408, f"the body did not arrive within {timeout_s:g} s", type="timeout") from None
    except ClientDisconnect:
        raise ApiError(499, "the client closed the request") from None
    return bytes(body)


async def _client_gone(request: Any) -> None:
    """Return when the client disconnects (the body has been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def make_app(model_path: str, *, name: str | None = None, seed: int = 0, limits: Limits | None = None,
             **limit_overrides: Any) -> Any:
    """The FastAPI app serving ``model_path`` (a local model directory or a builtin) under ``name``.

    ``limits`` (or any :class:`Limits` field as a keyword, e.g. ``max_batch=8``) sets what the server accepts.
    The app's ``state.engine`` is the :class:`Engine`; ``state.limits`` the limits in force.
    """
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from transformers import AutoModelForCausalLM

    from agentbridge.models import load_tokenizer, resolve_model_path

    limits = dataclasses.replace(limits or Limits(), **limit_overrides)
    tokenizer = load_tokenizer(model_path)
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path(model_path))
    model.eval()
    eos_id = tokenizer.eos_token_id
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
    served = name or model_path
    context = int(getattr(model.config, "max_position_embeddings", 4096))
    engine = Engine(model, eos_id=eos_id, pad_id=pad_id, max_batch=limits.max_batch, seed=seed)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        yield
        engine.close()

    app = FastAPI(title=f"agentbridge serve {served}", lifespan=lifespan)
    app.state.limits = limits
    app.state.engine = engine
    admitted = {"rows": 0}

    def refuse(error: ApiError) -> JSONResponse:
        engine.stats[f"refused_{error.status}"] += 1
        return JSONResponse(error.body(), status_code=error.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return refuse(ApiError(exc.status_code, str(exc.detail), type="invalid_request_error"))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        return refuse(ApiError(500, f"internal error: {type(exc).__name__}", type="server_error"))

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok", "model": served}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": served, "object": "model", "owned_by": "agentbridge"}]}

    @app.get("/metrics")
    def metrics() -> PlainTextResponse:
        lines = [f"agentbridge_serve_running_sequences {engine.running}",
                 f"agentbridge_serve_waiting_sequences {engine.waiting}",
                 f"agentbridge_serve_admitted_sequences {admitted['rows']}"]
        lines += [f"agentbridge_serve_{key}_total {value}" for key, value in sorted(engine.stats.items())]
        return PlainTextResponse("\n".join(lines) + "\n")

    def render(request: ChatRequest) -> list[int]:
        try:
            return list(tokenizer.apply_chat_template([m.for_template() for m in request.messages],
                                                      add_generation_prompt=True, tokenize=True, return_dict=False))
        except Exception as e:  # noqa: BLE001 - a template that refuses these messages: the request's fault
            raise ApiError(400, f"the model's chat template refused the messages: {type(e).__name__}: "
                                f"{str(e).splitlines()[0] if str(e) else ''}", param="messages") from None

    async def complete(http: Request) -> dict[str, Any]:
        raw = await read_body(http, limits.max_body_bytes, limits.body_timeout_s)
        request = parse_request(raw, limits)
        if request.model not in (None, served):
            raise ApiError(404, f"model {request.model!r} is not served here (this server: {served!r})",
                           param="model", code="model_not_found")
        rows = request.n or 1
        if engine.closing:
            raise ApiError(503, "the server is shutting down", type="server_error")
        if admitted["rows"] + rows > limits.max_batch + limits.max_queue:
            raise ApiError(503, f"the server is busy ({admitted['rows']} sequences running or queued); retry later",
                           type="server_error", code="queue_full")
        admitted["rows"] += rows
        job: Job | None = None
        try:
            async with asyncio.timeout(limits.request_timeout_s):
                prompt = await asyncio.to_thread(render, request)
                asked = request.requested_tokens
                if asked is not None and len(prompt) + asked > context:
                    raise ApiError(400, f"the prompt is {len(prompt)} tokens and max_tokens {asked}; this model's "
                                        f"context is {context}", param="max_tokens", code="context_length_exceeded")
                budget = asked or min(limits.max_tokens, limits.max_tokens_limit, context - len(prompt))
                if budget < 1:
                    raise ApiError(400, f"the prompt is {len(prompt)} tokens; this model's context is {context}",
                                   param="messages", code="context_length_exceeded")
                loop = asyncio.get_running_loop()
                job = Job(prompt, rows, budget, 1.0 if request.temperature is None else request.temperature,
                          1.0 if request.top_p is None else request.top_p, request.seed, request.ignore_eos, loop,
                          loop.create_future())
                engine.submit(job)
                gone: asyncio.Future[Any] = asyncio.create_task(_client_gone(http))
                try:
                    await asyncio.wait({job.future, gone}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    gone.cancel()
                if not job.future.done():
                    engine.cancel(job, "disconnected")
                    raise ApiError(499, "the client closed the request")
                outputs = job.future.result()
        except TimeoutError:
            if job is not None:
                engine.cancel(job, "timed_out")
            raise ApiError(504, f"no reply within {limits.request_timeout_s:g} s", type="timeout") from None
        except ShuttingDown as e:
            raise ApiError(503, str(e), type="server_error") from None
        finally:
            admitted["rows"] -= rows
            if job is not None and not job.future.done():
                engine.cancel(job)
        choices = []
        for i, (ids, reason) in enumerate(outputs):
            text = tokenizer.decode([t for t in ids if t != eos_id], skip_special_tokens=True)
            choices.append({"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": reason})
        completion = sum(len(ids) for ids, _ in outputs)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": served, "choices": choices,
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": completion,
                      "total_tokens": len(prompt) + completion},
        }

    async def chat(http: Request) -> JSONResponse:
        try:
            return JSONResponse(await complete(http))
        except ApiError as e:
            return refuse(e)

    app.add_route("/v1/chat/completions", chat, methods=["POST"])  # a plain route: the body is read by hand

    return app


def serve(model_path: str, *, host: str = "127.0.0.1", port: int = 8000, **kwargs: Any) -> None:
    """Serve ``model_path`` until SIGINT/SIGTERM (uvicorn, one worker); ``kwargs`` go to :func:`make_app`.

    On SIGTERM the server stops accepting connections, refuses the queued requests (503), gives the running ones
    ``shutdown_grace_s`` to finish, then refuses those too and exits.
    """
    import uvicorn

    app = make_app(model_path, **kwargs)
    grace = app.state.limits.shutdown_grace_s
    config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                            timeout_graceful_shutdown=grace + 1.0)
    graceful_server(config, app.state.engine, grace).run()


def graceful_server(config: Any, engine: Engine, grace: float) -> Any:
    """A ``uvicorn.Server`` whose shutdown first refuses the queued requests (503) and gives the running ones
    ``grace`` seconds before the engine stops and refuses them too."""
    import uvicorn

    class GracefulServer(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            engine.reject_waiting()
            asyncio.get_running_loop().call_later(grace, engine.close, 0.0)
            await super().shutdown(sockets)

    return GracefulServer(config)
