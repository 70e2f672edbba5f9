"""``core/judge``: a reward scored by an LLM judge behind an OpenAI-compatible chat-completions endpoint.

The judge gets a rubric (system message) and the episode — the question, the reference answer and the final
answer, or the whole transcript — and replies with ``Score: N`` on the rubric's scale; the reward is N / scale.
Requests go out at most ``max_concurrency`` at a time per event loop, each with a timeout, retried with
exponential backoff on connection errors, timeouts and 5xx/429 replies, and cached on the request's content (the
same request is never sent twice in a process). Anything that still fails — the server down, too slow, a reply
that is not JSON or holds no score — raises :class:`JudgeError`, which the driver counts as a reward error of that
episode (``reward/errors``), scoring the component 0; it never fails the batch. Calls are async (``httpx``), so a
slow judge never blocks the driver's event loop: other episodes keep generating while one is judged.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentbridge.rewards import extract_answer, gold_answers

if TYPE_CHECKING:
    from agentbridge.env import Task
    from agentbridge.trajectory import Trajectory

DEFAULT_RUBRIC = ("You grade answers. Compare the final answer with the reference answer. Reply with one line "
                  "'Score: N', where N is 10 when the answer means the same as the reference, 0 when it does not, "
                  "and in between for a partly right answer.")
_SCORE = re.compile(r"(?i)\bscore\s*[:=]?\s*(-?\d+(?:\.\d+)?)")
_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class JudgeError(RuntimeError):
    """The judge gave no score for this episode (the message says why, in one line)."""


class JudgeArgs(BaseModel):
    """``core/judge``'s arguments (``reward[i].args``)."""

    model_config = ConfigDict(extra="forbid")
    url: str = Field(description="Base URL of the OpenAI-compatible API, e.g. http://127.0.0.1:8000/v1")
    model: str | None = Field(default=None, description="Model name sent to the server (None: its default)")
    rubric: str = Field(default=DEFAULT_RUBRIC, description="The judge's instructions (the system message)")
    input: Literal["answer", "trajectory"] = Field(
        default="answer", description="answer: question, reference and final answer; trajectory: every turn")
    scale: float = Field(default=10.0, gt=0, description="The rubric's top score; the reward is score / scale")
    max_concurrency: int = Field(default=8, ge=1, description="Requests in flight at once")
    timeout_s: float = Field(default=30.0, gt=0, description="Seconds one request may take")
    retries: int = Field(default=2, ge=0, description="Retries after a failed request")
    backoff_s: float = Field(default=0.5, ge=0, description="First retry's wait; doubles each retry")
    max_tokens: int = Field(default=32, ge=1, description="The judge's reply budget")
    temperature: float = Field(default=0.0, ge=0, description="The judge's sampling temperature")
    api_key_env: str = Field(default="OPENAI_API_KEY", description="Environment variable holding the API key")
    cache_size: int = Field(default=100_000, ge=0, description="Replies kept, keyed on the request (the least "
                            "recently used go first)")


def judge_prompt(trajectory: Trajectory, task: Task, input: str) -> str:
    """The user message the judge reads for one episode."""
    reference = " | ".join(gold_answers(task)) or "(none)"
    if input == "trajectory":
        turns = "\n".join(f"[assistant] {t.text}" + "".join(f"\n[{o.get('role', 'tool')}] {o.get('content', '')}"
                                                             for o in t.observations) for t in trajectory.turns)
        return f"Question: {task.prompt}\nReference answer: {reference}\nTranscript:\n{turns}"
    answer = extract_answer(trajectory.final_text)
    return (f"Question: {task.prompt}\nReference answer: {reference}\n"
            f"Final answer: {answer if answer is not None else trajectory.final_text.strip() or '(none)'}")


def parse_score(text: str, scale: float) -> float:
    """``Score: N`` (or a reply that is just a number) on ``[0, scale]``, as a fraction; JudgeError otherwise."""
    found = _SCORE.search(text) or re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*\.?\s*", text)
    if found is None:
        raise JudgeError(f"the judge's reply holds no score: {text.strip()[:80]!r}")
    value = float(found.group(1))
    if not 0 <= value <= scale:
        raise JudgeError(f"the judge's score {value:g} is outside [0, {scale:g}]")
    return value / scale


class Judge:
    """The client of one judge endpoint: a cache of its replies, and per event loop its HTTP client and limit."""

    def __init__(self, args: JudgeArgs) -> None:
        self.args = args
        self.cache: OrderedDict[str, float] = OrderedDict()  # the latest args.cache_size replies, oldest first
        self.requests = 0  # HTTP requests sent, retries included
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Any, asyncio.Semaphore]] = (
            weakref.WeakKeyDictionary())

    def _session(self) -> tuple[Any, asyncio.Semaphore]:
        import httpx

        loop = asyncio.get_running_loop()
        if loop not in self._loops:
            key = os.environ.get(self.args.api_key_env)
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            client = httpx.AsyncClient(timeout=self.args.timeout_s, headers=headers, trust_env=False)
            self._loops[loop] = (client, asyncio.Semaphore(self.args.max_concurrency))
        return self._loops[loop]

    def body(self, trajectory: Trajectory, task: Task) -> dict[str, Any]:
        a = self.args
        body: dict[str, Any] = {"messages": [{"role": "system", "content": a.rubric},
                                             {"role": "user", "content": judge_prompt(trajectory, task, a.input)}],
                                "max_tokens": a.max_tokens, "temperature": a.temperature}
        if a.model is not None:
            body["model"] = a.model
        return body

    async def score(self, trajectory: Trajectory, task: Task) -> float:
        body = self.body(trajectory, task)
        key = hashlib.sha256(json.dumps([self.args.url, body], sort_keys=True).encode()).hexdigest()
        if key in self.cache:
            self.cache.move_to_end(key)
            return self.cache[key]
        value = parse_score(await self._post(body), self.args.scale)
        self.cache[key] = value
        while len(self.cache) > self.args.cache_size:
            self.cache.popitem(last=False)
        return value

    async def _post(self, body: dict[str, Any]) -> str:
        import httpx

        client, gate = self._session()
        url = self.args.url.rstrip("/") + "/chat/completions"
        last = ""
        for attempt in range(self.args.retries + 1):
            if attempt:
                await asyncio.sleep(self.args.backoff_s * 2 ** (attempt - 1))
            try:
                async with gate:
                    self.requests += 1
                    resp = await client.post(url, json=body)
            except httpx.TimeoutException:
                last = f"no reply within {self.args.timeout_s:g}s"
                continue
            except httpx.HTTPError as e:
                last = f"{type(e).__name__}: {str(e) or 'connection failed'}"
                continue
            if resp.status_code in _RETRY_STATUS:
                last = f"HTTP {resp.status_code}"
                continue
            if resp.status_code != 200:
                raise JudgeError(f"{url}: HTTP {resp.status_code}: {resp.text.strip()[:120]}")
            try:
                content = resp.json()["choices"][0]["message"]["content"]
            except (ValueError, KeyError, IndexError, TypeError):
                raise JudgeError(f"{url}: the reply is not a chat completion: {resp.text.strip()[:80]!r}") from None
            return str(content or "")
        raise JudgeError(f"{url}: {last} (after {self.args.retries + 1} attempts)")


_JUDGES: dict[str, Judge] = {}


async def judge_reward(trajectory: Trajectory, task: Task, **args: Any) -> float:
    """``core/judge``: the LLM judge's score of the episode, on [0, 1] (see the module's docstring)."""
    parsed = JudgeArgs(**args)
    key = parsed.model_dump_json()
    if key not in _JUDGES:
        _JUDGES[key] = Judge(parsed)
    return await _JUDGES[key].score(trajectory, task)


judge_reward.Args = JudgeArgs  # type: ignore[attr-defined]  # what plugin_args checks a spec's args against
